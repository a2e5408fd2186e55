"""Seeded faults of area fault-recovery."""

from __future__ import annotations

from .faults import Fault

RECOVERY = "test_fault_recovery.py::"

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
]
