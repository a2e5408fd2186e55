"""Pod facts many checks ask: Ready, serving (Ready and not being deleted), restarts."""

from __future__ import annotations

from types import SimpleNamespace as NS

from conformance.kube.pods import is_ready, is_serving, restarts


def _pod(ready: str, deleting: bool = False, counts: dict[str, int] | None = None) -> NS:
    statuses = [NS(name=name, restart_count=count) for name, count in (counts or {}).items()]
    return NS(
        metadata=NS(deletion_timestamp="2026-11-29T00:00:00Z" if deleting else None),
        status=NS(conditions=[NS(type="Ready", status=ready)], container_statuses=statuses),
    )


def test_ready_and_serving_differ_for_a_pod_being_deleted() -> None:
    assert is_ready(_pod("True")) and is_serving(_pod("True"))
    assert is_ready(_pod("True", deleting=True)) and not is_serving(_pod("True", deleting=True))
    assert not is_ready(_pod("False"))


def test_restarts_count_all_containers_or_the_one_named() -> None:
    pod = _pod("True", counts={"ray-head": 2, "autoscaler": 1})
    assert (restarts(pod), restarts(pod, "ray-head"), restarts(pod, "missing")) == (3, 2, 0)
