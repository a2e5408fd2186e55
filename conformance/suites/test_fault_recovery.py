"""Area fault-recovery: a RayCluster recovers from the loss of a worker or of its head.

Each fault is injected by deleting a pod; recovery_s runs from the deletion to the cluster
ready again with every worker alive in Ray's own view (`ray.nodes()`), not only in Kubernetes'.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, wait_for
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("fault-recovery")

ALIVE_WORKERS = (
    "import ray\n"
    "ray.init(address='auto', logging_level='ERROR')\n"
    "alive = [n for n in ray.nodes() if n['Alive'] and 'node:__internal_head__' not in n['Resources']]\n"
    "print('alive-workers', len(alive))\n"
)


def _ready(pod: Any) -> bool:
    return pod.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


def _alive_workers(ray: Ray, cluster: str) -> int:
    out = ray.python_in_head(cluster, ALIVE_WORKERS)
    return int(out.split("alive-workers", 1)[1].split()[0])


def _until_workers_alive(ray: Ray, cluster: str, count: int, timeout: float) -> None:
    """Ray's own view: poll `ray.nodes()` until `count` workers are alive (no watch exists for it)."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        try:
            seen = _alive_workers(ray, cluster)
        except Exception:  # noqa: BLE001 - the head may still be starting; ask again
            seen = -1
        if seen == count:
            return
        time.sleep(2)
    raise AssertionError(f"Ray saw {seen} alive workers of {cluster} after {timeout:.0f}s, expected {count}")


@pytest.fixture
def cluster(ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts) -> str:
    values = {**cluster_values, "name": "fr", "workers": [{"name": "small", "replicas": 1}]}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    ray.wait_cluster_ready("fr", timeouts.ready)
    _until_workers_alive(ray, "fr", 1, timeouts.ready)
    return "fr"


def _delete_and_wait_replaced(ray: Ray, cluster: str, old: Any, node_type: str, timeouts: Timeouts) -> None:
    ray.core.delete_namespaced_pod(old.metadata.name, ray.namespace)
    with behaviour(f"a deleted {node_type} pod is replaced by a Ready one"):
        wait_for(
            ray.core.list_namespaced_pod,
            lambda p: p.metadata.uid != old.metadata.uid and _ready(p),
            what=f"a new {node_type} pod to be Ready",
            timeout=timeouts.ready,
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={cluster},ray.io/node-type={node_type}",
        )


def test_deleted_worker_is_replaced_and_rejoins_ray(
    cluster: str, ray: Ray, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    (old,) = ray.pods(cluster, "worker")
    started = time.monotonic()
    _delete_and_wait_replaced(ray, cluster, old, "worker", timeouts)
    _until_workers_alive(ray, cluster, 1, timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)


@pytest.mark.kuberay_issue(1141)
def test_deleted_head_is_replaced_and_workers_rejoin(
    cluster: str, ray: Ray, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    started = time.monotonic()
    _delete_and_wait_replaced(ray, cluster, ray.head_pod(cluster), "head", timeouts)
    with behaviour("the RayCluster is ready again after losing its head (kuberay#1141)"):
        ray.wait_cluster_ready(cluster, timeouts.ready)
    _until_workers_alive(ray, cluster, 1, timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
