"""Area raycluster: what KubeRay does when a live RayCluster is suspended, scaled down, upgraded
with the Recreate strategy, or cannot make its pods (KubeRay v1.7.0's e2e/raycluster_test.go).

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


def _wait_pods(ray: Ray, name: str, predicate: Any, what: str, timeout: float) -> None:
    """Wait on the cluster's pods (watched) until `predicate(live pods)` holds: KubeRay's behaviour."""
    with behaviour(f"RayCluster {name}: {what}"):
        wait_for(
            ray.core.list_namespaced_pod,
            lambda _event: predicate(_live(ray, name)),
            what=what,
            timeout=timeout,
            describe=lambda _p: ", ".join(f"{p.metadata.name} ready={is_ready(p)}" for p in _live(ray, name)),
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
