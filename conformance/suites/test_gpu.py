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
from kubernetes import client

from conformance.kube.manifests import render
from conformance.kube.nodes import allocatable
from conformance.kube.ray import ExecError, Ray
from conformance.kube.scaling import ScaleWatcher
from conformance.kube.wait import behaviour, poll_until, wait_for
from conformance.profiles import Profile
from conformance.report.timelines import Recorder
from conformance.suites.autoscaling import (
    actors_placed,
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
@pytest.mark.smoke
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


@pytest.mark.no_pods
@pytest.mark.smoke
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


# Where each demand actor runs, and the GPUs Ray gives that node: {actor name: GPUs of its node}.
ACTOR_NODE_GPUS = """
import json, ray
from ray.util.state import list_actors
ray.init(address="auto", namespace="krc", logging_level="ERROR")
gpus = {n["NodeID"]: n["Resources"].get("GPU", 0) for n in ray.nodes() if n["Alive"]}
alive = list_actors(filters=[("state", "=", "ALIVE")])
print(json.dumps({a.name: gpus.get(a.node_id) for a in alive if a.name.startswith("hold-")}))
"""


@pytest.mark.requires("gpu")
def test_with_only_a_gpu_group_cpu_only_work_scales_it_and_runs_on_a_gpu_worker(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """The documented surprise of a cluster whose only worker group has GPUs: CPU-only work
    scales that group and runs on a GPU worker (Ray's autoscaler avoids GPU nodes for CPU work
    only while another node type could take it, ray-project/ray#13776). Records
    `cpu_actor_node_gpus`, the GPUs of the node the CPU-only actor landed on, and a timeline.

    Catches: CPU-only demand left pending for ever when only GPU groups exist (no node type
    judged fit for it), GPU workers that offer Ray no CPU, a GPU group that does not scale from 0
    for it or keeps its idle GPU worker past idleTimeoutSeconds + slack."""
    group = {"name": "gpu", "replicas": 0, "min_replicas": 0, "max_replicas": 1, "gpus": 1}
    autoscaling_cluster(ray, cluster_values, "gpuonly", [group], idle_timeout_s=IDLE_S)
    ready(ray, "gpuonly", timeouts)
    with ScaleWatcher(ray, "gpuonly", timeline.autoscaling("a CPU-only actor, only a GPU group")) as watch:
        asked = watch.event("a one-CPU actor asked for")
        ask(ray, "gpuonly", 1, cpus=1, tag="cpu")
        with behaviour("CPU-only demand scales the only worker group, a GPU one, from 0"):
            up = until(watch, lambda s: s.pods("gpu", "Running") == 1 and s.ray_alive_workers == 1,
                       "the GPU worker alive in Ray", timeouts.scale)  # fmt: skip
        metrics["scale_up_s"] = round(up - asked, 2)
        with behaviour("the CPU-only actor runs on the GPU worker"):
            actors_placed(ray, "gpuonly", 1)
            where = json.loads(ray.python_in_head("gpuonly", ACTOR_NODE_GPUS).strip().splitlines()[-1])
        metrics["cpu_actor_node_gpus"] = float(where.get("hold-cpu0") or 0)
        idle = watch.event("demand released")
        release(ray, "gpuonly")
        scaled_down(
            watch, lambda s: s.pods("gpu") == 0, "the idle GPU worker goes", "the GPU group at 0",
            idle, scale_down_window(profile, IDLE_S), metrics,
        )  # fmt: skip
    watch.assert_evidence()
    assert metrics["cpu_actor_node_gpus"] >= 1, (
        f"the CPU-only actor runs on a node with {where.get('hold-cpu0')} GPUs, not on the GPU worker"
    )


@pytest.mark.requires("gpu")
def test_gpu_workers_tolerate_the_gpu_taint_and_cpu_workers_do_not(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
) -> None:
    """Workers the autoscaler adds from 0 carry their own group's scheduling: a GPU worker pod
    tolerates the GPU nodes' taint (`<gpu resource>:NoSchedule`, as the EKS module and the NVIDIA
    device plugin's nodes have it) and lands on a node that has the GPUs; a CPU worker pod carries
    no such toleration, so it never takes a tainted GPU node. Where the cluster has GPU nodes
    apart from the others (EKS, a multi-node local cluster), the CPU worker must land off them;
    on one node that has both, only what each pod carries is judged. Records `gpu_nodes` and
    `cpu_pod_on_gpu_node`.

    Catches: worker pods made without their group's tolerations (a GPU worker that cannot go
    where the GPUs are), or with another group's (CPU work spread onto GPU nodes)."""
    groups = [
        {"name": "cpu", "replicas": 0, "min_replicas": 0, "max_replicas": 1},
        {"name": "gpu", "replicas": 0, "min_replicas": 0, "max_replicas": 1, "gpus": 1},
    ]
    autoscaling_cluster(ray, cluster_values, "placed", groups, idle_timeout_s=IDLE_S)
    ready(ray, "placed", timeouts)
    with ScaleWatcher(ray, "placed", timeline.autoscaling("a GPU actor, then a CPU actor")) as watch:
        # The GPU actor takes the GPU worker's one CPU too, so the CPU actor needs a worker of its own
        # (asked together, Ray would pack both onto the GPU worker).
        watch.event("an actor of one CPU and one GPU asked for")
        ask(ray, "placed", 1, cpus=1, gpus=1, tag="gpu")
        with behaviour("the GPU demand makes a GPU worker pod"):
            until(watch, lambda s: s.pods("gpu") >= 1, "a GPU worker pod", timeouts.scale)
        # Judged as soon as the pod exists: without the toleration it stays Pending where the GPU
        # nodes are tainted apart (EKS, a multi-node local cluster), and the scale-up wait below
        # would say only that it never ran.
        _assert_tolerates_the_gpu_taint(ray, "placed", profile.gpu.resource)
        with behaviour("the GPU demand scales the GPU group from 0"):
            until(watch, lambda s: s.pods("gpu", "Running") == 1 and s.ray_alive_workers == 1,
                  "the GPU worker alive in Ray", timeouts.scale)  # fmt: skip
        actors_placed(ray, "placed", 1)
        watch.event("a one-CPU actor asked for")
        ask(ray, "placed", 1, cpus=1, tag="cpu")
        with behaviour("the CPU demand scales the CPU group from 0"):
            until(watch, lambda s: s.pods("cpu", "Running") == 1 and s.ray_alive_workers == 2,
                  "the CPU worker alive in Ray", timeouts.scale)  # fmt: skip
    watch.assert_evidence()
    nodes = {n.metadata.name: n for n in ray.core.list_node().items}
    gpu_nodes = {name for name, n in nodes.items() if allocatable(n, profile.gpu.resource) > 0}
    metrics["gpu_nodes"] = len(gpu_nodes)
    pods = {p.metadata.labels["ray.io/group"]: p for p in ray.pods("placed", "worker")}
    taint = profile.gpu.resource
    with behaviour("the GPU worker pod tolerates the GPU taint and runs where the GPUs are"):
        assert _tolerates(pods["gpu"], taint), (
            f"the GPU worker pod has no toleration for {taint}:NoSchedule: {_tolerations(pods['gpu'])}"
        )
        assert pods["gpu"].spec.node_name in gpu_nodes, (
            f"the GPU worker runs on {pods['gpu'].spec.node_name}, not on a GPU node {sorted(gpu_nodes)}"
        )
    on_gpu_node = pods["cpu"].spec.node_name in gpu_nodes
    metrics["cpu_pod_on_gpu_node"] = float(on_gpu_node)
    with behaviour("the CPU worker pod carries no GPU toleration and stays off GPU nodes that have one"):
        assert not _tolerates(pods["cpu"], taint), (
            f"the CPU worker pod tolerates {taint}:NoSchedule, which only GPU groups ask for: "
            f"{_tolerations(pods['cpu'])}"
        )
        tainted = {name for name in gpu_nodes if _tainted(nodes[name], taint)}
        assert pods["cpu"].spec.node_name not in tainted, (
            f"the CPU worker runs on the tainted GPU node {pods['cpu'].spec.node_name}"
        )


def _assert_tolerates_the_gpu_taint(ray: Ray, cluster: str, taint: str) -> None:
    (gpu_pod,) = [p for p in ray.pods(cluster, "worker") if p.metadata.labels.get("ray.io/group") == "gpu"]
    with behaviour("the GPU worker pod tolerates the GPU taint"):
        assert _tolerates(gpu_pod, taint), (
            f"the GPU worker pod has no toleration for {taint}:NoSchedule: {_tolerations(gpu_pod)}"
        )


def _tolerations(pod: client.V1Pod) -> list[str]:
    return [f"{t.key}:{t.operator}:{t.effect}" for t in pod.spec.tolerations or []]


def _tolerates(pod: client.V1Pod, key: str) -> bool:
    """Tolerates a `key`:NoSchedule taint (by that key, or by an empty key that tolerates every
    taint), not counting the NoExecute ones every pod gets for not-ready nodes."""
    return any(
        (t.key == key or (not t.key and t.operator == "Exists")) and t.effect in ("NoSchedule", None)
        for t in pod.spec.tolerations or []
    )


def _tainted(node: client.V1Node, key: str) -> bool:
    return any(t.key == key and t.effect == "NoSchedule" for t in node.spec.taints or [])


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
