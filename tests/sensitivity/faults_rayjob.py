"""Seeded faults of area rayjob."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from .faults import Fault
from .rogue import Rogue

BASIC = "test_rayjob.py::"
LIFECYCLE = "test_rayjob_lifecycle.py::"
TTL = LIFECYCLE + "test_shutdown_with_ttl_deletes_the_cluster_after_the_ttl_and_keeps_the_submitter"


def delete_finished_jobs_clusters(rogue: Rogue) -> None:
    """An operator that deletes a finished RayJob's RayCluster at once, whatever its settings say."""
    deleted: set[tuple[str, str]] = set()
    for job in rogue.ray_objects("rayjobs"):
        status = job.get("status", {})
        cluster = status.get("rayClusterName")
        key = (job["metadata"]["namespace"], cluster or "")
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed") or not cluster or key in deleted:
            continue
        deleted.add(key)
        try:
            rogue.custom.delete_namespaced_custom_object("ray.io", "v1", key[0], "rayclusters", cluster)
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue  # KubeRay deleted it first (a DeleteCluster rule at once): nothing to seed
        rogue.acted(f"deleted RayCluster {key[0]}/{cluster} of finished RayJob {job['metadata']['name']}")


FAULTS = [
    Fault(
        name="finished-job-cluster-deleted-at-once",
        area="rayjob",
        misbehaviour="a finished RayJob's cluster is deleted at once, whatever shutdownAfterJobFinishes "
        "or its TTL say",
        rogue=delete_finished_jobs_clusters,
        catches=(
            BASIC + "test_cluster_survives_the_job_by_default",
            TTL,
            LIFECYCLE + "test_deletion_rules_act_in_ttl_order",
        ),
        bystanders=(BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",),
        evidence=("did not stay", "before its 10s", "before its 10s"),
    ),
    Fault(
        name="finished-job-cluster-deleted-whatever-the-policy",
        area="rayjob",
        misbehaviour="a finished RayJob's cluster is deleted at once, whatever its deletion rules "
        "(DeleteNone, a rule for the other outcome) or legacy policy say",
        rogue=delete_finished_jobs_clusters,
        catches=(
            LIFECYCLE + "test_delete_none_deletes_nothing",
            LIFECYCLE + "test_rules_act_only_on_their_outcome",
            LIFECYCLE + "test_legacy_on_success_policy_still_works",
        ),
        bystanders=(LIFECYCLE + "test_failing_entrypoint_ends_failed_with_app_failed",),
        evidence=("DeleteNone", "SUCCEEDED rule acted", "the whole RayCluster"),
    ),
    Fault(
        name="rayjob-deleted-with-its-cluster",
        area="rayjob",
        misbehaviour="shutdownAfterJobFinishes deletes the RayJob itself (and so its submitter Job)",
        env={"DELETE_RAYJOB_CR_AFTER_JOB_FINISHES": "true"},
        catches=(TTL,),
        bystanders=(LIFECYCLE + "test_failing_entrypoint_ends_failed_with_app_failed",),
        evidence="RayJob itself",
    ),
    Fault(
        name="deletion-policy-gate-off",
        area="rayjob",
        misbehaviour="the RayJobDeletionPolicy gate is off: deletion rules are refused "
        "(a missing precondition)",
        feature_gates={"RayJobDeletionPolicy": False},
        catches=(
            LIFECYCLE + "test_deletion_rules_act_in_ttl_order",
            LIFECYCLE + "test_delete_none_deletes_nothing",
        ),
        bystanders=(LIFECYCLE + "test_failing_entrypoint_ends_failed_with_app_failed",),
        expect="not_applicable",
        evidence="RayJobDeletionPolicy is off",
    ),
]
