"""What the autoscaling and GPU checks share: demand made of detached actors, and waits on scale.

Demand is a set of named detached actors (`hold-0`, `hold-1`, ...) asking for CPUs or GPUs:
they outlive the driver that made them, so demand stays until a check releases it, and
unmet ones stay pending, which is what drives the autoscaler.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.scaling import ScaleWatcher
from conformance.kube.wait import WaitTimeout, behaviour, poll_until, wait_for
from conformance.profiles import Profile
from conformance.progress import progress
from conformance.timeouts import Timeouts

# Scripts run by `python -c` in the head; argv carries the numbers.
ASK = """
import json, sys, ray
ray.init(address="auto", namespace="krc", logging_level="ERROR")
count, cpus, gpus, tag = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
custom = json.loads(sys.argv[5])

@ray.remote
class Hold:
    def ping(self):
        return 1

for i in range(count):
    Hold.options(name=f"hold-{tag}{i}", lifetime="detached", num_cpus=cpus, num_gpus=gpus,
                 resources=custom).remote()
print("asked", count)
"""
RELEASE = """
import ray
from ray.util.state import list_actors
ray.init(address="auto", namespace="krc", logging_level="ERROR")
held = [a.name for a in list_actors(filters=[("state", "!=", "DEAD")]) if a.name.startswith("hold-")]
for name in held:
    ray.kill(ray.get_actor(name))
