"""Seeded faults of area autoscaling."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

AUTOSCALING = "test_autoscaling.py::"
IDLE_TIMEOUTS = [["autoscalerOptions", "idleTimeoutSeconds"], ["workerGroupSpecs", "*", "idleTimeoutSeconds"]]
# What KubeRay labels the autoscaler's ServiceAccount, Role and RoleBinding with (common/rbac.go).
MADE_BY_KUBERAY = "app.kubernetes.io/created-by=kuberay-operator"
# KubeRay's labels of multi-host workers (utils/constant.go), set when it creates a pod.
REPLICA_NAME = "ray.io/worker-group-replica-name"
HOST_INDEX = "ray.io/replica-host-index"
SPLIT = "-split"
INVALID = AUTOSCALING + "test_invalid_autoscaling_spec_is_rejected"
# One -k token each (pytest's -k takes no spaces): the two parametrizations' ids.
INVALID_GROUP_IDLE_TIMEOUT = INVALID + "[v1-autoscaler]"
INVALID_MIN_ABOVE_MAX = INVALID + "[maxReplicas-greater]"


@before_checks
def stale_crd_without_idle_timeouts(rogue: Rogue) -> None:
    """A RayCluster CRD that predates idleTimeoutSeconds (Helm never upgrades CRDs): the API server
    drops the cluster's and the group's idle timeout, and the autoscaler uses its default 60 s."""
    spec = {**raycluster_spec(idleTimeoutSeconds=30), "autoscalerOptions": {"idleTimeoutSeconds": 30}}
    drop_crd_fields(rogue, "rayclusters", IDLE_TIMEOUTS, probe("RayCluster", spec))


@before_checks
def stale_crd_without_max_replicas(rogue: Rogue) -> None:
    """A RayCluster CRD without a group's maxReplicas (hand-trimmed): the API server drops it, so
    KubeRay's validation never sees a minReplicas above it and an autoscaled cluster is accepted
    (KubeRay reads a missing maxReplicas as unbounded)."""
    spec = raycluster_spec(minReplicas=3, maxReplicas=1)
    path = ["workerGroupSpecs", "*", "maxReplicas"]
    drop_crd_fields(rogue, "rayclusters", [path], probe("RayCluster", spec))


# What the rogue below puts where a RayCluster sets no idle timeout: far below Ray's default 60 s.
FILLED_IN_IDLE_S = 5


def unset_idle_timeouts_filled_in(rogue: Rogue) -> None:
    """An autoscaling RayCluster of the run that sets no idleTimeoutSeconds gets one of
    FILLED_IN_IDLE_S as soon as it appears, as an operator that defaulted the field on its own would."""
    for cluster in rogue.ray_objects("rayclusters"):
        meta, spec = cluster["metadata"], cluster.get("spec") or {}
        options = spec.get("autoscalerOptions") or {}
        if not spec.get("enableInTreeAutoscaling") or "idleTimeoutSeconds" in options:
            continue
        patch = {"spec": {"autoscalerOptions": {"idleTimeoutSeconds": FILLED_IN_IDLE_S}}}
        try:
            rogue.custom.patch_namespaced_custom_object(
                "ray.io", "v1", meta["namespace"], "rayclusters", meta["name"], patch
            )
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        rogue.acted(f"set idleTimeoutSeconds {FILLED_IN_IDLE_S} on {meta['namespace']}/{meta['name']}")


def autoscaler_role_without_raycluster_patch(rogue: Rogue) -> None:
    """Each autoscaler Role KubeRay makes in the run loses `patch` on rayclusters as soon as it
    appears. KubeRay only creates that Role when it is missing and never puts a rule back, so the
    autoscaler can read demand but never write a replica count or a workersToDelete: nothing it
    decides reaches the cluster (KubeRay alone still clamps replicas to minReplicas)."""
    rbac = client.RbacAuthorizationV1Api(rogue.api)
    for event in rogue.events(rbac.list_role_for_all_namespaces, label_selector=MADE_BY_KUBERAY):
        role = event["object"]
        if event["type"] not in ("ADDED", "MODIFIED") or not rogue.in_run(role):
            continue
        rules = _without_raycluster_patch(role.rules or [])
        if rules is None:  # already trimmed (our own MODIFIED event) or never granted
            continue
        role.rules = rules
        try:
            rbac.replace_namespaced_role(role.metadata.name, role.metadata.namespace, role)
        except ApiException as exc:
            if exc.status in (404, 409):  # gone with its namespace, or changed: the next event retries
                continue
            raise
        where = f"{role.metadata.namespace}/{role.metadata.name}"
        rogue.acted(f"removed patch on rayclusters from autoscaler Role {where}")


def _without_raycluster_patch(rules: list[Any]) -> list[client.V1PolicyRule] | None:
    """`rules` with `patch` taken off ray.io rayclusters; None when no rule grants it."""
    found, kept = False, []
    for rule in rules:
        grants = "ray.io" in (rule.api_groups or []) and "rayclusters" in (rule.resources or [])
        if not grants or "patch" not in (rule.verbs or []):
            kept.append(rule)
            continue
        found = True
        verbs = [v for v in rule.verbs if v != "patch"]
        kept.append(client.V1PolicyRule(api_groups=rule.api_groups, resources=rule.resources, verbs=verbs))
    return kept if found else None


def split_multi_host_replicas(rogue: Rogue) -> None:
    """The second host (host index 1) of every multi-host replica in the run is relabelled as a
    replica of its own as soon as it appears: what an operator that numbers hosts, not replicas,
    would make. KubeRay sets these labels only when it creates a pod, so the change stays."""
    for event in rogue.events(rogue.core.list_pod_for_all_namespaces, label_selector=f"{HOST_INDEX}=1"):
        pod = event["object"]
        labels = pod.metadata.labels or {}
        replica = labels.get(REPLICA_NAME, "")
        if event["type"] != "ADDED" or not replica or replica.endswith(SPLIT) or not rogue.in_run(pod):
            continue
        patch = {"metadata": {"labels": {REPLICA_NAME: replica + SPLIT}}}
        try:
            rogue.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile (a scale-down, the namespace going)
                continue
            raise
        rogue.acted(f"relabelled {pod.metadata.namespace}/{pod.metadata.name} as replica {replica + SPLIT}")


FAULTS = [
    Fault(
        name="unset-idle-timeout-filled-in",
        area="autoscaling",
        misbehaviour=f"a RayCluster that sets no idleTimeoutSeconds gets {FILLED_IN_IDLE_S} s, not Ray's "
        "default 60 s: idle workers go almost at once",
        rogue=unset_idle_timeouts_filled_in,
        catches=(AUTOSCALING + "test_without_idle_timeout_seconds_idle_workers_go_after_the_default",),
        evidence="after the default 60s",
    ),
    Fault(
        name="idle-timeouts-dropped-by-a-stale-crd",
        area="autoscaling",
        misbehaviour="idle workers go after the default 60 s, not the idleTimeoutSeconds the spec sets",
        rogue=stale_crd_without_idle_timeouts,
        catches=(
            AUTOSCALING + "test_scales_up_to_demand_within_max_and_down_after_idle[v2]",
            AUTOSCALING + "test_per_group_idle_timeout_overrides_the_global_one",
        ),
        bystanders=(AUTOSCALING + "test_in_tree_autoscaling_adds_sidecar_role_and_binding",),
        evidence="idleTimeoutSeconds",
    ),
    Fault(
        name="autoscaler-role-cannot-patch-rayclusters",
        area="autoscaling",
        misbehaviour="the autoscaler's Role lacks patch on rayclusters: pending demand, request_resources "
        "and an unschedulable GPU demand scale nothing (#3909), a lowered maxReplicas removes nothing",
        rogue=autoscaler_role_without_raycluster_patch,
        catches=(
            AUTOSCALING + "test_in_tree_autoscaling_adds_sidecar_role_and_binding",
            AUTOSCALING + "test_scales_up_to_demand_within_max_and_down_after_idle[v1]",
            AUTOSCALING + "test_request_resources_and_placement_groups_drive_scale_up_and_hold_workers",
            # minReplicas 1 is KubeRay's own clamp, so this check gets its worker and fails only
            # where the autoscaler must act (maxReplicas 0).
            AUTOSCALING + "test_min_and_max_replicas_changed_on_a_live_cluster_take_effect",
            "test_gpu.py::test_unsatisfiable_gpu_request_stays_pending_and_bounded",
        ),
        bystanders=(INVALID,),  # KubeRay's own validation needs no autoscaler
        run_args=("--timeout", "scale=60"),  # healthy scale-ups here take 20-39 s
        evidence=(
            "Role lacks",
            "scales the group up",
            "request_resources scales up",
            "lowered maxReplicas",
            "makes a worker pod",
        ),
    ),
    Fault(
        name="group-idle-timeout-dropped-by-a-stale-crd",
        area="autoscaling",
        misbehaviour="a group idleTimeoutSeconds with autoscaler v1 is accepted (the stale CRD drops it), "
        "and idle GPU workers go after the default 60 s",
        rogue=stale_crd_without_idle_timeouts,
        catches=(
            INVALID_GROUP_IDLE_TIMEOUT,
            "test_gpu.py::test_gpu_group_scales_from_zero_for_gpu_tasks_only",
        ),
        bystanders=(
            INVALID_MIN_ABOVE_MAX,
            "test_gpu.py::test_group_resources_and_ray_start_gpus_together_are_rejected",
        ),
        evidence=("InvalidRayClusterSpec", "scales back to 0"),
    ),
    Fault(
        name="max-replicas-dropped-by-a-stale-crd",
        area="autoscaling",
        misbehaviour="a worker group whose minReplicas is above its maxReplicas is accepted and gets pods",
        rogue=stale_crd_without_max_replicas,
        catches=(INVALID_MIN_ABOVE_MAX,),
        bystanders=(INVALID_GROUP_IDLE_TIMEOUT,),
        evidence="InvalidRayClusterSpec",
    ),
    Fault(
        name="multi-host-replica-split-in-two",
        area="autoscaling",
        misbehaviour="the second host of a two-host replica is labelled as a replica of its own, so "
        "the replica is not one unit",
        rogue=split_multi_host_replicas,
        catches=(AUTOSCALING + "test_multi_host_group_scales_by_whole_replicas",),
        bystanders=(INVALID_MIN_ABOVE_MAX,),
        evidence="replica",
    ),
]
