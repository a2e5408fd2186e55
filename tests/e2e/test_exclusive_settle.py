"""An exclusive check starts once the namespaces of the checks before it are gone (exclusive.settle),
on the real API server: a namespace held open by a finalizer is waited for, then named."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from conformance import exclusive
from conformance.kube import namespaces
from conformance.kube.wait import wait_for, wait_gone

FINALIZER = "kuberay-conformance.test/hold"


@pytest.fixture
def held_namespace(core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """A namespace of a made-up run, deleted while a ConfigMap's finalizer holds it Terminating."""
    run = f"settle-{uuid.uuid4().hex[:6]}"
    name = f"krc-{run}"
    core.create_namespace({"metadata": {"name": name, "labels": {"krc-test-run": run}}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": [FINALIZER]}})
    core.delete_namespace(name)
    wait_for(
        core.list_namespace,
        lambda ns: ns.status.phase == "Terminating",
        what=f"namespace {name} terminating",
        timeout=30,
        field_selector=f"metadata.name={name}",
    )
    yield name, f"krc-test-run={run}"
    release(core, name)


def release(core: client.CoreV1Api, namespace: str) -> None:
    try:
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def test_a_terminating_namespace_is_waited_for_and_named_when_it_stays(
    api: client.ApiClient, core: client.CoreV1Api, held_namespace: tuple[str, str]
) -> None:
    name, selector = held_namespace
    assert exclusive.terminating(api, selector) == [name]
    note = exclusive.settle(api, selector, timeout=3)
    assert name in note and "still terminating" in note


def test_settle_returns_once_the_namespace_is_gone(
    api: client.ApiClient, core: client.CoreV1Api, held_namespace: tuple[str, str]
) -> None:
    name, selector = held_namespace
    release(core, name)
    assert exclusive.settle(api, selector, timeout=60) == ""
    assert exclusive.terminating(api, selector) == []


def test_a_checks_namespace_ends_its_pods_without_their_whole_grace(
    core: client.CoreV1Api, toolbox: str
) -> None:
    """A pod whose PID 1 ignores SIGTERM (as bash does in a Ray pod) would hold its namespace for
    its whole 30 s grace; namespaces.delete asks for a short one once the namespace terminates."""
    name = f"krc-teardown-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"kuberay-conformance.io/test": "true"}}})
    container = {"name": "main", "image": toolbox, "imagePullPolicy": "Never"}
    container["command"] = ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
    core.create_namespaced_pod(name, {"metadata": {"name": "stubborn"}, "spec": {"containers": [container]}})
    wait_for(
        core.list_namespaced_pod,
        lambda pod: pod.status.phase == "Running",
        what="pod stubborn running",
        timeout=120,
        namespace=name,
    )
    namespaces.delete(core, name)
    pod = core.read_namespaced_pod("stubborn", name)
    assert pod.metadata.deletion_grace_period_seconds == namespaces.POD_GRACE_AFTER_CHECK_S
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(name, {"metadata": {"name": "late"}, "spec": {"containers": [container]}})
    assert refused.value.status == 403  # a terminating namespace admits no new pod: none comes back
    wait_gone(
        core.list_namespace, what=f"namespace {name}", timeout=60, field_selector=f"metadata.name={name}"
    )
