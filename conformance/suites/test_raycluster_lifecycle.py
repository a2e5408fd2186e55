"""Area raycluster: what KubeRay does when a live RayCluster is suspended, scaled down, upgraded
with the Recreate strategy, or cannot make its pods (KubeRay v1.7.0's e2e/raycluster_test.go), and
how it indexes worker replicas and their hosts (e2e/raycluster_multi_host_test.go).

Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from conformance.kube.manifests import render
from conformance.kube.pods import is_ready
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, wait_for, wait_gone
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("raycluster")

REPLICA_FAILURE = "ReplicaFailure"  # the condition type rayv1.RayClusterReplicaFailure names
# KubeRay acts on a scale change within a reconcile (about a second); a wrong deletion or a
# replacement shows within this window.
SETTLED_S = 15
RECREATE_HASH = (
    "ray.io/upgrade-strategy-recreate-hash"  # on the head pod (utils.UpgradeStrategyRecreateHashKey)
)


def _conditions(cluster: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", "")) for c in cluster.get("status", {}).get("conditions", [])
    }


def _state(cluster: dict[str, Any]) -> str:
    return f"state={cluster.get('status', {}).get('state')} conditions={_conditions(cluster)}"


def _wait_conditions(
    ray: Ray, name: str, wanted: dict[str, tuple[str, str]], what: str, timeout: float
) -> None:
    with behaviour(f"RayCluster {name} {what}"):
        ray.wait(
            "rayclusters",
            name,
            lambda obj: all(_conditions(obj).get(kind) == want for kind, want in wanted.items()),
            what=f"RayCluster {name} to report {wanted}",
            timeout=timeout,
            describe=_state,
        )


def _live(ray: Ray, name: str, node_type: str | None = None) -> list[client.V1Pod]:
    return [p for p in ray.pods(name, node_type) if p.metadata.deletion_timestamp is None]


def _wait_pods(ray: Ray, name: str, predicate: Any, what: str, timeout: float, describe: Any = None) -> None:
    """Wait on the cluster's pods (watched) until `predicate(live pods)` holds: KubeRay's behaviour.
    `describe(live pods)` says what was last seen (by default each pod's readiness)."""
    describe = describe or (lambda pods: ", ".join(f"{p.metadata.name} ready={is_ready(p)}" for p in pods))
    with behaviour(f"RayCluster {name}: {what}"):
        wait_for(
            ray.core.list_namespaced_pod,
            lambda _event: predicate(_live(ray, name)),
            what=what,
            timeout=timeout,
            describe=lambda _p: describe(_live(ray, name)),
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={name}",
        )


def _all_ready(workers: int) -> Any:
    def check(pods: list[client.V1Pod]) -> bool:
        kinds = [p.metadata.labels.get("ray.io/node-type") for p in pods]
        return kinds.count("head") == 1 and kinds.count("worker") == workers and all(map(is_ready, pods))

    return check


@pytest.mark.requires("gate:RayClusterStatusConditions")
def test_suspend_removes_every_pod_and_resume_brings_the_cluster_back(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: `spec.suspend` on a ready RayCluster that leaves pods running or does not report
    RayClusterSuspended (with HeadPodReady False/HeadPodNotFound and RayClusterProvisioned
    False/RayClusterPodsProvisioning), and a resume that does not bring a ready head and its
    worker back with HeadPodReady and RayClusterProvisioned True again."""
    values = {**cluster_values, "name": "suspend", "workers": [{"name": "small", "replicas": 1}]}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    ray.wait_cluster_ready("suspend", timeouts.ready)
    ray.patch("rayclusters", "suspend", {"spec": {"suspend": True}})
    suspended = {
        "RayClusterSuspended": ("True", "RayClusterSuspended"),
        "HeadPodReady": ("False", "HeadPodNotFound"),
        "RayClusterProvisioned": ("False", "RayClusterPodsProvisioning"),
    }
    _wait_conditions(ray, "suspend", suspended, "is suspended", timeouts.cleanup)
    with behaviour("RayCluster suspend: no pod of the suspended cluster left"):
        wait_gone(
            ray.core.list_namespaced_pod,
            what="the pods of the suspended cluster",
            timeout=timeouts.cleanup,
            namespace=ray.namespace,
            label_selector="ray.io/cluster=suspend",
        )
    ray.patch("rayclusters", "suspend", {"spec": {"suspend": False}})
    resumed = {
        "RayClusterSuspended": ("False", "RayClusterSuspended"),
        "HeadPodReady": ("True", "HeadPodRunningAndReady"),
        "RayClusterProvisioned": ("True", "AllPodRunningAndReadyFirstTime"),
    }
    _wait_conditions(ray, "suspend", resumed, "is resumed", timeouts.ready)
    _wait_pods(ray, "suspend", _all_ready(1), "a ready head and worker after the resume", timeouts.ready)


@pytest.mark.requires("gate:RayClusterStatusConditions")
def test_a_quota_too_small_for_the_head_is_reported_as_replica_failure(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a RayCluster whose head pod the namespace's ResourceQuota forbids, reported without
    ReplicaFailure True, reason FailedCreateHeadPod and the API server's "exceeded quota"
    in its message (or a head pod made anyway)."""
    quota = {"metadata": {"name": "tiny"}, "spec": {"hard": {"cpu": "100m", "memory": "100Mi"}}}
    ray.core.create_namespaced_resource_quota(ray.namespace, quota)
    ray.create("rayclusters", render("ray/raycluster.yaml", **{**cluster_values, "name": "quota"}))

    def failures(obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == REPLICA_FAILURE]

    def reported(obj: dict[str, Any]) -> bool:
        return any(
            c["status"] == "True"
            and c.get("reason") == "FailedCreateHeadPod"
            and "exceeded quota" in c.get("message", "")
            for c in failures(obj)
        )

    with behaviour("RayCluster quota reports the quota failure"):
        ray.wait(
            "rayclusters",
            "quota",
            reported,
            what="a ReplicaFailure condition naming the quota",
            timeout=timeouts.ready,
            describe=lambda obj: str(failures(obj)),
        )
    assert not ray.pods("quota"), "a pod was made although the quota forbids it"


@pytest.mark.requires("kuberay>=1.6.0")
def test_recreate_strategy_replaces_head_and_workers_on_a_spec_change(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: `upgradeStrategy.type: Recreate` ignored (a changed pod template leaves the old
    head and worker running), a new head without a new recreate hash, or a recreated cluster
    missing its worker."""
    values = {**cluster_values, "name": "recreate", "workers": [{"name": "small", "replicas": 1}]}
    body = render("ray/raycluster.yaml", **values)
    body["spec"]["upgradeStrategy"] = {"type": "Recreate"}
    ray.create("rayclusters", body)
    ray.wait_cluster_ready("recreate", timeouts.ready)
    before = {p.metadata.uid: p for p in _live(ray, "recreate")}
    old_hash = ray.head_pod("recreate").metadata.annotations.get(RECREATE_HASH)
    assert old_hash, f"the head pod of a Recreate cluster carries no {RECREATE_HASH} annotation"
    env = [{"name": "CONFORMANCE_TEMPLATE_CHANGE", "value": "1"}]
    head = body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    ray.patch("rayclusters", "recreate", {"spec": {"headGroupSpec": {"template": {"spec": {
        "containers": [{**head, "env": env}]}}}}})  # fmt: skip

    def replaced(pods: list[client.V1Pod]) -> bool:
        return not any(p.metadata.uid in before for p in pods) and _all_ready(1)(pods)

    _wait_pods(ray, "recreate", replaced, "new head and worker pods, all ready", timeouts.ready)
    new_hash = ray.head_pod("recreate").metadata.annotations.get(RECREATE_HASH)
    assert new_hash and new_hash != old_hash, f"the new head's recreate hash {new_hash!r} is the old one's"


def test_scaling_down_removes_the_named_worker_then_one_and_never_the_head(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a non-autoscaled group scaled down that deletes another worker than the one
    `workersToDelete` names, deletes more than asked, replaces the deleted worker, or touches the
    head; and replicas lowered alone that deletes no worker or the head."""
    group = {"name": "small", "replicas": 2, "min_replicas": 0, "max_replicas": 2}
    ray.create(
        "rayclusters", render("ray/raycluster.yaml", **{**cluster_values, "name": "down", "workers": [group]})
    )
    ray.wait_cluster_ready("down", timeouts.ready)
    _wait_pods(ray, "down", _all_ready(2), "a ready head and two ready workers", timeouts.ready)
    head = ray.head_pod("down").metadata.uid
    named, kept = sorted(p.metadata.name for p in _live(ray, "down", "worker"))
    scale = {"replicas": 1, "minReplicas": 0, "maxReplicas": 2, "groupName": "small"}
    _patch_group(ray, "down", {**scale, "scaleStrategy": {"workersToDelete": [named]}})
    _wait_pods(ray, "down", lambda pods: _workers(pods) == [kept], f"only worker {kept} left", timeouts.scale)
    # KubeRay has deleted it; its graceful termination is the kubelet's, so a pod that lingers is
    # the environment's (an error), and the window below starts only once it is gone.
    wait_gone(
        ray.core.list_namespaced_pod,
        what=f"worker {named}",
        timeout=timeouts.scale,
        namespace=ray.namespace,
        field_selector=f"metadata.name={named}",
    )
    broken = holds_for(
        ray.core.list_namespaced_pod,
        lambda pod: pod.metadata.name == kept and pod.metadata.deletion_timestamp is None,
        what=f"worker {kept} stays the only worker",
        duration=SETTLED_S,
        namespace=ray.namespace,
        label_selector="ray.io/cluster=down,ray.io/node-type=worker",
    )
    assert not broken, f"after removing {named}, the group did not stay at worker {kept}: {broken}"
    _patch_group(ray, "down", {**scale, "replicas": 0})
    _wait_pods(ray, "down", lambda pods: _workers(pods) == [], "no worker left", timeouts.scale)
    assert ray.head_pod("down").metadata.uid == head, "scaling the workers down replaced the head"


def _workers(pods: list[client.V1Pod]) -> list[str]:
    return sorted(p.metadata.name for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker")


def _patch_group(ray: Ray, name: str, changes: dict[str, Any]) -> None:
    """Change the one worker group (a merge patch replaces the list, so send the whole group)."""
    group = ray.get("rayclusters", name)["spec"]["workerGroupSpecs"][0]
    ray.patch("rayclusters", name, {"spec": {"workerGroupSpecs": [{**group, **changes}]}})


REPLICA_NAME = "ray.io/worker-group-replica-name"  # the hosts of one numOfHosts replica share it
REPLICA_INDEX = "ray.io/worker-group-replica-index"  # 0 .. replicas-1 within the group
HOST_INDEX = "ray.io/replica-host-index"  # 0 .. numOfHosts-1 within the replica


def _labels(pod: client.V1Pod) -> tuple[str | None, str | None, str | None]:
    labels = pod.metadata.labels or {}
    return labels.get(REPLICA_NAME), labels.get(REPLICA_INDEX), labels.get(HOST_INDEX)


def _indexed(replicas: int, hosts: int) -> Any:
    """Live workers, all Ready, that form `replicas` replicas of `hosts` pods each: replica indices
    0..replicas-1 once each, host indices 0..hosts-1 within each replica, one replica index per
    replica name (single-host pods carry only the replica index). Judged on Ready pods, so the
    labels are those the pods settled with, not the first ones seen."""

    def check(pods: list[client.V1Pod]) -> bool:
        ready = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker"]
        workers = [_labels(p) for p in ready if is_ready(p)]
        if len(workers) != len(ready) or len(workers) != replicas * hosts:
            return False
        if hosts == 1:
            return sorted(i for _, i, _ in workers) == [str(n) for n in range(replicas)] and all(
                name is None and host is None for name, _, host in workers
            )
        by_replica: dict[str | None, list[tuple[str | None, str | None]]] = {}
        for name, index, host in workers:
            by_replica.setdefault(name, []).append((index, host))
        indices = sorted({index for members in by_replica.values() for index, _ in members})
        return (
            None not in by_replica
            and indices == [str(n) for n in range(replicas)]
            and all(len({i for i, _ in m}) == 1 for m in by_replica.values())
            and all(sorted(h for _, h in m) == [str(n) for n in range(hosts)] for m in by_replica.values())
        )

    return check


def _describe_indices(pods: list[client.V1Pod]) -> str:
    return "; ".join(f"{p.metadata.name}: name/index/host {_labels(p)}" for p in pods)


@pytest.mark.requires("gate:RayMultiHostIndexing")
def test_single_host_replicas_keep_unique_indices_through_a_loss_and_a_scale_up(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches (RayMultiHostIndexing, KubeRay v1.7.0 e2e TestRayClusterSingleHostMultiSlice): single-
    host workers without a ray.io/worker-group-replica-index, two with the same index, or labels
    of a multi-host replica on them; a lost worker whose replacement does not take the freed index
    (a gap and a duplicate instead); a scale-up that does not continue the indices."""
    values = {
        **cluster_values,
        "name": "slices",
        "workers": [{"name": "slice", "replicas": 3, "max_replicas": 4}],
    }
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    # The indices first: an operator that mislabels replicas may never make the cluster ready.
    _wait_pods(ray, "slices", _indexed(3, 1), "workers indexed 0, 1 and 2", timeouts.ready, _describe_indices)
    ray.wait_cluster_ready("slices", timeouts.ready)
    (lost,) = [p for p in _live(ray, "slices", "worker") if _labels(p)[1] == "1"]
    ray.core.delete_namespaced_pod(lost.metadata.name, ray.namespace)

    def refilled(pods: list[client.V1Pod]) -> bool:
        return lost.metadata.uid not in {p.metadata.uid for p in pods} and _indexed(3, 1)(pods)

    refill = f"{lost.metadata.name} replaced at index 1"
    _wait_pods(ray, "slices", refilled, refill, timeouts.ready, _describe_indices)
    _patch_group(ray, "slices", {"replicas": 4})
    scaled = "workers indexed 0 to 3 after a scale-up"
    _wait_pods(ray, "slices", _indexed(4, 1), scaled, timeouts.ready, _describe_indices)


@pytest.mark.requires("gate:RayMultiHostIndexing")
def test_a_multi_host_replica_that_loses_a_host_is_recreated_whole_with_its_indices(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches (RayMultiHostIndexing, KubeRay v1.7.0 e2e TestRayClusterMultiHostMultiSlice): the
    hosts of a numOfHosts replica without one shared replica name and index, host indices missing
    or repeated, two replicas with one index; a replica that loses one host and keeps the other
    (a slice left half alive instead of recreated as a unit), or comes back without its indices."""
    group = {"name": "pair", "replicas": 2, "num_of_hosts": 2}
    ray.create(
        "rayclusters",
        render("ray/raycluster.yaml", **{**cluster_values, "name": "hosts", "workers": [group]}),
    )
    _wait_pods(
        ray, "hosts", _indexed(2, 2), "2 replicas of 2 indexed hosts", timeouts.ready, _describe_indices
    )
    ray.wait_cluster_ready("hosts", timeouts.ready)
    workers = _live(ray, "hosts", "worker")
    lost = next(p for p in workers if _labels(p)[1:] == ("1", "0"))
    slice_uids = {p.metadata.uid for p in workers if _labels(p)[0] == _labels(lost)[0]}
    ray.core.delete_namespaced_pod(lost.metadata.name, ray.namespace)

    def recreated(pods: list[client.V1Pod]) -> bool:
        return not slice_uids & {p.metadata.uid for p in pods} and _indexed(2, 2)(pods)

    whole = f"the replica of {lost.metadata.name} recreated whole (both hosts new), indices complete"
    _wait_pods(ray, "hosts", recreated, whole, timeouts.ready, _describe_indices)
