"""Seeded faults of area rayjob."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, drop_rbac, json_patch, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks, side_by_side

BASIC = "test_rayjob.py::"
LIFECYCLE = "test_rayjob_lifecycle.py::"
TTL = LIFECYCLE + "test_shutdown_with_ttl_deletes_the_cluster_after_the_ttl_and_keeps_the_submitter"
HAPPY = LIFECYCLE + "test_job_moves_initializing_running_complete"
INVALID = LIFECYCLE + "test_invalid_spec_ends_in_validation_failed_with_a_message"
INVALID_CASES = (
    "rules_with_shutdown",
    "ttls_out_of_order",
    "delete_workers_with_autoscaling",
    "delete_cluster_with_cluster_selector",
    "ttl_without_shutdown",
)
CONTROL = "test_rayjob_control.py::"
STOP_CHECK = CONTROL + "test_ray_job_stopped_through_rays_job_api_ends_complete_with_stopped"
MANAGED_BY_CHECK = (
    CONTROL + "test_managed_by_multikueue_is_left_alone_and_immutable_and_unknown_managers_refused"
)
STOPPED_JOB = "stopped"  # the RayJob the stop check makes
NO_HEAD_RESTART = (
    "ray.io/disable-provisioned-head-restart"  # utils.DisableProvisionedHeadRestartAnnotationKey
)
NOWHERE = "http://127.0.0.1:9"  # the operator pod's own loopback, where nothing listens
STOP_JOB_FINALIZER = "ray.io/rayjob-finalizer"  # utils.RayJobStopJobFinalizer
OPERATOR_CLUSTER_ROLE = "kuberay-operator"


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


def _job_spec(**fields: Any) -> dict[str, Any]:
    """A RayJob spec the CRD accepts, with `fields` on top (a probe for a stale CRD)."""
    return {"entrypoint": "python -c pass", "rayClusterSpec": raycluster_spec(), **fields}


@before_checks
def stale_crd_without_validated_fields(rogue: Rogue) -> None:
    """A RayJob CRD that predates deletionStrategy, ttlSecondsAfterFinished, submitterPodTemplate and
    suspend (Helm never upgrades CRDs): the API server drops them, so KubeRay runs an invalid RayJob
    as a valid one, runs its own submitter instead of the one asked for, and never hears of suspend."""
    rule = {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}}
    submitter = {"spec": {"containers": [{"name": "ray-job-submitter", "image": "probe"}]}}
    spec = _job_spec(
        deletionStrategy={"deletionRules": [rule]},
        ttlSecondsAfterFinished=5,
        submitterPodTemplate=submitter,
        suspend=True,
    )
    paths = [["deletionStrategy"], ["ttlSecondsAfterFinished"], ["submitterPodTemplate"], ["suspend"]]
    drop_crd_fields(rogue, "rayjobs", paths, probe("RayJob", spec))


@before_checks
def stale_crd_without_suspend_and_runtime_env(rogue: Rogue) -> None:
    """A RayJob CRD without `suspend` and `runtimeEnvYAML` (hand-trimmed): the API server drops
    them, so a RayJob created suspended (as Kueue creates them) starts its cluster at once, and
    KubeRay never sees a suspend it must refuse or a runtime environment that is not YAML."""
    spec = _job_spec(suspend=True, runtimeEnvYAML="env_vars: {}")
    drop_crd_fields(rogue, "rayjobs", [["suspend"], ["runtimeEnvYAML"]], probe("RayJob", spec))


@before_checks
def stale_crds_without_managed_by(rogue: Rogue) -> None:
    """RayJob and RayCluster CRDs without `managedBy` (before 1.3.0's): the API server drops it and
    its validation, so KubeRay reconciles what MultiKueue manages and any manager name is accepted."""
    managed = {"managedBy": "kueue.x-k8s.io/multikueue"}
    drop_crd_fields(rogue, "rayjobs", [["managedBy"]], probe("RayJob", _job_spec(**managed)))
    drop_crd_fields(
        rogue, "rayclusters", [["managedBy"]], probe("RayCluster", {**raycluster_spec(), **managed})
    )


def lose_the_job_server_once_running(rogue: Rogue) -> None:
    """Once the stop check's Ray job runs, the dashboard URL KubeRay recorded for its RayJob points
    where nothing listens: KubeRay no longer learns the Ray job's status, as an operator that stops
    polling a running job would, so a job stopped from outside never ends its RayJob."""
    for job in rogue.ray_objects("rayjobs"):
        meta, status = job["metadata"], job.get("status") or {}
        url = status.get("dashboardURL")
        if meta["name"] != STOPPED_JOB or status.get("jobStatus") != "RUNNING" or url in (None, NOWHERE):
            continue
        path = "/status/dashboardURL"
        ops = [{"op": "test", "path": path, "value": url}, {"op": "replace", "path": path, "value": NOWHERE}]
        if json_patch(rogue, "rayjobs", meta, ops, status=True):
            rogue.acted(f"pointed RayJob {meta['namespace']}/{meta['name']}'s dashboardURL at {NOWHERE}")


def submitter_jobs_without_retries(rogue: Rogue) -> None:
    """Every RayJob's submitter Job gets backoffLimit 0 (KubeRay gives it 2): a submitter pod that
    is lost is never replaced, as with an operator that leaves its submitter no retry."""
    batch = client.BatchV1Api(rogue.api)
    for event in rogue.events(batch.list_job_for_all_namespaces):
        job = event["object"]
        owners = [ref.kind for ref in job.metadata.owner_references or []]
        if event["type"] != "ADDED" or "RayJob" not in owners or job.spec.backoff_limit == 0:
            continue
        if not rogue.in_run(job):
            continue
        batch.patch_namespaced_job(job.metadata.name, job.metadata.namespace, {"spec": {"backoffLimit": 0}})
        rogue.acted(f"set backoffLimit 0 on submitter Job {job.metadata.namespace}/{job.metadata.name}")


def sidecar_heads_restartable(rogue: Rogue) -> None:
    """The annotation by which a SidecarMode RayJob's RayCluster asks KubeRay never to re-create a
    provisioned head is taken off: a lost head comes back, without the job it ran."""
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        if (meta.get("annotations") or {}).get(NO_HEAD_RESTART) is None:
            continue
        path = "/metadata/annotations/" + NO_HEAD_RESTART.replace("~", "~0").replace("/", "~1")
        if json_patch(rogue, "rayclusters", meta, [{"op": "remove", "path": path}]):
            rogue.acted(f"removed {NO_HEAD_RESTART} from RayCluster {meta['namespace']}/{meta['name']}")


def interactive_jobs_run_at_once(rogue: Rogue) -> None:
    """An InteractiveMode RayJob that reaches Waiting is moved to Running under a job id of the
    operator's own, as an operator that does not wait for the user's id would."""
    for job in rogue.ray_objects("rayjobs"):
        meta, status = job["metadata"], job.get("status") or {}
        if (
            job["spec"].get("submissionMode") != "InteractiveMode"
            or status.get("jobDeploymentStatus") != "Waiting"
        ):
            continue
        ops = [
            {"op": "test", "path": "/status/jobDeploymentStatus", "value": "Waiting"},
            {"op": "replace", "path": "/status/jobDeploymentStatus", "value": "Running"},
            {"op": "add", "path": "/status/jobId", "value": f"{meta['name']}-own-id"},
        ]
        if json_patch(rogue, "rayjobs", meta, ops, status=True):
            rogue.acted(f"moved InteractiveMode RayJob {meta['namespace']}/{meta['name']} to Running")


@before_checks
def stale_crd_without_deadlines_and_retries(rogue: Rogue) -> None:
    """A RayJob CRD that predates activeDeadlineSeconds, preRunningDeadlineSeconds and backoffLimit:
    the API server drops them, so no deadline ever ends a RayJob and a failed one is never retried."""
    spec = _job_spec(activeDeadlineSeconds=40, preRunningDeadlineSeconds=20, backoffLimit=2)
    paths = [["activeDeadlineSeconds"], ["preRunningDeadlineSeconds"], ["backoffLimit"]]
    drop_crd_fields(rogue, "rayjobs", paths, probe("RayJob", spec))


@before_checks
def clusterrole_without_services_proxy(rogue: Rogue) -> None:
    """The operator's ClusterRole edited to lose services/proxy while it reaches Ray heads through the
    API server's proxy (--use-kubernetes-proxy): every job-status request is refused, although the
    submitter, which calls the head directly, runs the job."""
    drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "services/proxy")


def _ignoring_gone(call: Callable[..., Any], *args: Any) -> bool:
    """`call(*args)`; False when its object is gone (404) or changed meanwhile (409: the next event
    brings it again)."""
    try:
        call(*args)
    except ApiException as exc:
        if exc.status not in (404, 409):
            raise
        return False
    return True


def _strip_stop_job_finalizer(rogue: Rogue, job: dict[str, Any]) -> None:
    """Once KubeRay has put its stop-job finalizer on a RayJob and moved on, take it off again."""
    meta = job["metadata"]
    finalizers = meta.get("finalizers") or []
    started = job.get("status", {}).get("jobDeploymentStatus") not in (None, "", "New")
    if STOP_JOB_FINALIZER not in finalizers or not started or meta.get("deletionTimestamp"):
        return
    kept = [f for f in finalizers if f != STOP_JOB_FINALIZER]
    body = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
    patch = rogue.custom.patch_namespaced_custom_object
    if _ignoring_gone(patch, "ray.io", "v1", meta["namespace"], "rayjobs", meta["name"], body):
        rogue.acted(f"removed {STOP_JOB_FINALIZER} from RayJob {meta['namespace']}/{meta['name']}")


def _delete_borrowed_cluster(rogue: Rogue, job: dict[str, Any], done: set[tuple[str, str]]) -> None:
    """A clusterSelector RayJob on its way out takes the cluster it only borrowed with it."""
    name = (job.get("spec", {}).get("clusterSelector") or {}).get("ray.io/cluster")
    key = (job["metadata"]["namespace"], name or "")
    if not name or key in done:
        return
    done.add(key)
    delete = rogue.custom.delete_namespaced_custom_object
    if _ignoring_gone(delete, "ray.io", "v1", key[0], "rayclusters", name):
        rogue.acted(f"deleted RayCluster {key[0]}/{name}, only selected by RayJob {job['metadata']['name']}")


def _orphan_job_clusters(rogue: Rogue) -> None:
    """Take the owner reference off every RayCluster a RayJob made, as soon as it appears."""
    patch = rogue.custom.patch_namespaced_custom_object
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        if not any(ref.get("kind") == "RayJob" for ref in meta.get("ownerReferences") or []):
            continue
        body = {"metadata": {"ownerReferences": None}}
        if _ignoring_gone(patch, "ray.io", "v1", meta["namespace"], "rayclusters", meta["name"], body):
            rogue.acted(
                f"removed the RayJob owner reference of RayCluster {meta['namespace']}/{meta['name']}"
            )


def mishandle_rayjob_deletion(rogue: Rogue) -> None:
    """A RayJob's deletion done wrong three ways: KubeRay drops its stop-job finalizer once the job
    starts (a deleted RayJob's Ray job is never stopped), makes its RayCluster without an owner
    reference (the cluster outlives the RayJob), and deletes the cluster a clusterSelector RayJob
    only selected when that RayJob goes."""
    side_by_side(rogue, _orphan_job_clusters, _mishandle_rayjobs)


def _mishandle_rayjobs(rogue: Rogue) -> None:
    def list_rayjobs(**kwargs: Any) -> Any:
        return rogue.custom.list_cluster_custom_object("ray.io", "v1", "rayjobs", **kwargs)

    borrowed: set[tuple[str, str]] = set()
    for event in rogue.events(list_rayjobs):
        job = event["object"]
        if not rogue.in_run(job):
            continue
        if event["type"] == "DELETED" or job["metadata"].get("deletionTimestamp"):
            _delete_borrowed_cluster(rogue, job, borrowed)
        elif event["type"] in ("ADDED", "MODIFIED"):
            _strip_stop_job_finalizer(rogue, job)


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
            LIFECYCLE + "test_deletion_rules_on_a_failed_deployment_act_after_an_active_deadline",
        ),
        bystanders=(BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",),
        evidence=("did not stay", "before its 10s", "before its 10s", "before its 10s"),
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
    Fault(
        name="heads-addressed-under-a-wrong-cluster-domain",
        area="rayjob",
        misbehaviour="KubeRay addresses every Ray head's dashboard under a cluster domain that does not "
        "resolve: the submitter cannot submit, the operator never learns how a job went",
        env={"CLUSTER_DOMAIN": "cluster.invalid"},
        catches=(
            BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",
            BASIC + "test_job_logs_are_readable_from_the_submitter",
            HAPPY + "[HTTPMode]",
            HAPPY + "[SidecarMode]",
        ),
        bystanders=(INVALID + "[ttl_without_shutdown]",),
        # A K8sJobMode submitter fails three times (10 s and 20 s apart) before the RayJob is Failed.
        run_args=("--timeout", "ready=120"),
        evidence=("SubmissionFailed", "the submitter's log", "last seen: Running", "GracePeriodExceeded"),
    ),
    Fault(
        name="operator-cannot-read-ray-job-status",
        area="rayjob",
        misbehaviour="the operator's job-status requests are refused (API server proxy without RBAC): a "
        "job that ran is reported Failed for a grace period, not Complete or AppFailed",
        extra_args=("--use-kubernetes-proxy",),
        rogue=clusterrole_without_services_proxy,
        catches=(
            BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",
            LIFECYCLE + "test_failing_entrypoint_ends_failed_with_app_failed",
        ),
        bystanders=(BASIC + "test_job_logs_are_readable_from_the_submitter",),  # the job itself ran
        evidence="GracePeriodExceeded",
    ),
    Fault(
        name="rayjob-crd-predates-validated-fields",
        area="rayjob",
        misbehaviour="an invalid RayJob runs as a valid one, a failing submitterPodTemplate is replaced by "
        "the default submitter, and suspend does nothing (a stale CRD drops those fields)",
        rogue=stale_crd_without_validated_fields,
        catches=(
            *(f"{INVALID}[{case}]" for case in INVALID_CASES),
            LIFECYCLE + "test_failing_submitter_ends_failed_with_submission_failed",
            LIFECYCLE + "test_suspend_deletes_cluster_and_submitter_and_resume_completes",
        ),
        bystanders=(LIFECYCLE + "test_failing_entrypoint_ends_failed_with_app_failed",),
        # apply=10: an invalid RayJob's wait for ValidationFailed ends before the job could complete
        # (about 25 s), so each reads "timed out", never a race with Complete.
        run_args=("--timeout", "apply=10", "--timeout", "cleanup=60"),
        evidence=(
            *("RayJob invalid to finish" for _ in INVALID_CASES),
            "jobDeploymentStatus=Complete",
            "to be suspended",
        ),
    ),
    Fault(
        name="rayjob-crd-predates-deadlines-and-retries",
        area="rayjob",
        misbehaviour="no deadline ever ends a RayJob and a failed one is never retried (a stale CRD drops "
        "activeDeadlineSeconds, preRunningDeadlineSeconds and backoffLimit)",
        rogue=stale_crd_without_deadlines_and_retries,
        catches=(
            LIFECYCLE + "test_active_deadline_ends_in_deadline_exceeded_and_is_not_retried",
            LIFECYCLE + "test_pre_running_deadline_fails_a_job_whose_cluster_cannot_start",
            LIFECYCLE + "test_backoff_limit_retries_with_a_new_cluster_each_time",
        ),
        bystanders=(INVALID + "[ttl_without_shutdown]",),
        # ready=60: the deadline checks wait that long for an end that never comes.
        run_args=("--timeout", "ready=60", "--timeout", "apply=10"),
        evidence=("last seen: Running", "last seen: Initializing", "after 1 attempt(s), not 3"),
    ),
    Fault(
        name="rayjob-deletion-mishandled",
        area="rayjob",
        misbehaviour="a RayJob loses its stop-job finalizer once started, its RayCluster has no owner "
        "reference (it outlives the RayJob), and a clusterSelector RayJob takes its selected cluster with it",
        rogue=mishandle_rayjob_deletion,
        catches=(
            LIFECYCLE + "test_deleting_a_running_job_stops_its_ray_job_first",
            LIFECYCLE + "test_deleting_a_running_job_removes_its_cluster_and_submitter",
            LIFECYCLE + "test_cluster_selector_runs_on_an_existing_cluster_and_never_deletes_it",
        ),
        bystanders=(BASIC + "test_k8s_job_mode_reaches_succeeded_and_complete",),
        run_args=("--timeout", "cleanup=60"),
        evidence=("rayjob-finalizer", "to be gone", "did not stay"),
    ),
    Fault(
        name="rayjob-created-suspended-runs-at-once",
        area="rayjob",
        misbehaviour="a RayJob created with `suspend: true` creates its RayCluster and runs at once, and "
        "KubeRay accepts a suspend without shutdown and a runtime environment that is not YAML (a CRD "
        "without suspend and runtimeEnvYAML drops them)",
        rogue=stale_crd_without_suspend_and_runtime_env,
        catches=(
            CONTROL + "test_created_suspended_makes_nothing_until_resumed_then_completes",
            INVALID + "[suspend_without_shutdown]",
            INVALID + "[runtime_env_not_yaml]",
        ),
        bystanders=(HAPPY + "[K8sJobMode]",),
        # apply=10: each wait for Suspended or ValidationFailed ends before the job could complete.
        run_args=("--timeout", "apply=10"),
        evidence=("to be Suspended", "RayJob invalid to finish", "RayJob invalid to finish"),
    ),
    Fault(
        name="managed-by-dropped-by-stale-crds",
        area="rayjob",
        misbehaviour="KubeRay reconciles RayJobs and RayClusters that MultiKueue manages, and any "
        "managedBy value is accepted (CRDs without managedBy drop it)",
        rogue=stale_crds_without_managed_by,
        catches=(f"{MANAGED_BY_CHECK}[rayjobs]", f"{MANAGED_BY_CHECK}[rayclusters]"),
        bystanders=(HAPPY + "[K8sJobMode]",),
        evidence="MultiKueue manages",
    ),
    Fault(
        name="stopped-ray-job-never-seen",
        area="rayjob",
        misbehaviour="KubeRay stops following a running Ray job (its job server unreachable for it): "
        "a job stopped through Ray's job API leaves its RayJob Running",
        rogue=lose_the_job_server_once_running,
        catches=tuple(f"{STOP_CHECK}[{mode}]" for mode in ("K8sJobMode", "HTTPMode", "SidecarMode")),
        bystanders=(HAPPY + "[HTTPMode]",),
        run_args=("--timeout", "cleanup=60"),
        evidence="RayJob stopped to finish",
    ),
    Fault(
        name="lost-submitter-never-replaced",
        area="rayjob",
        misbehaviour="a K8sJobMode RayJob's submitter Job allows no retry: a submitter pod lost mid-run "
        "is never replaced, so nothing follows the job to its end",
        rogue=submitter_jobs_without_retries,
        catches=(
            CONTROL + "test_a_lost_submitter_is_replaced_and_follows_the_job_without_submitting_it_again",
        ),
        bystanders=(HAPPY + "[HTTPMode]",),  # no submitter Job
        evidence="new submitter pod",
    ),
    Fault(
        name="sidecar-job-head-re-created",
        area="rayjob",
        misbehaviour="a SidecarMode RayJob's lost head is re-created (its cluster loses "
        "ray.io/disable-provisioned-head-restart), so the RayJob is not failed and its job is gone",
        rogue=sidecar_heads_restartable,
        catches=(CONTROL + "test_sidecar_mode_job_whose_head_is_lost_fails_without_a_new_head",),
        bystanders=(HAPPY + "[SidecarMode]",),
        evidence="a new head",
    ),
    Fault(
        name="interactive-job-runs-without-an-id",
        area="rayjob",
        misbehaviour="an InteractiveMode RayJob leaves Waiting at once under a job id nobody submitted",
        rogue=interactive_jobs_run_at_once,
        catches=(CONTROL + "test_interactive_mode_waits_with_a_ready_cluster_until_given_a_job_id",),
        bystanders=(HAPPY + "[HTTPMode]",),
        evidence="left Waiting",
    ),
]
