"""Seeded faults of area fault-recovery."""

from __future__ import annotations

from .faults import Fault
from .rogue import Rogue

RECOVERY = "test_fault_recovery.py::"


def stop_operator_once_a_cluster_is_ready(rogue: Rogue) -> None:
    """An operator that stops reconciling (scaled to 0 behind its back) once a cluster is up."""
    for cluster in rogue.ray_objects("rayclusters"):
        status = cluster.get("status", {})
        if status.get("state") == "ready" and status.get("readyWorkerReplicas", 0) >= 1:
            apps = rogue.apps()
            (deployment,) = apps.list_namespaced_deployment(
                rogue.operator_namespace, label_selector="app.kubernetes.io/name=kuberay-operator"
            ).items
            apps.patch_namespaced_deployment_scale(
                deployment.metadata.name, rogue.operator_namespace, {"spec": {"replicas": 0}}
            )
            rogue.acted(f"scaled the operator to 0 once {cluster['metadata']['name']} was ready")
            return


FAULTS = [
    Fault(
        name="gcs-ft-redis-not-cleaned",
        area="fault-recovery",
        misbehaviour="deleting a GCS fault-tolerant RayCluster leaves its state in Redis",
        env={"ENABLE_GCS_FT_REDIS_CLEANUP": "false"},
        catches=(RECOVERY + "test_gcs_ft_cluster_deletion_cleans_its_redis_state",),
        bystanders=(RECOVERY + "test_deleted_worker_is_replaced_and_rejoins_ray",),
        evidence="Redis keys",
    ),
    Fault(
        name="operator-stops-reconciling",
        area="fault-recovery",
        misbehaviour="the operator stops reconciling once the cluster is up: a lost worker is never replaced",
        rogue=stop_operator_once_a_cluster_is_ready,
        catches=(RECOVERY + "test_deleted_worker_is_replaced_and_rejoins_ray",),
        run_args=("--timeout", "ready=120"),
        evidence="replaced by a Ready one",
    ),
]
