"""Area autoscaling: KubeRay's in-tree autoscaler scales worker groups up to demand and down when idle.

Demand is detached actors asking for one CPU each (the head offers none), so each one
needs a worker; see suites/autoscaling.py. A `ScaleWatcher` samples desired replicas, pods
by phase and Ray's alive workers through every check, which is both the evidence for
"never above maxReplicas" and the timeline in the report. scale_up_s runs from the demand
to the last worker needed alive in Ray; scale_down_s from the release of the demand to the
last pod gone. Scale-down is judged against the configured idle timeout: not before it (less the
profile's `scale_down_early_slack_s`) and not later than the profile's `scale_down_slack_s` after it.
Every check asserts that the watcher's history is complete (no lost reads, no holes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from conformance.capabilities import Capabilities
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.scaling import ScaleWatcher, partial_replica_streak
from conformance.kube.wait import behaviour, holds_for
from conformance.profiles import Profile
from conformance.report.timelines import Recorder
from conformance.suites import ray_processes
from conformance.suites.autoscaling import (
    PENDING,
    actors_placed,
    ask,
    autoscaling_cluster,
    counted,
    ready,
    rejected,
    release,
    restarts,
    scale_down_window,
    scaled_down,
    until,
)
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("autoscaling")

IDLE_S = 30  # short enough for a check, long enough to tell "not before the timeout" apart


def _group(name: str, replicas: int = 0, low: int = 0, high: int = 2, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "min_replicas": low, "max_replicas": high, **extra}


def _workers(group: str, count: int) -> Any:
    return lambda s: s.pods(group, "Running") == count and s.ray_alive_workers == count


def _no_pods(group: str) -> Any:
    return lambda s: s.pods(group) == 0


# -- what enabling the autoscaler adds -------------------------------------------------


@pytest.mark.smoke
def test_in_tree_autoscaling_adds_sidecar_role_and_binding(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: `enableInTreeAutoscaling` ignored (no sidecar), an autoscaler Role missing a verb
    it needs or not bound to the head's ServiceAccount, v2 pods that restart in place."""
    autoscaling_cluster(ray, cluster_values, "auto", [_group("small", high=1)], autoscaler_version="v2")
    ready(ray, "auto", timeouts)
    head = ray.head_pod("auto")
    assert "autoscaler" in [c.name for c in head.spec.containers], "no autoscaler sidecar in the head pod"
    rbac = client.RbacAuthorizationV1Api(ray.api)
    role = _read_or_fail(rbac.read_namespaced_role, "Role", "auto", ray.namespace)
    granted = {(group, resource, verb) for rule in role.rules for group in rule.api_groups or [""]
               for resource in rule.resources or [] for verb in rule.verbs or []}  # fmt: skip
    needed = {("", "pods", verb) for verb in ("get", "list", "watch", "patch")}
    needed |= {("ray.io", "rayclusters", verb) for verb in ("get", "patch")}
    assert needed <= granted, f"the autoscaler Role lacks {sorted(needed - granted)}"
    binding = _read_or_fail(rbac.read_namespaced_role_binding, "RoleBinding", "auto", ray.namespace)
    assert binding.role_ref.name == "auto", f"the autoscaler RoleBinding grants {binding.role_ref.name}"
    assert head.spec.service_account_name in [s.name for s in binding.subjects], binding.subjects
    # Autoscaler v2 owns Ray node lifecycles: a failed Ray pod is replaced, never restarted in place.
    assert head.spec.restart_policy == "Never", f"v2 head pod restartPolicy {head.spec.restart_policy}"


def _read_or_fail(read: Any, kind: str, name: str, namespace: str) -> Any:
    """KubeRay makes the autoscaler's Role and RoleBinding with the cluster: a missing one is its failure."""
    try:
        return read(name, namespace)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        raise AssertionError(f"KubeRay made no autoscaler {kind} {namespace}/{name}") from exc


# -- up to demand, down when idle ------------------------------------------------------


# Ray's autoscaler removes a worker idle this long when the RayCluster sets no idleTimeoutSeconds.
DEFAULT_IDLE_S = 60


