"""Seeded faults of area rayjob."""

from __future__ import annotations

from .faults import Fault
from .rogue import Rogue

BASIC = "test_rayjob.py::"
LIFECYCLE = "test_rayjob_lifecycle.py::"


def delete_finished_jobs_clusters(rogue: Rogue) -> None:
    """An operator that deletes a finished RayJob's RayCluster whatever shutdownAfterJobFinishes says."""
    deleted: set[tuple[str, str]] = set()
    for job in rogue.ray_objects("rayjobs"):
        status = job.get("status", {})
        cluster = status.get("rayClusterName")
        key = (job["metadata"]["namespace"], cluster or "")
        if status.get("jobDeploymentStatus") != "Complete" or not cluster or key in deleted:
            continue
        deleted.add(key)
        rogue.custom.delete_namespaced_custom_object("ray.io", "v1", key[0], "rayclusters", cluster)
        rogue.acted(f"deleted RayCluster {key[0]}/{cluster} of finished RayJob {job['metadata']['name']}")


FAULTS = [
    Fault(
        name="finished-job-cluster-deleted-by-default",
        area="rayjob",
        misbehaviour="a finished RayJob's cluster is deleted although shutdownAfterJobFinishes is false",
        rogue=delete_finished_jobs_clusters,
        catches=(BASIC + "test_cluster_survives_the_job_by_default",),
        bystanders=(
            BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",
            BASIC + "test_job_logs_are_readable_from_the_submitter",
        ),
        evidence="did not stay",
    ),
]
