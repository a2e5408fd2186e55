"""Seeded faults of area autoscaling for test_autoscaling_variants.py (issue 20's variants)."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, each_worker_group, json_patch, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks, side_by_side

VARIANTS = "test_autoscaling_variants.py::"
TASKS = VARIANTS + "test_task_demand_scales_a_group_to_max_replicas_and_never_above"
MODES = VARIANTS + "test_upscaling_mode_sets_the_batches_of_new_workers"
ADDED = VARIANTS + "test_a_worker_group_added_to_a_live_cluster_scales_for_demand_only_it_satisfies"
PLACEMENT = VARIANTS + "test_placement_group_strategy_sets_the_workers_and_survives_their_loss"
# Failing scale-ups wait out the `scale` timeout; healthy ones here take 20-90 s.
SHORT_SCALE = ("--timeout", "scale=120")


@before_checks
def stale_crd_without_upscaling_mode(rogue: Rogue) -> None:
    """A RayCluster CRD without autoscalerOptions.upscalingMode (Helm never upgrades CRDs; a
    hand-trimmed one): the API server prunes the field, so the autoscaler runs every cluster at
    its default, upscaling_speed 1000."""
    spec = {**raycluster_spec(), "autoscalerOptions": {"upscalingMode": "Conservative"}}
    path = ["autoscalerOptions", "upscalingMode"]
    drop_crd_fields(rogue, "rayclusters", [path], probe("RayCluster", spec))


def every_upscaling_mode_read_as_conservative(rogue: Rogue) -> None:
    """Each autoscaling RayCluster of the run that is not Conservative is made Conservative as soon
    as it appears: what an operator or autoscaler that rate-limits every upscalingMode would do."""
    for cluster in rogue.ray_objects("rayclusters"):
        meta, spec = cluster["metadata"], cluster.get("spec") or {}
        options = spec.get("autoscalerOptions") or {}
        if not spec.get("enableInTreeAutoscaling") or options.get("upscalingMode") == "Conservative":
            continue
        conservative = {**options, "upscalingMode": "Conservative"}
        ops = [{"op": "add", "path": "/spec/autoscalerOptions", "value": conservative}]
        if not json_patch(rogue, "rayclusters", meta, ops):
            continue
        was = options.get("upscalingMode", "unset")
        rogue.acted(f"set upscalingMode Conservative (was {was}) on {meta['namespace']}/{meta['name']}")


def pods_of_added_groups_deleted(rogue: Rogue) -> None:
    """A worker pod of a group the RayCluster was not created with is deleted as soon as it
    appears: an operator that reconciles only the groups it first saw, so a group added to a live
    cluster never gets a worker (the autoscaler asks, nothing joins)."""
    first_groups: dict[tuple[str, str], set[str]] = {}
    lock = threading.Lock()

    def clusters(rogue: Rogue) -> None:
        for cluster in rogue.ray_objects("rayclusters"):
            meta = cluster["metadata"]
            groups = {g["groupName"] for g in (cluster.get("spec") or {}).get("workerGroupSpecs") or []}
            with lock:
                first_groups.setdefault((meta["namespace"], meta["name"]), groups)

    def pods(rogue: Rogue) -> None:
        selector = "ray.io/node-type=worker"
        for event in rogue.events(rogue.core.list_pod_for_all_namespaces, label_selector=selector):
            pod = event["object"]
            labels = pod.metadata.labels or {}
            key = (pod.metadata.namespace, labels.get("ray.io/cluster", ""))
            with lock:
                known = first_groups.get(key)
            added = known is not None and labels.get("ray.io/group") not in known
            if event["type"] == "DELETED" or pod.metadata.deletion_timestamp or not added:
                continue
            try:
                rogue.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            where = f"{pod.metadata.namespace}/{pod.metadata.name}"
            rogue.acted(f"deleted {where} of added group {labels['ray.io/group']}")

    side_by_side(rogue, clusters, pods)


def num_cpus_dropped_from_worker_groups(rogue: Rogue) -> None:
    """Every worker group loses rayStartParams num-cpus as soon as its RayCluster appears (before
    any worker exists): KubeRay and the autoscaler then size Ray by the container's CPU limit
    (500m, rounded up to 1), as tooling that drops the parameter would leave them."""

    def drop(index: int, group: dict[str, Any]) -> list[dict[str, Any]]:
        params = group.get("rayStartParams") or {}
        if "num-cpus" not in params:
            return []
        where = f"/spec/workerGroupSpecs/{index}/rayStartParams/num-cpus"
        return [{"op": "test", "path": where, "value": params["num-cpus"]}, {"op": "remove", "path": where}]

    each_worker_group(rogue, drop, "removed rayStartParams num-cpus from the worker groups")


def worker_groups_capped_at_one_replica(rogue: Rogue) -> None:
    """Every worker group's maxReplicas above 1 becomes 1 as soon as its RayCluster appears: an
    operator that never runs a second worker of a group."""

    def cap(index: int, group: dict[str, Any]) -> list[dict[str, Any]]:
        high = group.get("maxReplicas")
        if high is None or int(high) <= 1:
            return []
        where = f"/spec/workerGroupSpecs/{index}/maxReplicas"
        return [{"op": "test", "path": where, "value": high}, {"op": "replace", "path": where, "value": 1}]

    each_worker_group(rogue, cap, "capped the worker groups at maxReplicas 1")


FAULTS = [
    Fault(
        name="upscaling-mode-dropped-by-a-stale-crd",
        area="autoscaling",
        misbehaviour="upscalingMode Conservative is pruned by the CRD: the autoscaler asks for the whole "
        "demand at once",
        rogue=stale_crd_without_upscaling_mode,
        catches=(MODES + "[v1-Conservative]", MODES + "[v2-Conservative]"),
        bystanders=(MODES + "[v2-Default]",),
        evidence="upscalingMode Conservative",
    ),
    Fault(
        name="every-upscaling-mode-read-as-conservative",
        area="autoscaling",
        misbehaviour="upscalingMode Default and Aggressive are rate-limited as Conservative",
        rogue=every_upscaling_mode_read_as_conservative,
        catches=(MODES + "[v1-Aggressive]", MODES + "[v2-Default]"),
        bystanders=(MODES + "[v1-Conservative]",),
        evidence="batches",
    ),
    Fault(
        name="added-worker-group-gets-no-pods",
        area="autoscaling",
        misbehaviour="a worker group added to a live RayCluster never gets a worker: demand only it can "
        "satisfy stays pending",
        rogue=pods_of_added_groups_deleted,
        catches=(ADDED,),
        bystanders=(TASKS + "[v1]",),  # its group was there from the start
        run_args=SHORT_SCALE,
        evidence="demand only the added group satisfies",
    ),
    Fault(
        name="num-cpus-dropped-from-worker-groups",
        area="autoscaling",
        misbehaviour="workers advertise the CPUs of their container limit, not rayStartParams num-cpus: two "
        "one-CPU bundles no longer pack onto one worker",
        rogue=num_cpus_dropped_from_worker_groups,
        catches=(PLACEMENT + "[STRICT_PACK]", PLACEMENT + "[PACK-soft]"),
        bystanders=(PLACEMENT + "[SPREAD-soft]",),  # one-CPU workers either way
        run_args=SHORT_SCALE,
        evidence=("scales the group up", "CREATED on 1 node"),
    ),
    Fault(
        name="worker-groups-capped-at-one-replica",
        area="autoscaling",
        misbehaviour="no worker group gets a second worker: spread placement groups and task demand for "
        "two workers are never met",
        rogue=worker_groups_capped_at_one_replica,
        catches=(PLACEMENT + "[STRICT_SPREAD]", PLACEMENT + "[SPREAD-soft]", TASKS + "[v2]"),
        bystanders=(PLACEMENT + "[STRICT_PACK]",),  # one worker is all it needs
        run_args=SHORT_SCALE,
        evidence="scales the group up",
    ),
    Fault(  # the same rogue, for the v1 autoscaler's task demand alone (a shorter run)
        name="worker-groups-capped-at-one-replica-v1",
        area="autoscaling",
        misbehaviour="no worker group gets a second worker: with autoscaler v1, task demand for two "
        "workers is never met",
        rogue=worker_groups_capped_at_one_replica,
        catches=(TASKS + "[v1]",),
        run_args=SHORT_SCALE,
        evidence="scales the group up",
    ),
]
