"""Area gpu: how KubeRay declares GPUs to Ray, and how GPU worker groups scale.

GPU counts are read from Ray's own view of each node (the resources a raylet registered),
never from the pod spec. On the local provider the node's GPUs are simulated (an extended
resource on a CPU host); results say so, and the one check that needs a real device is
not applicable there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.kube.manifests import render
from conformance.kube.ray import ExecError, Ray
from conformance.kube.scaling import ScaleWatcher
from conformance.kube.wait import behaviour, poll_until, wait_for
from conformance.profiles import Profile
from conformance.report.timelines import Recorder
from conformance.suites.autoscaling import (
    ask,
    autoscaling_cluster,
    ready,
    rejected,
    release,
    scale_down_window,
    scaled_down,
    until,
)
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("gpu")

IDLE_S = 30

NODE_GPUS = """
import json, ray
ray.init(address="auto", logging_level="ERROR")
print(json.dumps({n["NodeManagerAddress"]: n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"]}))
"""


def _fixed_group(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": 1, **extra}


@pytest.mark.kuberay_issue(99)
@pytest.mark.requires("gpu")  # the "limit" group's pod asks the node for a GPU
def test_gpu_count_precedence_in_rays_view(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Group `resources` > rayStartParams num-gpus > the container's GPU limit.

    Catches (#99): a GPU limit not declared to Ray, rayStartParams num-gpus or the group's
    `resources` ignored or taking the wrong precedence (say, a group `resources` dropped by a
    RayCluster CRD older than the operator)."""
    groups = [
        _fixed_group("limit", gpus=1),  # nvidia.com/gpu: 1 on the container
        _fixed_group("params", ray_start_params={"num-gpus": "2"}),
        _fixed_group("resources", ray_resources={"GPU": "3"}),
    ]
    values = {**cluster_values, "name": "gpus", "workers": groups}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    ready(ray, "gpus", timeouts)
    group_of = {p.status.pod_ip: p.metadata.labels["ray.io/group"] for p in ray.pods("gpus", "worker")}
    with behaviour("each worker registers with Ray the GPU count its spec declares"):
        seen = _until_registered(ray, group_of, timeouts.ready)
    assert seen == {"limit": 1, "params": 2, "resources": 3}, f"GPUs per group in Ray's view: {seen}"


def _until_registered(ray: Ray, group_of: dict[str, str], timeout: float) -> dict[str, float]:
    """GPUs per group once every worker is an alive Ray node."""

    def registered() -> dict[str, float] | None:
        seen = _gpus_by_group(ray, group_of)
        return seen if len(seen) == len(group_of) else None

    return poll_until(registered, what="every worker registered in Ray", timeout=timeout)


def _gpus_by_group(ray: Ray, group_of: dict[str, str]) -> dict[str, float]:
    by_address = json.loads(ray.python_in_head("gpus", NODE_GPUS).strip().splitlines()[-1])
    return {group_of[address]: gpus for address, gpus in by_address.items() if address in group_of}


def test_group_resources_and_ray_start_gpus_together_are_rejected(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a group that declares GPUs twice accepted (pods made), or refused without naming why."""
    group = _fixed_group("both", ray_resources={"GPU": "1"}, ray_start_params={"num-gpus": "1"})
    body = render("ray/raycluster.yaml", **{**cluster_values, "name": "both", "workers": [group]})
    with behaviour("a group declaring GPUs in both resources and rayStartParams is rejected"):
        rejected(ray, body, "should not be set in both rayStartParams and Resources", timeouts)


@pytest.mark.requires("gpu")
def test_gpu_group_scales_from_zero_for_gpu_tasks_only(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Catches: a GPU worker started for CPU demand, a GPU group that does not scale from 0 for a
    pending GPU actor, idle GPU workers kept past idleTimeoutSeconds + slack."""
    groups = [
        {"name": "cpu", "replicas": 0, "min_replicas": 0, "max_replicas": 1},
        {"name": "gpu", "replicas": 0, "min_replicas": 0, "max_replicas": 1, "gpus": 1},
    ]
    autoscaling_cluster(ray, cluster_values, "mixed", groups, idle_timeout_s=IDLE_S)
    ready(ray, "mixed", timeouts)
    with ScaleWatcher(ray, "mixed", timeline.autoscaling("a CPU actor, then a GPU actor")) as watch:
        ask(ray, "mixed", 1, cpus=1, tag="cpu")
        with behaviour("a pending CPU demand scales the CPU group from 0"):
            until(watch, lambda s: s.pods("cpu", "Running") == 1 and s.ray_alive_workers == 1,
                  "the CPU worker alive in Ray", timeouts.scale)  # fmt: skip
        asked = watch.event("a one-GPU actor asked for")
        # Every sample up to now: the autoscaler had the CPU demand to act on, and no GPU demand.
        gpu_before = watch.max_pods("gpu")
        ask(ray, "mixed", 1, cpus=0, gpus=1, tag="gpu")
        with behaviour("a pending GPU demand scales the GPU group from 0"):
            up = until(watch, lambda s: s.pods("gpu", "Running") == 1 and s.ray_alive_workers == 2,
                       "the GPU worker alive in Ray", timeouts.scale)  # fmt: skip
        metrics["scale_up_s"] = round(up - asked, 2)
        idle = watch.event("demand released")
        release(ray, "mixed")
        scaled_down(
            watch, lambda s: s.pods("gpu") + s.pods("cpu") == 0, "an idle GPU group scales back to 0",
            "both groups at 0", idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    assert gpu_before == 0, f"{gpu_before} GPU worker(s) started for a CPU-only demand"


@pytest.mark.kuberay_issue(1108, 2385)
@pytest.mark.requires("gpu")
def test_unsatisfiable_gpu_request_stays_pending_and_bounded(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, timeline: Recorder
) -> None:
    """More GPUs per pod than any node has: the pod stays Pending, and no flood of pods follows.

    Catches (#1108, #2385): an autoscaler that makes no pod for the demand, or that deletes the
    unschedulable pod and makes new ones past maxReplicas once the idle timeout passes."""
    too_many = profile.gpu.count + 1
    group = {"name": "huge", "replicas": 0, "min_replicas": 0, "max_replicas": 2, "gpus": too_many}
    autoscaling_cluster(ray, cluster_values, "huge", [group], idle_timeout_s=IDLE_S)
    ready(ray, "huge", timeouts)
    with ScaleWatcher(ray, "huge", timeline.autoscaling(f"actors asking {too_many} GPUs")) as watch:
        ask(ray, "huge", 3, cpus=0, gpus=too_many)
        with behaviour("a pending GPU demand makes a worker pod, which the scheduler cannot place"):
            pending = wait_for(
                ray.core.list_namespaced_pod,
                lambda p: p.status.phase == "Pending" and _unschedulable(p),
                what="a GPU worker pod reported Unschedulable",
                timeout=timeouts.scale,
                namespace=ray.namespace,
                label_selector="ray.io/cluster=huge,ray.io/group=huge",
            )
        start = watch.event("a GPU pod is Unschedulable")
        # Past the idle timeout and its slack, when an autoscaler might give up and retry.
        window = scale_down_window(profile, IDLE_S).latest_s
        until(watch, lambda s: s.t >= start + window, f"{window:.0f}s of watching the group", window + 30)
    watch.assert_evidence()
    observed = [s for s in watch.samples if s.t >= start]
    with behaviour("the unschedulable GPU demand stays Pending"):
        running = [s.t for s in observed if s.pods("huge", "Running")]
        assert not running, f"a pod asking {too_many} GPUs ran on a node that has {profile.gpu.count}"
        assert all(s.pods("huge", "Pending") for s in observed), "the group had no Pending pod at times"
    with behaviour("the autoscaler creates no more pods than maxReplicas (kuberay#1108, #2385)"):
        assert watch.max_pods("huge") <= 2, f"{watch.max_pods('huge')} pods for maxReplicas 2"
    reason = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert profile.gpu.resource in (reason.message or ""), reason.message


def _unschedulable(pod: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )


@pytest.mark.requires("gpu", "real_gpu")
def test_cuda_operation_runs_in_a_ray_task(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a GPU worker whose container does not get the device its limit asked for."""
    values = {**cluster_values, "name": "cuda", "workers": [_fixed_group("gpu", gpus=1)]}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    ready(ray, "cuda", timeouts)
    script = (
        "import ray, ctypes\n"
        "ray.init(address='auto', logging_level='ERROR')\n"
        "@ray.remote(num_gpus=1)\n"
        "def devices():\n"
        "    cuda = ctypes.CDLL('libcuda.so.1')\n"
        "    assert cuda.cuInit(0) == 0, 'cuInit failed'\n"
        "    count = ctypes.c_int()\n"
        "    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0\n"
        "    return count.value\n"
        "print('cuda-devices', ray.get(devices.remote(), timeout=600))\n"
    )
    try:
        out = ray.python_in_head("cuda", script, timeout=timeouts.ready)
    except ExecError as exc:  # the task's assertion, or no device: what the check is about
        # The error's last line says why (no libcuda, cuInit failed); the whole output is chained.
        why = (str(exc).strip().splitlines() or ["no output"])[-1]
        raise AssertionError(f"the CUDA task failed in the GPU worker: {why}") from exc
    assert "cuda-devices 1" in out, out
