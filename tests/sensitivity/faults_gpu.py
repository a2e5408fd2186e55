"""Seeded faults of area gpu."""

from __future__ import annotations

from typing import Any

from .behind_the_back import drop_crd_fields, each_worker_group, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

GPU = "test_gpu.py::"
GPU_RESOURCE = "nvidia.com/gpu"  # the default profile's
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
# A scale-up that never comes waits out the `scale` timeout; healthy ones here take 20-60 s.
SHORT_SCALE = ("--timeout", "scale=120")


@before_checks
def stale_crd_without_group_resources(rogue: Rogue) -> None:
    """A RayCluster CRD that predates a worker group's `resources`: the API server drops the
    GPUs a group declares there, so Ray never hears of them and a double declaration passes."""
    spec = raycluster_spec(resources={"GPU": "1"})
    drop_crd_fields(rogue, "rayclusters", [["workerGroupSpecs", "*", "resources"]], probe("RayCluster", spec))


def _asks_gpus(group: dict[str, Any]) -> bool:
    containers = group.get("template", {}).get("spec", {}).get("containers") or [{}]
    return GPU_RESOURCE in (containers[0].get("resources") or {}).get("limits", {})


def gpu_workers_offer_no_cpu(rogue: Rogue) -> None:
    """Every worker group whose container asks for a GPU gets rayStartParams num-cpus 0 as its
    RayCluster appears: GPU workers then offer Ray no CPU, as an operator that reserved GPU nodes
    for GPU work by starting their raylets without CPUs would leave them."""

    def no_cpu(index: int, group: dict[str, Any]) -> list[dict[str, Any]]:
        if not _asks_gpus(group) or (group.get("rayStartParams") or {}).get("num-cpus") == "0":
            return []
        where = f"/spec/workerGroupSpecs/{index}/rayStartParams"
        params = {**(group.get("rayStartParams") or {}), "num-cpus": "0"}
        return [{"op": "add", "path": where, "value": params}]

    each_worker_group(rogue, no_cpu, "set num-cpus 0 on the GPU worker groups")


def gpu_toleration_on_the_wrong_groups(rogue: Rogue) -> None:
    """As each RayCluster appears, its GPU groups lose their pod template's tolerations and its
    CPU groups get the GPU one: an operator that builds each group's pods with another group's
    scheduling fields."""

    def swap(index: int, group: dict[str, Any]) -> list[dict[str, Any]]:
        spec = group.get("template", {}).get("spec", {})
        where = f"/spec/workerGroupSpecs/{index}/template/spec/tolerations"
        if _asks_gpus(group):
            return [{"op": "remove", "path": where}] if spec.get("tolerations") else []
        return [] if spec.get("tolerations") else [{"op": "add", "path": where, "value": [GPU_TOLERATION]}]

    each_worker_group(rogue, swap, "moved the GPU toleration from the GPU groups to the CPU groups")


FAULTS = [
    Fault(
        name="gpu-worker-without-a-device",
        area="gpu",
        misbehaviour=(
            "a GPU worker's container gets no device for the GPU its limit asked for (the node advertises "
            "nvidia.com/gpu, nothing hands a device to the container)"
        ),
        attached=True,
        catches=(GPU + "test_cuda_operation_runs_in_a_ray_task",),
        bystanders=(GPU + "test_gpu_count_precedence_in_rays_view",),
        evidence="the CUDA task failed in the GPU worker",
    ),
    Fault(
        name="group-resources-dropped-by-a-stale-crd",
        area="gpu",
        misbehaviour="a group's `resources` (GPUs, a custom resource) never reach Ray or the autoscaler, "
        "and declaring GPUs twice is accepted",
        rogue=stale_crd_without_group_resources,
        catches=(
            GPU + "test_gpu_count_precedence_in_rays_view",
            GPU + "test_group_resources_and_ray_start_gpus_together_are_rejected",
            "test_autoscaling.py::test_a_group_with_a_custom_resource_scales_only_for_demand_asking_it",
        ),
        evidence=("resources", "resources", "custom resource"),
    ),
    Fault(
        name="gpu-workers-offer-no-cpu",
        area="gpu",
        misbehaviour="GPU workers start their raylets with no CPU: with only a GPU group, CPU-only work "
        "finds no node and stays pending",
        rogue=gpu_workers_offer_no_cpu,
        catches=(GPU + "test_with_only_a_gpu_group_cpu_only_work_scales_it_and_runs_on_a_gpu_worker",),
        bystanders=(GPU + "test_gpu_count_precedence_in_rays_view",),  # GPU counts stay as declared
        run_args=SHORT_SCALE,
        evidence="the GPU worker alive in Ray",
    ),
    Fault(
        name="gpu-toleration-on-the-wrong-groups",
        area="gpu",
        misbehaviour="worker pods get another group's tolerations: GPU workers cannot go to tainted GPU "
        "nodes, CPU workers can",
        rogue=gpu_toleration_on_the_wrong_groups,
        catches=(GPU + "test_gpu_workers_tolerate_the_gpu_taint_and_cpu_workers_do_not",),
        # Every GPU worker of the run is seeded: where the GPU nodes are tainted apart (a multi-node
        # local cluster), any check whose GPU worker must run is rightly red too. The bystander
        # starts no pod.
        bystanders=(GPU + "test_group_resources_and_ray_start_gpus_together_are_rejected",),
        evidence="has no toleration for",
    ),
]
