"""Seeded faults of area raycluster."""

from __future__ import annotations

from .faults import Fault
from .rogue import Rogue

RAYCLUSTER = "test_raycluster.py::"


def recreate_pods_on_spec_change(rogue: Rogue) -> None:
    """An operator that replaces pods whenever a RayCluster's spec changes (KubeRay does not)."""
    first_generation: dict[tuple[str, str], int] = {}
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        key = (meta["namespace"], meta["name"])
        generation = first_generation.setdefault(key, meta.get("generation", 1))
        if meta.get("generation", 1) <= generation:
            continue
        first_generation[key] = meta["generation"]
        pods = rogue.core.list_namespaced_pod(
            key[0], label_selector=f"ray.io/cluster={key[1]},ray.io/node-type=worker"
        ).items
        for pod in pods[:1]:
            rogue.core.delete_namespaced_pod(pod.metadata.name, key[0])
            rogue.acted(f"deleted {pod.metadata.name} after spec generation {meta['generation']}")


FAULTS = [
    Fault(
        name="head-service-gets-a-cluster-ip",
        area="raycluster",
        misbehaviour="the head Service is an ordinary ClusterIP Service, not headless",
        env={"ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": "true"},
        catches=(RAYCLUSTER + "test_head_service_is_headless_with_documented_ports",),
        bystanders=(
            RAYCLUSTER + "test_head_only_cluster_becomes_ready",
            RAYCLUSTER + "test_a_task_submitted_through_the_head_runs_on_a_worker",
        ),
        evidence="clusterIP",
    ),
    Fault(
        name="pods-replaced-on-spec-change",
        area="raycluster",
        misbehaviour="a spec change (the image) replaces a running worker pod instead of leaving it",
        rogue=recreate_pods_on_spec_change,
        catches=(RAYCLUSTER + "test_image_change_does_not_restart_existing_pods",),
        bystanders=(RAYCLUSTER + "test_head_and_workers_report_documented_conditions",),
        evidence="after an image change",
    ),
]
