"""Area autoscaling, issue 20's variants: task demand, upscaling modes, a worker group added to a live
cluster, placement-group strategies; as KubeRay v1.7.0's e2eautoscaler and Ray 2.58's docs assert them.

test_autoscaling.py covers actors, request_resources, one placement group holding a worker, idle
timeouts and bounds; these checks add what it does not. As there, the head offers no CPU, a
`ScaleWatcher` samples desired replicas, pods by phase and Ray's alive workers through each check
(the evidence for "never above maxReplicas" and the report's timeline), and a history with lost
reads or holes fails the check. Where the batches the autoscaler asks for are the behaviour (the
upscaling modes), every value it writes into the group's `replicas` is read off a watch of the
RayCluster (`ReplicaWrites`): samples two seconds apart could merge two batches into one.
"""

from __future__ import annotations

import itertools
import json
import shlex
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from conformance import interrupts
from conformance.errors import HarnessError
from conformance.kube.manifests import render
from conformance.kube.ray import GROUP, VERSION, ExecError, Ray
from conformance.kube.sampling import LOST_SAMPLE, assert_complete, crashed, own_client
from conformance.kube.scaling import ScaleWatcher
from conformance.kube.target import CONNECT_TIMEOUT_S, WATCH_GRACE_S
from conformance.kube.wait import WaitTimeout, behaviour, holds_for, poll_until
from conformance.profiles import Profile
from conformance.report.timelines import AutoscalingRecording, Recorder
from conformance.suites.autoscaling import (
    PLACEMENT_SLACK_S,
    actors_placed,
    ask,
    ready,
    scale_down_window,
    scaled_down,
    until,
)
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("autoscaling")

IDLE_S = 30  # as test_autoscaling.py: short for a check, long enough to tell "not before" apart
# Ray's autoscalers (v1 and v2) run an update every 5 s (AUTOSCALER_UPDATE_INTERVAL_S); a
# decision that should not happen has had its chance after this many of them.
AUTOSCALER_ROUNDS_S = 20


def _group(name: str, replicas: int = 0, low: int = 0, high: int = 2, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "min_replicas": low, "max_replicas": high, **extra}


def _workers(group: str, count: int, alive: int | None = None) -> Any:
    """`count` pods of `group` running and `alive` (default `count`) workers alive in Ray."""
    want = count if alive is None else alive
    return lambda s: s.pods(group, "Running") == count and s.ray_alive_workers == want


def _at_least(group: str, count: int) -> Any:
    return lambda s: s.pods(group, "Running") >= count and (s.ray_alive_workers or 0) >= count


def _no_pods(group: str) -> Any:
    return lambda s: s.pods(group) == 0