print("released", len(held))
"""
PENDING = """
import ray
from ray.util.state import list_actors
ray.init(address="auto", namespace="krc", logging_level="ERROR")
states = [a.state for a in list_actors(filters=[("state", "!=", "DEAD")]) if a.name.startswith("hold-")]
print("alive", states.count("ALIVE"), "pending", len(states) - states.count("ALIVE"))
"""


def ask(
    ray: Ray,
    cluster: str,
    count: int,
    cpus: float = 1,
    gpus: float = 0,
    tag: str = "",
    custom: dict[str, float] | None = None,
) -> None:
    """Ask for `count` actors of `cpus` CPUs, `gpus` GPUs and `custom` resources each; returns
    once they are asked for."""
    argv = [str(count), str(cpus), str(gpus), tag, json.dumps(custom or {})]
    ray.exec(ray.head_pod(cluster), ["python", "-c", ASK, *argv])


def release(ray: Ray, cluster: str) -> None:
    ray.exec(ray.head_pod(cluster), ["python", "-c", RELEASE])


def actor_states(ray: Ray, cluster: str) -> tuple[int, int]:
    """(alive, pending) among the demand actors."""
    return counted(ray.exec(ray.head_pod(cluster), ["python", "-c", PENDING]))


def counted(output: str) -> tuple[int, int]:
    """(alive, pending) from what PENDING printed."""
    words = output.split()
    return int(words[words.index("alive") + 1]), int(words[words.index("pending") + 1])


# Ray places a pending actor some seconds after a node joins (its raylet reports the free CPU,
# then the GCS schedules): a stated slack for that on a loaded 2-core machine.
PLACEMENT_SLACK_S = 30


def actors_placed(ray: Ray, cluster: str, alive: int) -> tuple[int, int]:
    """(alive, pending) once `alive` demand actors run: the workers KubeRay added can host them.

    Asked right after the workers join, an actor may not be placed yet; the wait is part of the
    behaviour (workers started with the wrong resources would never take one)."""
    seen = [(0, 0)]

    def placed() -> tuple[int, int] | None:
        seen.append(actor_states(ray, cluster))
        return seen[-1] if seen[-1][0] >= alive else None

    try:
        return poll_until(placed, what=f"{alive} actors placed", timeout=PLACEMENT_SLACK_S)
    except WaitTimeout as exc:
        raise AssertionError(
            f"the new workers host {alive} of the demand actors: after {exc.timeout:.0f}s "
            f"{seen[-1][0]} alive, {seen[-1][1]} pending"
        ) from exc


def autoscaling_cluster(
    ray: Ray, values: dict[str, Any], name: str, groups: list[dict[str, Any]], **options: Any
) -> None:
    """An autoscaling RayCluster whose head offers no CPU, so every actor needs a worker."""
    body = render("ray/raycluster.yaml", **{**values, "name": name, "autoscaling": True, "workers": groups,
                                            **options})  # fmt: skip
    ray.create("rayclusters", body)


def ready(ray: Ray, name: str, timeouts: Timeouts) -> None:
    """KubeRay brings the RayCluster to state `ready`: a KubeRay that cannot (say, it cannot make
    the autoscaler's Role) fails the check, with the state it reached."""
    with behaviour(f"KubeRay makes RayCluster {name} ready"):
        ray.wait_cluster_ready(name, timeouts.ready)


@dataclass(frozen=True)
class ScaleDownWindow:
    """When an idle worker may go: not before `idle_s` (less `early_s`: Ray's v1 autoscaler
    notes a node's last use once per 5 s update), and no later than `slack_s` after it."""

    idle_s: float
    early_s: float
    slack_s: float

    @property
    def latest_s(self) -> float:
        return self.idle_s + self.slack_s

    def check(self, seconds: float, what: str) -> None:
        assert seconds >= self.idle_s - self.early_s, (
            f"{what}: removed {seconds}s after going idle, before idleTimeoutSeconds={self.idle_s:.0f}"
            f" (less {self.early_s:.0f}s of slack)"
        )
        assert seconds <= self.latest_s, (
            f"{what}: removed {seconds}s after going idle, later than idleTimeoutSeconds={self.idle_s:.0f}"
            f" + {self.slack_s:.0f}s of slack (profile thresholds.scale_down_slack_s)"
        )


def scale_down_window(profile: Profile, idle_s: float) -> ScaleDownWindow:
    return ScaleDownWindow(
        idle_s, profile.thresholds["scale_down_early_slack_s"], profile.thresholds["scale_down_slack_s"]
    )


def scaled_down(
    watch: ScaleWatcher,
    predicate: Any,
    behaviour_text: str,
    what: str,
    idle: float,
    window: ScaleDownWindow,
    metrics: dict[str, float] | None = None,
) -> float:
    """Wait for the scale-down that `predicate` tells; the seconds from `idle` (the watcher's time
    of the release), recorded as `scale_down_s` in `metrics` before they are judged: they must
    fall inside `window`."""
    with behaviour(behaviour_text):
        gone = until(watch, predicate, what, window.latest_s + watch.every_s)
    seconds = round(gone - idle, 2)
    if metrics is not None:
        metrics["scale_down_s"] = seconds
    window.check(seconds, behaviour_text)
    return seconds


def until(watch: ScaleWatcher, predicate: Any, what: str, timeout: float) -> float:
    """Wait until the newest sample satisfies `predicate`; returns the watcher's time of that sample."""
    deadline = time.monotonic() + timeout
    seen = len(watch.samples)  # only what happens from now on counts
    with progress(f"waiting for {what}") as line:
        while time.monotonic() < deadline:
            fresh = watch.samples[seen:]
            seen += len(fresh)
            for sample in fresh:
                if predicate(sample):
                    return sample.t
            if fresh:
                line.update(describe(fresh[-1]))
            time.sleep(watch.every_s / 2)  # poll-interval: the watcher adds a sample every period
    last = describe(watch.samples[-1]) if watch.samples else "no sample"
    raise WaitTimeout(what, timeout, last)


def describe(sample: Any) -> str:
    groups = ", ".join(f"{name}: desired {g.desired} pods {g.pods}" for name, g in sample.groups.items())
    serve = ""
    if sample.serve_replicas is not None:
        serve = f"; Serve replicas {sample.serve_replicas}, proxies {sample.serve_proxies}"
    return f"{groups}; Ray alive workers {sample.ray_alive_workers}{serve}"


def restarts(ray: Ray, cluster: str) -> dict[str, int]:
    """Restart counts of the head's containers (the Ray head and the autoscaler sidecar)."""
    head = ray.head_pod(cluster)
    return {s.name: s.restart_count for s in head.status.container_statuses or []}


def rejected(ray: Ray, body: dict[str, Any], expected: str, timeouts: Timeouts) -> str:
    """Create `body`; the outcome must be KubeRay's InvalidRayClusterSpec event (or the API's 422),
    naming `expected`, and no pod."""
    try:
        ray.create("rayclusters", body)
    except client.ApiException as exc:
        assert exc.status == 422 and expected in str(exc.body), exc.body
        return str(exc.body)
    name = body["metadata"]["name"]
    event = wait_for(
        ray.core.list_namespaced_event,
        lambda e: e.reason == "InvalidRayClusterSpec",
        what=f"KubeRay's InvalidRayClusterSpec event for {name}",
        timeout=timeouts.apply,
        namespace=ray.namespace,
        field_selector=f"involvedObject.name={name}",
    )
    assert expected in event.message, event.message
    assert not ray.pods(name), f"an invalid RayCluster got pods: {[p.metadata.name for p in ray.pods(name)]}"
    return event.message
