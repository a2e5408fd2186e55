"""Area fault-recovery: a RayCluster recovers from the loss of a worker or of its head.

Each fault is injected by deleting a pod; recovery_s runs from the deletion to the cluster
ready again with every worker alive in Ray's own view (`ray.nodes()`), not only in Kubernetes'.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

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
        time.sleep(2)  # poll-interval: Ray offers no watch on its node table
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


def _rayjob(cluster_values: dict[str, Any], name: str, entrypoint: str, workers: int = 0) -> dict[str, Any]:
    body = render("ray/rayjob.yaml", **{**cluster_values, "name": name, "entrypoint": entrypoint})
    if workers:
        spec = body["spec"]["rayClusterSpec"]
        spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}  # tasks must run on the worker
        spec["workerGroupSpecs"] = [{
            "groupName": "small", "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
            "rayStartParams": {},
            "template": {"spec": {"containers": [{
                "name": "ray-worker", "image": cluster_values["image"],
                "imagePullPolicy": cluster_values["pull_policy"],
                "resources": cluster_values["worker_resources"]}]}}}]  # fmt: skip
    return body


def _job_state(obj: dict[str, Any]) -> str:
    return str(obj.get("status", {}).get("jobDeploymentStatus"))


def _wait_job_end(ray: Ray, name: str, what: str, timeouts: Timeouts) -> dict[str, Any]:
    return ray.wait(
        "rayjobs",
        name,
        lambda o: _job_state(o) in ("Complete", "Failed"),
        what=what,
        timeout=timeouts.ready + timeouts.apply,
    )


def test_running_job_with_task_retries_completes_despite_a_lost_worker(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    entrypoint = (
        'python -c "import ray, time; ray.init(); '
        "f = ray.remote(num_cpus=1, max_retries=5)(lambda: (time.sleep(20), 'task-done')[1]); "
        'print(ray.get(f.remote()))"'
    )
    ray.create("rayjobs", _rayjob(cluster_values, "resilient", entrypoint, workers=1))
    running = ray.wait(
        "rayjobs",
        "resilient",
        lambda o: _job_state(o) == "Running",
        what="RayJob resilient to run",
        timeout=timeouts.ready,
    )
    cluster = running["status"]["rayClusterName"]
    _until_workers_alive(ray, cluster, 1, timeouts.ready)
    (worker,) = ray.pods(cluster, "worker")
    started = time.monotonic()
    ray.core.delete_namespaced_pod(worker.metadata.name, ray.namespace)
    with behaviour("a job whose tasks may retry completes after losing its worker"):
        final = _wait_job_end(ray, "resilient", "RayJob resilient to finish", timeouts)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"]["jobStatus"] == "SUCCEEDED", final["status"]


@pytest.mark.kuberay_issue(3903)
def test_rayjob_that_loses_its_head_mid_run_reaches_a_terminal_status(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    body = _rayjob(cluster_values, "headless", 'python -c "import time; time.sleep(60)"')
    ray.create("rayjobs", body)
    running = ray.wait(
        "rayjobs",
        "headless",
        lambda o: _job_state(o) == "Running",
        what="RayJob headless to run",
        timeout=timeouts.ready,
    )
    started = time.monotonic()
    ray.core.delete_namespaced_pod(
        ray.head_pod(running["status"]["rayClusterName"]).metadata.name, ray.namespace
    )
    with behaviour("a RayJob that lost its head is never stuck non-terminal (kuberay#3903)"):
        final = _wait_job_end(ray, "headless", "RayJob headless to reach a terminal status", timeouts)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"].get("endTime"), final["status"]


def test_operator_killed_while_reconciling_resumes_without_duplicates(
    conformance: Any, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    operator_ns = conformance.operator_namespace
    (operator,) = [
        p for p in ray.core.list_namespaced_pod(operator_ns).items if not p.metadata.deletion_timestamp
    ]
    ray.create("rayjobs", _rayjob(cluster_values, "orphaned", "python -c \"print('after-failover')\""))
    started = time.monotonic()
    ray.core.delete_namespaced_pod(operator.metadata.name, operator_ns)
    with behaviour("a new operator leader finishes the RayJob"):
        final = _wait_job_end(
            ray, "orphaned", "RayJob orphaned to finish after the operator was killed", timeouts
        )
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"]["jobStatus"] == "SUCCEEDED", final["status"]
    clusters = ray.list_fn("rayclusters")()["items"]
    assert len(clusters) == 1, f"RayClusters after failover: {[c['metadata']['name'] for c in clusters]}"
    jobs = client.BatchV1Api(ray.api).list_namespaced_job(ray.namespace).items
    assert [j.metadata.name for j in jobs] == ["orphaned"], "duplicate submitter Jobs after failover"
