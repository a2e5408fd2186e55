"""Seeded faults of area gpu."""

from __future__ import annotations

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

GPU = "test_gpu.py::"


@before_checks
def stale_crd_without_group_resources(rogue: Rogue) -> None:
    """A RayCluster CRD that predates a worker group's `resources`: the API server drops the
    GPUs a group declares there, so Ray never hears of them and a double declaration passes."""
    spec = raycluster_spec(resources={"GPU": "1"})
    drop_crd_fields(rogue, "rayclusters", [["workerGroupSpecs", "*", "resources"]], probe("RayCluster", spec))


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
]