def test_without_idle_timeout_seconds_idle_workers_go_after_the_default(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """`autoscalerOptions.idleTimeoutSeconds` left unset: an idle worker goes after Ray's default of
    60 s, judged as the configured timeouts are (the profile's scale-down slacks).

    Catches: an unset idle timeout that KubeRay or the autoscaler fills with another value (idle
    workers removed well before 60 s, or kept long after it), or one read as "never"."""
    autoscaling_cluster(ray, cluster_values, "default-idle", [_group("small", high=1)], idle_timeout_s=None)
    options = ray.get("rayclusters", "default-idle")["spec"]["autoscalerOptions"]
    assert "idleTimeoutSeconds" not in options, f"the API server filled in an idle timeout: {options}"
    ready(ray, "default-idle", timeouts)
    with ScaleWatcher(ray, "default-idle", timeline.autoscaling("no idleTimeoutSeconds: 1 actor")) as watch:
        asked = watch.event("1 one-CPU actor asked for")
        ask(ray, "default-idle", 1)
        with behaviour("pending demand scales the group up"):
            up = until(watch, _workers("small", 1), "1 worker alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        idle = watch.event("demand released")
        release(ray, "default-idle")
        scaled_down(
            watch, _no_pods("small"), f"an idle worker goes after the default {DEFAULT_IDLE_S}s",
            "the idle worker to be removed", idle, scale_down_window(profile, DEFAULT_IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()


@pytest.mark.kuberay_issue(3909)
@pytest.mark.parametrize("version", ["v2", "v1"])
@pytest.mark.smoke("v1")
def test_scales_up_to_demand_within_max_and_down_after_idle(
    version: str,
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Catches: pending demand that scales nothing (#3909), a group scaled above maxReplicas, idle
    workers removed before idleTimeoutSeconds or long after it, an autoscaler that crashes."""
    autoscaling_cluster(ray, cluster_values, "scaler", [_group("small", high=2)],
                        autoscaler_version=version, idle_timeout_s=IDLE_S)  # fmt: skip
    ready(ray, "scaler", timeouts)
    with ScaleWatcher(ray, "scaler", timeline.autoscaling(f"autoscaler {version}: 3 actors, max 2")) as watch:
        asked = watch.event("3 one-CPU actors asked for (maxReplicas 2)")
        ask(ray, "scaler", 3)
        with behaviour("pending demand scales the group up to maxReplicas"):
            up = until(watch, _workers("small", 2), "2 workers alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        alive, pending = actors_placed(ray, "scaler", 2)
        assert (alive, pending) == (2, 1), f"expected 2 actors placed and 1 pending, saw {alive}, {pending}"
        idle = watch.event("demand released")
        release(ray, "scaler")
        scaled_down(
            watch, _no_pods("small"), "an idle group scales down after idleTimeoutSeconds",
            "the idle workers to be removed", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    desired, pods = watch.max_desired("small"), watch.max_pods("small")
    assert desired <= 2 and pods <= 2, f"above maxReplicas 2: desired up to {desired}, pods up to {pods}"
    assert not any(restarts(ray, "scaler").values()), f"head containers restarted: {restarts(ray, 'scaler')}"


def test_a_group_with_a_custom_resource_scales_only_for_demand_asking_it(
    ray: Ray,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Catches: a worker group's custom resource (its `resources`) not declared to Ray or not known
    to the autoscaler: demand asking it scales nothing, or scales the group without it."""
    groups = [_group("plain", high=1), _group("special", high=1, ray_resources={"special": "1"})]
    autoscaling_cluster(ray, cluster_values, "custom", groups, idle_timeout_s=IDLE_S)
    ready(ray, "custom", timeouts)
    with ScaleWatcher(ray, "custom", timeline.autoscaling("one actor asking the custom resource")) as watch:
        asked = watch.event("1 actor asking {special: 1}")
        ask(ray, "custom", 1, custom={"special": 1})
        with behaviour("demand for a custom resource scales the group that has it"):
            up = until(watch, _workers("special", 1), "1 special worker alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        alive, pending = actors_placed(ray, "custom", 1)
        assert (alive, pending) == (1, 0), (
            f"the actor asking the custom resource: {alive} alive, {pending} pending"
        )
    watch.assert_evidence()
    assert watch.max_pods("plain") == 0, "demand for a custom resource scaled the group without it"


def test_per_group_idle_timeout_overrides_the_global_one(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Catches: a group's `idleTimeoutSeconds` ignored (the global 600 s applies: nothing goes
    within the group's 30 s + slack), or honoured too early."""
    global_idle = 600
    group = _group("small", high=1, idle_timeout_s=IDLE_S)
    autoscaling_cluster(ray, cluster_values, "pergroup", [group], idle_timeout_s=global_idle)
    ready(ray, "pergroup", timeouts)
    with ScaleWatcher(ray, "pergroup", timeline.autoscaling("group idle timeout 30s, global 600s")) as watch:
        ask(ray, "pergroup", 1)
        with behaviour("pending demand scales the group up"):
            until(watch, _workers("small", 1), "1 worker alive in Ray", timeouts.scale)
        idle = watch.event("demand released")
        release(ray, "pergroup")
        scaled_down(
            watch, _no_pods("small"), "the group's own idleTimeoutSeconds applies, not the global one",
            "the idle worker to be removed", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()


def test_min_and_max_replicas_changed_on_a_live_cluster_take_effect(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, timeline: Recorder
) -> None:
    """Catches: a raised minReplicas that adds no worker, an idle group taken below minReplicas
    (watched for as long as an idle worker above it would take to go), a lowered maxReplicas
    that leaves workers above it."""
    autoscaling_cluster(ray, cluster_values, "bounds", [_group("small", high=2)], idle_timeout_s=IDLE_S)
    ready(ray, "bounds", timeouts)
    with ScaleWatcher(ray, "bounds", timeline.autoscaling("minReplicas 0 -> 1, then maxReplicas 0")) as watch:
        watch.event("minReplicas set to 1")
        _set_bounds(ray, "bounds", low=1, high=2)
        with behaviour("a raised minReplicas adds a worker with no demand"):
            until(watch, _workers("small", 1), "1 worker alive in Ray", timeouts.scale)
        with behaviour("an idle group never goes below minReplicas"):
            window = scale_down_window(profile, IDLE_S).latest_s
            broken = _worker_stays(ray, "bounds", "the minReplicas worker stays while idle", window)
            assert not broken, f"the worker at minReplicas did not stay: {broken}"
        watch.event("minReplicas 0, maxReplicas 0")
        _set_bounds(ray, "bounds", low=0, high=0)
        with behaviour("a lowered maxReplicas removes workers above it"):
            until(watch, _no_pods("small"), "the worker above maxReplicas to be removed", timeouts.scale)
    watch.assert_evidence()


def _worker_stays(ray: Ray, cluster: str, what: str, duration: float) -> str:
    """Watch the cluster's worker pods for `duration`: "" if none was deleted, else what happened."""
    return holds_for(
        ray.core.list_namespaced_pod,
        lambda pod: pod.metadata.deletion_timestamp is None,
        what=what,
        duration=duration,
        namespace=ray.namespace,
        label_selector=f"ray.io/cluster={cluster},ray.io/node-type=worker",
    )


def _set_bounds(ray: Ray, cluster: str, low: int, high: int) -> None:
    groups = ray.get("rayclusters", cluster)["spec"]["workerGroupSpecs"]
    for group in groups:
        group["minReplicas"], group["maxReplicas"] = low, high
    ray.patch("rayclusters", cluster, {"spec": {"workerGroupSpecs": groups}})


# -- other sources of demand -----------------------------------------------------------

REQUEST_RESOURCES = """
import sys, ray
from ray.autoscaler.sdk import request_resources
ray.init(address="auto", namespace="krc", logging_level="ERROR")
request_resources(bundles=[{"CPU": 1}] * int(sys.argv[1]))
print("requested", sys.argv[1])
"""
PLACEMENT_GROUP = """
import sys, ray
from ray.util.placement_group import placement_group, remove_placement_group, get_placement_group
ray.init(address="auto", namespace="krc", logging_level="ERROR")
if sys.argv[1] == "make":
    group = placement_group([{"CPU": 1}], name="held", lifetime="detached")
    ray.get(group.ready(), timeout=300)
else:
    remove_placement_group(get_placement_group("held"))
print("placement-group", sys.argv[1])
"""


def test_request_resources_and_placement_groups_drive_scale_up_and_hold_workers(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Catches: request_resources that scales nothing, an idle worker holding a placement group
    removed (watched for as long as an unheld idle worker would take to go), a worker kept after
    its placement group is removed."""
    autoscaling_cluster(ray, cluster_values, "sdk", [_group("small", high=2)], idle_timeout_s=IDLE_S)
    ready(ray, "sdk", timeouts)
    window = scale_down_window(profile, IDLE_S)
    head = ray.head_pod("sdk")
    with ScaleWatcher(ray, "sdk", timeline.autoscaling("request_resources, then a placement group")) as watch:
        asked = watch.event("request_resources(1 CPU)")
        ray.exec(head, ["python", "-c", REQUEST_RESOURCES, "1"])
        with behaviour("request_resources scales up with no task or actor pending"):
            up = until(watch, _workers("small", 1), "1 worker alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        watch.event("placement group made; request_resources cleared")
        ray.exec(head, ["python", "-c", PLACEMENT_GROUP, "make"])
        ray.exec(head, ["python", "-c", REQUEST_RESOURCES, "0"])
        with behaviour("an idle worker that holds a placement group is not removed"):
            broken = _worker_stays(ray, "sdk", "the worker holding a placement group stays", window.latest_s)
            assert not broken, f"the worker holding a placement group did not stay: {broken}"
        idle = watch.event("placement group removed")
        ray.exec(head, ["python", "-c", PLACEMENT_GROUP, "remove"])
        scaled_down(
            watch, _no_pods("small"), "the worker goes once its placement group is removed",
            "the idle worker to be removed", idle, window, metrics,
        )  # fmt: skip
    watch.assert_evidence()


# -- after the head is lost -------------------------------------------------------------

FT_SCALER = "ftscaler"


@pytest.fixture
def ft_scaler_goes_before_redis(ray: Ray, timeouts: Timeouts) -> Iterator[None]:
    yield from ray_processes.deleted_before_redis(ray, "rayclusters", FT_SCALER, timeouts)


@pytest.mark.kuberay_issue(1141)
@pytest.mark.usefixtures("ft_scaler_goes_before_redis")
def test_autoscaling_keeps_working_after_a_gcs_fault_tolerant_head_is_lost(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """As KubeRay's TestRayClusterAutoscalerGCSFT, with demand held across the loss: one actor
    holds a worker while the head pod is deleted; the new head, restored from Redis, still has the
    actor on the same worker, and its autoscaler scales up for new demand and down once it goes.

    Catches: a lost head never recreated (#1141); a new head that starts without the state in
    Redis (the actor gone); the worker replaced or the group reset when the head came back; an
    autoscaler on the new head that scales nothing for new demand, goes above maxReplicas, or keeps
    idle workers past idleTimeoutSeconds + `scale_down_slack_s` (or removes them before it)."""
    ray_processes.start_redis(ray, profile, timeouts)
    autoscaling_cluster(ray, cluster_values, FT_SCALER, [_group("small", high=2)], autoscaler_version="v2",
                        idle_timeout_s=IDLE_S, redis_address=ray_processes.REDIS_ADDRESS)  # fmt: skip
    ready(ray, FT_SCALER, timeouts)
    recording = timeline.autoscaling("GCS FT: 1 actor, head lost, 1 more actor, both released")
    with ScaleWatcher(ray, FT_SCALER, recording) as watch:
        watch.event("1 one-CPU actor asked for")
        ask(ray, FT_SCALER, 1, tag="before-")
        with behaviour("pending demand scales the group up"):
            until(watch, _workers("small", 1), "1 worker alive in Ray", timeouts.scale)
        actors_placed(ray, FT_SCALER, 1)
        head, (worker,) = ray.head_pod(FT_SCALER), ray.pods(FT_SCALER, "worker")
        lost = watch.event("head pod deleted")
        ray.core.delete_namespaced_pod(head.metadata.name, ray.namespace)
        ray.wait_replaced(FT_SCALER, head, "head", timeouts.ready)
        ray.wait_cluster_ready(FT_SCALER, timeouts.ready)
        held = counted(ray_processes.until_head_answers(ray, FT_SCALER, PENDING, timeouts.ready))
        metrics["recovery_s"] = round(watch.event("the new head runs drivers") - lost, 2)
        assert held == (1, 0), f"the new head does not have the held actor alive: (alive, pending) {held}"
        (still,) = ray.pods(FT_SCALER, "worker")
        assert still.metadata.uid == worker.metadata.uid, "the worker holding the actor was replaced"
        asked = watch.event("1 more actor asked for, of the new head's autoscaler")
        ask(ray, FT_SCALER, 1, tag="after-")
        with behaviour("after the head loss, pending demand scales the group up"):
            up = until(watch, _workers("small", 2), "2 workers alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        assert actors_placed(ray, FT_SCALER, 2) == (2, 0)
        idle = watch.event("demand released")
        release(ray, FT_SCALER)
        scaled_down(
            watch, _no_pods("small"), "after the head loss, idle workers go after idleTimeoutSeconds",
            "the idle workers to be removed", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    desired, pods = watch.max_desired("small"), watch.max_pods("small")
    assert desired <= 2 and pods <= 2, f"above maxReplicas 2: desired up to {desired}, pods up to {pods}"
    assert not any(restarts(ray, FT_SCALER).values()), (
        f"new head containers restarted: {restarts(ray, FT_SCALER)}"
    )


# -- multi-host groups -----------------------------------------------------------------


def test_multi_host_group_scales_by_whole_replicas(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    timeline: Recorder,
    capabilities: Capabilities,
) -> None:
    """Catches: a multi-host replica brought or removed one host at a time (a partial replica
    lasting more than one sample), hosts of one replica labelled as different replicas (with the
    RayMultiHostIndexing gate on, which labels them), more pods than maxReplicas x numOfHosts."""
    group = _group("pair", high=1, num_of_hosts=2)
    autoscaling_cluster(ray, cluster_values, "hosts", [group], idle_timeout_s=IDLE_S)
    ready(ray, "hosts", timeouts)
    with ScaleWatcher(ray, "hosts", timeline.autoscaling("numOfHosts 2: one replica is two pods")) as watch:
        # Two one-CPU actors: one whole replica's worth. (Autoscaler v2 divides the hosts it
        # wants by numOfHosts, rounding down, so a one-host demand scales nothing here.)
        ask(ray, "hosts", 2)
        with behaviour("one replica of a two-host group brings both hosts"):
            until(watch, _workers("pair", 2), "both hosts of the replica alive in Ray", timeouts.scale)
        replica_labels = {p.metadata.labels.get("ray.io/worker-group-replica-name") for p in
                          ray.pods("hosts", "worker")}  # fmt: skip
        idle = watch.event("demand released")
        release(ray, "hosts")
        scaled_down(watch, _no_pods("pair"), "scale-down removes the whole replica",
                    "the replica's pods to be removed", idle, scale_down_window(profile, IDLE_S))  # fmt: skip
    watch.assert_evidence()
    if capabilities.feature_gates.get("RayMultiHostIndexing"):  # the gate that labels replicas
        assert None not in replica_labels, "a host pod has no ray.io/worker-group-replica-name label"
        assert len(replica_labels) == 1, f"the two hosts belong to replicas {replica_labels}"
    assert watch.max_pods("pair") <= 2, f"up to {watch.max_pods('pair')} pods for maxReplicas 1 x 2 hosts"
    streak = partial_replica_streak(watch.samples, "pair", 2)
    assert streak <= 1, f"a partial replica (an odd pod count) lasted {streak} samples"


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("group idle timeout with autoscaler v1", "autoscaler v2 is not enabled"),
        ("minReplicas above maxReplicas", "greater than maxReplicas"),
    ],
)
@pytest.mark.no_pods
def test_invalid_autoscaling_spec_is_rejected(
    case: str, expected: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: an invalid autoscaling spec accepted (pods made) or refused without naming why."""
    if case.startswith("group idle"):
        groups, options = [_group("small", high=1, idle_timeout_s=10)], {"autoscaler_version": "v1"}
    else:
        groups, options = [_group("small", low=3, high=1)], {}
    body = render("ray/raycluster.yaml", **{**cluster_values, "name": "invalid", "autoscaling": True,
                                            "workers": groups, **options})  # fmt: skip
    with behaviour(f"{case} is rejected as documented"):
        rejected(ray, body, expected, timeouts)