def _cluster(
    ray: Ray,
    values: dict[str, Any],
    name: str,
    groups: list[dict[str, Any]],
    upscaling_mode: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """An autoscaling RayCluster whose head offers no CPU. The template has no `upscalingMode`, so
    it is set on the rendered object."""
    body = render("ray/raycluster.yaml", **{**values, "name": name, "autoscaling": True, "workers": groups,
                                            **options})  # fmt: skip
    if upscaling_mode is not None:
        body["spec"]["autoscalerOptions"]["upscalingMode"] = upscaling_mode
    return ray.create("rayclusters", body)


def _max_seen(watch: ScaleWatcher, group: str) -> int:
    return max(watch.max_desired(group), watch.max_pods(group))


# -- demand from tasks -------------------------------------------------------------------

# The driver of a Ray job that keeps `count` one-CPU tasks in flight until the job is stopped:
# tasks live only as long as their driver, so the driver is a Ray job on the head (its
# entrypoint takes no CPU), stopped through Ray's job API to release the demand.
TASKS = """
import sys, threading, ray
ray.init(logging_level="ERROR")

@ray.remote(num_cpus=1)
def hold():
    threading.Event().wait()  # holds its CPU until the job is stopped, with no bound to outlive

ray.get([hold.remote() for _ in range(int(sys.argv[1]))])
"""
JOB = """
import sys
from ray.job_submission import JobStatus, JobSubmissionClient
jobs = JobSubmissionClient("http://127.0.0.1:8265")
if sys.argv[1] == "submit":
    print("submitted", jobs.submit_job(entrypoint=sys.argv[3], submission_id=sys.argv[2]))
else:
    print("stop-accepted", jobs.stop_job(sys.argv[2]))
"""
TASK_STATES = """
import ray
from ray.util.state import list_tasks
ray.init(address="auto", logging_level="ERROR")
states = [t.state for t in list_tasks(filters=[("name", "=", "hold")], limit=1000)]
done = sum(1 for s in states if s in ("FINISHED", "FAILED"))
print("running", states.count("RUNNING"), "waiting", len(states) - done - states.count("RUNNING"))
"""
TASK_JOB_ID = "krc-task-demand"


def _submit_tasks(ray: Ray, cluster: str, count: int) -> None:
    entrypoint = f"python -c {shlex.quote(TASKS)} {count}"
    out = ray.exec(ray.head_pod(cluster), ["python", "-c", JOB, "submit", TASK_JOB_ID, entrypoint])
    if f"submitted {TASK_JOB_ID}" not in out:
        raise HarnessError(f"Ray's job server did not take the task driver: {out.strip()[-300:]}")


def _stop_tasks(ray: Ray, cluster: str) -> None:
    out = ray.exec(ray.head_pod(cluster), ["python", "-c", JOB, "stop", TASK_JOB_ID])
    if "stop-accepted True" not in out:
        raise HarnessError(f"Ray's job server did not stop the task driver: {out.strip()[-300:]}")


def _tasks_placed(ray: Ray, cluster: str, running: int, waiting: int) -> None:
    """Ray runs `running` of the tasks and keeps `waiting` pending: the workers the autoscaler
    added take the tasks, and the demand above maxReplicas stays unmet rather than gone."""
    seen = [(0, 0)]

    def placed() -> tuple[int, int] | None:
        words = ray.exec(ray.head_pod(cluster), ["python", "-c", TASK_STATES]).split()
        seen.append((int(words[words.index("running") + 1]), int(words[words.index("waiting") + 1])))
        return seen[-1] if seen[-1] == (running, waiting) else None

    try:
        poll_until(placed, what=f"{running} tasks running, {waiting} waiting", timeout=PLACEMENT_SLACK_S)
    except WaitTimeout as exc:
        raise AssertionError(
            f"the task demand on the new workers: after {exc.timeout:.0f}s {seen[-1][0]} running, "
            f"{seen[-1][1]} waiting (expected {running} and {waiting})"
        ) from exc


def _desired_stays_within(ray: Ray, cluster: str, group: str, high: int, duration: float) -> str:
    """Watch the RayCluster for `duration`: "" while the group's replicas stay <= `high`."""

    def within(obj: dict[str, Any]) -> bool:
        groups = obj["spec"].get("workerGroupSpecs", [])
        return all(int(g.get("replicas", 0)) <= high for g in groups if g["groupName"] == group)

    return holds_for(
        ray.list_fn("rayclusters"),
        within,
        what=f"group {group} stays at or below {high} replicas with demand pending",
        duration=duration,
        field_selector=f"metadata.name={cluster}",
    )


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_task_demand_scales_a_group_to_max_replicas_and_never_above(
    version: str,
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Three one-CPU tasks of a running Ray job for a group of maxReplicas 2: the group goes to 2,
    two tasks run and one waits, for as long as the autoscaler has several rounds to overshoot;
    stopping the job frees the workers, which go after idleTimeoutSeconds.

    Catches: task demand (not actors, not request_resources) that scales nothing or fewer workers
    than it needs, a group scaled above maxReplicas for demand that exceeds it, workers that do not
    take the pending tasks, and workers of a stopped job's tasks kept past idleTimeoutSeconds +
    `scale_down_slack_s` or removed before it."""
    _cluster(ray, cluster_values, "tasks", [_group("small", high=2)],
             autoscaler_version=version, idle_timeout_s=IDLE_S)  # fmt: skip
    ready(ray, "tasks", timeouts)
    title = f"autoscaler {version}: a job's 3 one-CPU tasks, maxReplicas 2"
    with ScaleWatcher(ray, "tasks", timeline.autoscaling(title)) as watch:
        asked = watch.event("Ray job submitted: 3 one-CPU tasks")
        _submit_tasks(ray, "tasks", 3)
        with behaviour("pending task demand scales the group up to maxReplicas"):
            up = until(watch, _workers("small", 2), "2 workers alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        _tasks_placed(ray, "tasks", running=2, waiting=1)
        with behaviour("a group with task demand above maxReplicas stays at maxReplicas"):
            broken = _desired_stays_within(ray, "tasks", "small", 2, AUTOSCALER_ROUNDS_S)
            assert not broken, f"the group went above maxReplicas 2: {broken}"
        idle = watch.event("Ray job stopped")
        _stop_tasks(ray, "tasks")
        scaled_down(
            watch, _no_pods("small"), "workers freed by a stopped job's tasks go after idleTimeoutSeconds",
            "the idle workers to be removed", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    metrics["max_replicas_seen"] = _max_seen(watch, "small")
    desired, pods = watch.max_desired("small"), watch.max_pods("small")
    assert desired <= 2 and pods <= 2, f"above maxReplicas 2: desired up to {desired}, pods up to {pods}"


# -- upscaling modes ---------------------------------------------------------------------

DEMAND = 6  # one-CPU actors: one more than Ray's smallest rate-limited batch
# Ray's autoscaler v1 keeps pending + new workers of a type within max(5, upscaling_speed x
# running) (resource_demand_scheduler.UPSCALING_INITIAL_NUM_NODES); `Conservative` is
# upscaling_speed 1, so from no worker the first batch is at most 5. KubeRay's e2e
# (TestRayClusterAutoscalerUpscalingModeConservative) asserts this cap for v1 and v2.
FIRST_BATCH_CAP = 5


class ReplicaWrites:
    """Every value one group's `replicas` takes in a RayCluster, from a watch of it (the autoscaler
    writes each batch there), in a thread of its own on a client of its own."""

    def __init__(
        self, ray: Ray, cluster: str, group: str, recording: AutoscalingRecording | None = None
    ) -> None:
        self.cluster, self.group, self.namespace = cluster, group, ray.namespace
        self.recording = recording  # each write becomes an event of the check's timeline
        self.values: list[tuple[float, int]] = []  # (seconds since start, replicas) at each change
        self.errors: list[str] = []
        self._api = own_client(ray.api)
        self._custom = client.CustomObjectsApi(self._api)
        self._stop = threading.Event()
        self._crash: BaseException | None = None
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"replica-writes-{cluster}", daemon=True)

    def __enter__(self) -> ReplicaWrites:
        interrupts.start_thread(self._thread)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        interrupts.join_thread(self._thread, timeout=30)
        self._api.close()
        if self._crash is not None and exc_type is None:
            raise crashed(f"RayCluster {self.cluster}'s replicas", self._crash) from self._crash

    def ramp(self) -> list[int]:
        """The values written from the first above 0 on: the batches asked for, in order."""
        values = [v for _, v in self.values]
        first = next((i for i, v in enumerate(values) if v > 0), len(values))
        return values[first:]

    def first_above_zero(self, timeout: float) -> int:
        return self._until(lambda ramp: ramp[0] if ramp else None, "the first scale-up of the group", timeout)

    def reached(self, count: int, timeout: float) -> list[int]:
        found = self._until(lambda r: r if count in r else None, f"replicas {count} written", timeout)
        return found[: found.index(count) + 1]

    def assert_evidence(self) -> None:
        """The watch saw every write: no lost connection it could not resume from its version."""
        assert_complete(f"RayCluster {self.cluster}'s replicas", self.errors)

    def _until(self, found: Any, what: str, timeout: float) -> Any:
        def check() -> Any:
            if self._crash is not None:
                raise crashed(f"RayCluster {self.cluster}'s replicas", self._crash) from self._crash
            return found(self.ramp())

        return poll_until(check, what=what, timeout=timeout, every=0.5,
                          describe=lambda: f"replicas written {self.ramp() or [0]}")  # fmt: skip

    def _list(self, **kwargs: Any) -> Any:
        return self._custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "rayclusters",
            field_selector=f"metadata.name={self.cluster}",
            **kwargs,
        )

    def _record(self, obj: dict[str, Any]) -> None:
        for spec in obj["spec"].get("workerGroupSpecs", []):
            if spec["groupName"] == self.group:
                value = int(spec.get("replicas", 0))
                if not self.values or self.values[-1][1] != value:
                    self.values.append((round(time.monotonic() - self._started, 2), value))
                    if self.recording and len(self.values) > 1:
                        self.recording.event(f"replicas {value} written")

    def _run(self) -> None:
        version = ""
        try:
            while not self._stop.is_set():
                if not version:  # first, or after the watch's version expired: a fresh list
                    if self.values:
                        self.errors.append("the watch's resource version expired: writes may be missed")
                    listing = self._list()
                    for item in listing["items"]:
                        self._record(item)
                    version = listing["metadata"]["resourceVersion"]
                version = self._follow(version)
        except Exception as exc:  # noqa: BLE001 - raised as a harness error when the watcher stops
            self._crash = exc

    def _follow(self, version: str) -> str:
        """One watch from `version`; the version to resume from ("" to list again)."""
        stream = watch.Watch()
        try:
            for event in stream.stream(self._list, resource_version=version, timeout_seconds=10,
                                       _request_timeout=(CONNECT_TIMEOUT_S, 10 + WATCH_GRACE_S)):  # fmt: skip
                obj = event["object"]
                if event["type"] == "ERROR":
                    return ""
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._record(obj)
                if self._stop.is_set():
                    break
        except ApiException as exc:
            if exc.status != 410:
                raise
            return ""
        except (ReadTimeoutError, ProtocolError, *LOST_SAMPLE):
            pass  # resumed from `version`: nothing written meanwhile is lost
        finally:
            stream.stop()
        return version


# Six workers at once take most of a two-core node's CPU requests (KubeRay's wait-gcs-ready init
# container asks 200m each): beside another check's pods some would stay Pending for want of CPU.
@pytest.mark.exclusive("asks for six workers at once, most of a small node's CPU requests", quiet=True)
@pytest.mark.parametrize(
    ("version", "mode"),
    [("v1", "Conservative"), ("v2", "Conservative"), ("v1", "Aggressive"), ("v2", "Default")],
)
def test_upscaling_mode_sets_the_batches_of_new_workers(
    version: str,
    mode: str,
    ray: Ray,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Six one-CPU actors at once, for a group of maxReplicas 6, with autoscalerOptions.upscalingMode.

    Conservative (Ray: upscaling_speed 1; "the number of pending worker Pods is at most the size of
    the Ray cluster"): the first batch is at most 5 (KubeRay's e2e bound, Ray's smallest batch); with
    autoscaler v2 each batch is also at most the workers already asked for (v2 launches at most
    upscaling_speed x the requested and allocated instances, at least 1), so the replicas at most
    double from one write to the next. The demand is met in the end: rate-limited, not capped.
    Default and Aggressive (upscaling_speed 1000, "not rate-limited"): the whole demand in the first
    batch, with either autoscaler (measured with Ray 2.58: v1 5 then 6, v2 1, 2, 4 then 6 for
    Conservative; 6 at once for Default and Aggressive).

    Catches: an upscalingMode that KubeRay or the autoscaler drops or misreads (say, a RayCluster CRD
    that prunes it): Conservative scaling everything at once, Default/Aggressive rate-limited as
    Conservative; a Conservative cluster whose demand is never met; a group above maxReplicas."""
    groups = [_group("burst", high=DEMAND)]
    _cluster(ray, cluster_values, "modes", groups, upscaling_mode=mode, autoscaler_version=version)
    ready(ray, "modes", timeouts)
    title = f"autoscaler {version}, upscalingMode {mode}: {DEMAND} one-CPU actors"
    with (
        ScaleWatcher(ray, "modes", timeline.autoscaling(title)) as watch,
        ReplicaWrites(ray, "modes", "burst", watch.recording) as writes,
    ):
        asked = watch.event(f"{DEMAND} one-CPU actors asked for at once")
        ask(ray, "modes", DEMAND)
        with behaviour(f"pending demand scales the group up (upscalingMode {mode})"):
            first = writes.first_above_zero(timeouts.scale)
        metrics["first_batch_replicas"] = first
        if mode == "Conservative":
            assert first <= FIRST_BATCH_CAP, (
                f"upscalingMode Conservative: the first batch asked for {first} workers, above "
                f"{FIRST_BATCH_CAP} (Ray's smallest rate-limited batch); replicas written {writes.ramp()}; "
                f"{_mode_now(ray, 'modes')}"
            )
        whole = f"the autoscaler asks for the whole demand of {DEMAND} workers (upscalingMode {mode})"
        with behaviour(whole):
            ramp = writes.reached(DEMAND, timeouts.scale)
        metrics["replica_writes_to_demand"] = len(ramp)
        _judge_ramp(version, mode, ramp, _mode_now(ray, "modes"))
        with behaviour(f"{DEMAND} workers join Ray (upscalingMode {mode})"):
            up = until(watch, _workers("burst", DEMAND), f"{DEMAND} workers alive in Ray", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        alive, pending = actors_placed(ray, "modes", DEMAND)
        assert (alive, pending) == (DEMAND, 0), f"{alive} of the {DEMAND} actors placed, {pending} pending"
    watch.assert_evidence()
    writes.assert_evidence()
    metrics["max_replicas_seen"] = _max_seen(watch, "burst")
    assert max(writes.ramp()) <= DEMAND and watch.max_pods("burst") <= DEMAND, (
        f"above maxReplicas {DEMAND}: replicas written {writes.ramp()}, pods up to {watch.max_pods('burst')}"
    )


def _mode_now(ray: Ray, cluster: str) -> str:
    """The upscalingMode the RayCluster holds now, for a failure message: a field the API server
    pruned (a stale CRD) or someone changed shows here."""
    options = ray.get("rayclusters", cluster)["spec"].get("autoscalerOptions", {})
    return f"the RayCluster's upscalingMode is now {options.get('upscalingMode', 'unset')}"


def _judge_ramp(version: str, mode: str, ramp: list[int], now: str) -> None:
    """The batches (replicas written, up to the whole demand) against what `mode` documents."""
    if mode == "Conservative":
        if version == "v2":
            steps = list(itertools.pairwise(ramp))
            over = [(a, b) for a, b in steps if b > _conservative_cap(version, a)]
            assert not over, (
                f"upscalingMode Conservative (autoscaler v2): replicas more than doubled in one batch "
                f"{over}; replicas written {ramp}; {now}"
            )
        return
    # Not rate-limited means some batch Conservative could not have asked for. Not "one batch":
    # the demand itself can reach the autoscaler in two rounds (v2 measured [5, 6] for Default).
    beyond = [(a, b) for a, b in itertools.pairwise([0, *ramp]) if b > _conservative_cap(version, a)]
    assert beyond, (
        f"upscalingMode {mode} (autoscaler {version}): all batches within Conservative's rate limit "
        f"(no rate limit expected); replicas written {ramp}; {now}"
    )


def _conservative_cap(version: str, asked: int) -> int:
    """The most replicas Conservative (upscaling_speed 1) lets a group reach from `asked`: v1 keeps
    pending + new within max(5, running), at most `asked` running; v2 launches at most as many as
    it has, at least 1."""
    return asked + max(FIRST_BATCH_CAP, asked) if version == "v1" else max(1, 2 * asked)


# -- a worker group added to a live cluster ----------------------------------------------

KILL = """
import sys, ray
ray.init(address="auto", namespace="krc", logging_level="ERROR")
ray.kill(ray.get_actor(sys.argv[1]))
print("killed", sys.argv[1])
"""


def test_a_worker_group_added_to_a_live_cluster_scales_for_demand_only_it_satisfies(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """A running autoscaling cluster with one CPU group and a worker busy in it gets a second group
    whose workers have a custom resource and no CPU (appended to spec.workerGroupSpecs, the first
    group left as it is): an actor asking that resource scales the new group from 0 to 1, a second
    CPU actor still scales the first group, and once its actor is gone the new group's worker goes
    after idleTimeoutSeconds.

    Catches (as KubeRay's TestRayClusterAutoscalerAddNewWorkerGroup): a group added to a live
    RayCluster that KubeRay makes no pods for or the autoscaler never learns of (demand only it can
    satisfy scales nothing), the first group's replicas reset or its busy worker replaced when the
    spec changes, an autoscaler stuck for the old group after the change, and the new group's idle
    worker kept past idleTimeoutSeconds + `scale_down_slack_s` or removed before it."""
    _cluster(ray, cluster_values, "grow", [_group("cpu", high=2)], idle_timeout_s=IDLE_S)
    ready(ray, "grow", timeouts)
    title = "a group with a custom resource added live"
    with ScaleWatcher(ray, "grow", timeline.autoscaling(title)) as watch:
        ask(ray, "grow", 1, tag="c")
        with behaviour("pending demand scales the first group up"):
            until(watch, _workers("cpu", 1), "1 cpu worker alive in Ray", timeouts.scale)
        busy = {p.metadata.name for p in ray.pods("grow", "worker")}
        added_at = watch.event("group 'special' ({special: 1}, no CPU) added to the live cluster")
        _add_group(ray, "grow", "special", "special")
        asked = watch.event("1 actor asking {special: 1} and no CPU")
        ask(ray, "grow", 1, cpus=0, tag="s", custom={"special": 1})
        with behaviour("demand only the added group satisfies scales it up"):
            up = until(watch, _workers("special", 1, alive=2), "the added group's worker alive in Ray",
                       timeouts.scale)  # fmt: skip
        metrics["scale_up_s"] = round(up - asked, 2)
        actors_placed(ray, "grow", 2)
        watch.event("a second one-CPU actor")
        ask(ray, "grow", 1, tag="c2")
        with behaviour("the first group still scales up after a group was added"):
            until(watch, _workers("cpu", 2, alive=3), "2 cpu workers alive in Ray", timeouts.scale)
        alive, pending = actors_placed(ray, "grow", 3)
        assert (alive, pending) == (3, 0), f"{alive} actors alive, {pending} pending"
        idle = watch.event("the custom-resource actor killed")
        ray.exec(ray.head_pod("grow"), ["python", "-c", KILL, "hold-s0"])
        scaled_down(
            watch, _no_pods("special"), "the added group's idle worker goes after idleTimeoutSeconds",
            "the added group's idle worker to be removed", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    metrics["max_replicas_seen"] = _max_seen(watch, "special")
    after = [s for s in watch.samples if s.t >= added_at]
    dropped = [s.t for s in after if s.groups["cpu"].desired < 1]
    assert not dropped, f"the first group's replicas fell below its busy worker after the change ({dropped}s)"
    left = busy - {p.metadata.name for p in ray.pods("grow", "worker") if not p.metadata.deletion_timestamp}
    assert not left, f"the first group's busy worker {sorted(left)} was removed after the change"
    most = watch.max_pods("special")
    assert most <= 1, f"up to {most} pods for the added group's maxReplicas 1"


def _add_group(ray: Ray, cluster: str, name: str, resource: str) -> None:
    """Append a group to the live RayCluster: the first group's pod template, 0 to 1 replicas, and
    workers with one `resource` and no CPU (as KubeRay's e2e adds a GPU group with num-cpus 0), so
    only demand for `resource` can use them. A JSON patch that adds only the new group leaves the
    others as the autoscaler has them."""
    spec = ray.get("rayclusters", cluster)["spec"]
    template = spec["workerGroupSpecs"][0]["template"]
    # rayStartParams `resources` is a quoted JSON object, as KubeRay's samples write it.
    quoted = json.dumps({resource: 1}).replace('"', '\\"')
    params = {"num-cpus": "0", "resources": f'"{quoted}"'}
    group = {"groupName": name, "replicas": 0, "minReplicas": 0, "maxReplicas": 1, "numOfHosts": 1,
             "rayStartParams": params, "template": template}  # fmt: skip
    ray.custom.patch_namespaced_custom_object(
        GROUP, VERSION, ray.namespace, "rayclusters", cluster,
        [{"op": "add", "path": "/spec/workerGroupSpecs/-", "value": group}],
        _content_type="application/json-patch+json",
    )  # fmt: skip


# -- placement group strategies ----------------------------------------------------------

PLACEMENT_GROUP = """
import sys, ray
from ray.util.placement_group import placement_group
ray.init(address="auto", namespace="krc", logging_level="ERROR")
placement_group([{"CPU": 1}] * int(sys.argv[2]), strategy=sys.argv[1], name="held", lifetime="detached")
print("placement-group asked")
"""
PLACEMENT_GROUP_STATE = """
import json, ray
from ray.util import placement_group_table
from ray.util.placement_group import get_placement_group
ray.init(address="auto", namespace="krc", logging_level="ERROR")
table = placement_group_table(get_placement_group("held"))
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
nodes = sorted({n for n in table["bundles_to_node_id"].values() if n})
print("placement-group", json.dumps({"state": table["state"], "nodes": nodes, "alive": alive}))
"""
BUNDLES = 2  # of one CPU each, as KubeRay's e2e


def _placement_group(ray: Ray, cluster: str) -> dict[str, Any]:
    """Ray's view of the placement group (its state, the nodes of its bundles, the alive nodes).
    The output holds Ray's own log lines too (stderr follows stdout): the answer is the marked line."""
    out = ray.exec(ray.head_pod(cluster), ["python", "-c", PLACEMENT_GROUP_STATE])
    line = next((x for x in out.splitlines() if x.startswith("placement-group ")), "")
    if not line:
        raise ExecError(f"no placement group state in the answer: {out.strip()[-300:]}")
    return json.loads(line.removeprefix("placement-group "))


def _placed(
    ray: Ray, cluster: str, workers: int, not_on: set[str], what: str, timeout: float = PLACEMENT_SLACK_S
) -> dict[str, Any]:
    """Wait until the placement group is CREATED with its bundles on `workers` alive nodes, none of
    them in `not_on`; the wait is the behaviour (Ray places a group moments after its nodes join)."""
    seen: list[Any] = [{}]

    def created() -> dict[str, Any] | None:
        try:
            seen.append(_placement_group(ray, cluster))
        except ExecError as exc:  # Ray's client failing while nodes come and go: asked again
            seen.append(str(exc)[:300])
            return None
        state = seen[-1]
        on = set(state["nodes"])
        good = state["state"] == "CREATED" and on <= set(state["alive"]) and not on & not_on
        return state if good and len(on) == workers else None

    try:
        return poll_until(created, what=what, timeout=timeout)
    except WaitTimeout as exc:
        raise AssertionError(f"{what}: after {exc.timeout:.0f}s the placement group was {seen[-1]}") from exc


@pytest.mark.parametrize(
    ("strategy", "workers", "worker_cpus"),
    # KubeRay's TestRayClusterAutoscalerPlacementGroup: two one-CPU bundles on workers of 2 CPUs
    # pack onto one; spread, they need two (SPREAD is soft, so its workers hold one CPU each).
    [("STRICT_PACK", 1, 2), ("PACK", 1, 2), ("STRICT_SPREAD", 2, 2), ("SPREAD", 2, 1)],
    # Ids no other id contains, so a -k term selects one parametrization.
    ids=["STRICT_PACK", "PACK-soft", "STRICT_SPREAD", "SPREAD-soft"],
)
def test_placement_group_strategy_sets_the_workers_and_survives_their_loss(
    strategy: str,
    workers: int,
    worker_cpus: int,
    ray: Ray,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """A detached placement group of two one-CPU bundles scales a group (workers advertising
    `worker_cpus` logical CPUs through rayStartParams num-cpus) to exactly the workers its strategy
    needs and becomes CREATED on them; when those worker pods are deleted, KubeRay and the
    autoscaler bring as many new ones and the group is CREATED again on the new nodes.

    Catches: a placement group that scales nothing or more or fewer workers than its strategy needs
    (PACK/STRICT_PACK one, SPREAD/STRICT_SPREAD two), rayStartParams num-cpus not what Ray and the
    autoscaler see, and a placement group never rescheduled after its workers are lost (the lost
    workers not replaced, or the replacements not taking it)."""
    group = _group("small", high=3, ray_start_params={"num-cpus": str(worker_cpus)})
    _cluster(ray, cluster_values, "pg", [group], idle_timeout_s=IDLE_S)
    ready(ray, "pg", timeouts)
    title = f"placement group {strategy}: {BUNDLES} one-CPU bundles, {worker_cpus}-CPU workers"
    with ScaleWatcher(ray, "pg", timeline.autoscaling(title)) as watch:
        asked = watch.event(f"{strategy} placement group asked for")
        ray.exec(ray.head_pod("pg"), ["python", "-c", PLACEMENT_GROUP, strategy, str(BUNDLES)])
        with behaviour(f"a {strategy} placement group scales the group up"):
            up = until(watch, _at_least("small", workers), f"{workers} worker(s) alive", timeouts.scale)
        metrics["scale_up_s"] = round(up - asked, 2)
        what = f"the {strategy} placement group CREATED on {workers} node(s)"
        first = _placed(ray, "pg", workers, set(), what)
        with behaviour(f"a {strategy} placement group holds {workers} worker(s), no more"):
            broken = _desired_stays_within(ray, "pg", "small", workers, AUTOSCALER_ROUNDS_S)
            assert not broken, f"more workers than the {strategy} placement group needs: {broken}"
        lost_at = watch.event(f"its {workers} worker pod(s) deleted")
        old = _delete_workers(ray, "pg")
        # Ray marks the lost nodes dead and reschedules the group; the new pods KubeRay makes for the
        # replicas the autoscaler still asks for take it. The wait is on Ray's view, by node identity.
        what = f"the {strategy} placement group CREATED again on {workers} new node(s)"
        with behaviour("lost workers of a placement group are replaced and take it again"):
            _placed(ray, "pg", workers, set(first["nodes"]), what, timeouts.scale)
        metrics["recovery_s"] = round(watch.event("placement group CREATED again") - lost_at, 2)
        names = {p.metadata.name for p in ray.pods("pg", "worker") if p.metadata.deletion_timestamp is None}
        assert not names & old, f"the deleted worker pods {sorted(names & old)} are still there"
    watch.assert_evidence()
    metrics["max_replicas_seen"] = _max_seen(watch, "small")
    before = [s for s in watch.samples if s.t < lost_at]
    over = max((max(s.groups["small"].desired, s.pods("small")) for s in before), default=0)
    assert over <= workers, f"{strategy}: up to {over} workers for a placement group that needs {workers}"


def _delete_workers(ray: Ray, cluster: str) -> set[str]:
    names = {p.metadata.name for p in ray.pods(cluster, "worker")}
    for name in names:
        ray.core.delete_namespaced_pod(name, ray.namespace)
    return names
