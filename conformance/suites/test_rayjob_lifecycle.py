"""Area rayjob: the RayJob lifecycle, submission modes, failures, validation and cleanup.

Every check runs its own RayJob in its own namespace. Entrypoints are small Python
programs, so the time measured is KubeRay's (cluster up, submission, cleanup), not Ray's.
Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
Every wait on a RayJob's status is KubeRay's behaviour: running out of time is a failure.
Bounds are the configured value plus the profile's slack (`thresholds.ttl_slack_s`,
`thresholds.deadline_slack_s`); lower bounds allow CLOCK_TOLERANCE_S for status times, which
the API keeps to the second.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from conformance.kube.deletions import DeletionTimes, parse_time
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, wait_gone
from conformance.profiles import Profile
from conformance.suites import rayjobs
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("rayjob")

CLOCK_TOLERANCE_S = 1.0  # status times have second resolution
DELETION_POLICY = pytest.mark.requires("gate:RayJobDeletionPolicy")
# Shared with the rayjob control checks (conformance/suites/rayjobs.py); short names keep the
# checks below readable.
_status, _start, _completed = rayjobs.status, rayjobs.start, rayjobs.completed
_job_timeout = rayjobs.job_timeout
FINISHED = rayjobs.FINISHED


def _seconds_after_end(final: dict[str, Any], at: float) -> float:
    return round(at - parse_time(_status(final)["endTime"]), 2)


def _run_time(status: dict[str, Any]) -> float:
    return parse_time(status["endTime"]) - parse_time(status["startTime"])


def _within(what: str, took: float, configured: float, slack: float) -> None:
    """KubeRay promises `what` no sooner than `configured` seconds; the profile allows `slack` more."""
    assert took >= configured - CLOCK_TOLERANCE_S, f"{what} after {took:.1f}s, before its {configured}s"
    assert took <= configured + slack, f"{what} after {took:.1f}s: {configured}s + slack {slack}s at most"


# -- the happy path, per submission mode ------------------------------------------------


@pytest.mark.kuberay_issue(1990, 1991, 4178)
@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode", "SidecarMode"])
def test_job_moves_initializing_running_complete(
    mode: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayJob of this submission mode stuck before Complete (#1990, #4178), skipping
    Initializing/Running, or losing the entrypoint's output."""
    started = time.monotonic()
    job = _start(ray, rayjobs.job(cluster_values, "happy", submissionMode=mode))
    with behaviour(f"a {mode} RayJob completes"):
        final = job.finished(_job_timeout(timeouts))
    metrics["job_complete_s"] = round(time.monotonic() - started, 2)
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "Complete", (
        f"{rayjobs.brief(status)} (passed through {job.seen})"
    )
    assert status.get("jobStatus") == "SUCCEEDED", rayjobs.brief(status)
    assert status.get("startTime") and status.get("endTime"), rayjobs.brief(status)
    assert job.seen[0] == "Initializing" and "Running" in job.seen, f"deployment statuses: {job.seen}"
    assert "rayjob-output-ok" in _job_logs(ray, final, mode)


def _job_logs(ray: Ray, job: dict[str, Any], mode: str) -> str:
    """The job's output where each mode keeps it: submitter pod, sidecar, or Ray's job log."""
    name = job["metadata"]["name"]
    if mode == "K8sJobMode":
        pods = ray.core.list_namespaced_pod(ray.namespace, label_selector=f"job-name={name}").items
        return "".join(ray.core.read_namespaced_pod_log(p.metadata.name, ray.namespace) for p in pods)
    head = ray.head_pod(_status(job)["rayClusterName"])
    if mode == "SidecarMode":
        sidecar = next(c.name for c in head.spec.containers if "submitter" in c.name)
        return ray.core.read_namespaced_pod_log(head.metadata.name, ray.namespace, container=sidecar)
    return ray.exec(head, ["ray", "job", "logs", _status(job)["jobId"]])


# -- failures ---------------------------------------------------------------------------


def test_failing_entrypoint_ends_failed_with_app_failed(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: an entrypoint that exits non-zero not reported as Failed / FAILED / AppFailed."""
    job = _start(ray, rayjobs.job(cluster_values, "app-fails", rayjobs.FAILS))
    final = job.finished(_job_timeout(timeouts))
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "Failed", rayjobs.brief(status)
    # .get: a RayJob failed before the operator learnt its job's status has no jobStatus at all,
    # which is KubeRay's failure to report, not the harness's (a KeyError would read as an error).
    assert status.get("jobStatus") == "FAILED", rayjobs.brief(status)
    assert status.get("reason") == "AppFailed", rayjobs.brief(status)


def test_failing_submitter_ends_failed_with_submission_failed(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a submitter pod that fails not reported as Failed / SubmissionFailed."""
    submitter = {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": cluster_values["image"],
        "imagePullPolicy": cluster_values["pull_policy"],
        "command": ["bash", "-c", "echo submitter refuses; exit 1"]}]}}  # fmt: skip
    job = _start(ray, rayjobs.job(cluster_values, "submit-fails", submitterPodTemplate=submitter))
    final = job.finished(_job_timeout(timeouts) + timeouts.cleanup)
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "Failed", rayjobs.brief(status)
    assert status.get("reason") == "SubmissionFailed", rayjobs.brief(status)


# -- cleanup ----------------------------------------------------------------------------


def _deletions(ray: Ray, cluster: str, job_name: str = "") -> DeletionTimes:
    """Deletion times of the job's workers, head and RayCluster (and the RayJob), watched side by side."""
    times = DeletionTimes()
    pods = ray.core.list_namespaced_pod
    for node_type in ("worker", "head"):  # a head-only cluster's "worker" watch fails, if asked
        selector = f"ray.io/cluster={cluster},ray.io/node-type={node_type}"
        times.watch(node_type, pods, namespace=ray.namespace, label_selector=selector)
    times.watch("cluster", ray.list_fn("rayclusters"), field_selector=f"metadata.name={cluster}")
    if job_name:
        times.watch("rayjob", ray.list_fn("rayjobs"), field_selector=f"metadata.name={job_name}")
    return times.start()


@pytest.mark.kuberay_issue(1023, 1944, 3714)
@pytest.mark.smoke
def test_shutdown_with_ttl_deletes_the_cluster_after_the_ttl_and_keeps_the_submitter(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: shutdownAfterJobFinishes deleting the cluster before ttlSecondsAfterFinished, more
    than ttl_slack_s after it or never, or deleting the RayJob or its submitter Job too."""
    ttl, slack = 10, profile.thresholds["ttl_slack_s"]
    job = _start(
        ray, rayjobs.job(cluster_values, "ttl", shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=ttl)
    )
    cluster = _status(job.running(timeouts))["rayClusterName"]
    with _deletions(ray, cluster) as deletions:
        final = _completed(job, timeouts)
        with behaviour("the RayCluster is deleted after ttlSecondsAfterFinished"):
            deleted = _seconds_after_end(final, deletions.at("cluster", ttl + slack + timeouts.apply))
    metrics["cleanup_after_end_s"] = deleted
    _within("the RayCluster was deleted", deleted, ttl, slack)
    (rayjob,) = ray.list_fn("rayjobs")(field_selector="metadata.name=ttl")["items"] or [None]
    assert rayjob and not rayjob["metadata"].get("deletionTimestamp"), "the RayJob itself was deleted"
    submitter = client.BatchV1Api(ray.api).list_namespaced_job(
        ray.namespace, field_selector="metadata.name=ttl"
    )
    assert [j.metadata.deletion_timestamp for j in submitter.items] == [None], "the submitter Job went too"
    pods = ray.core.list_namespaced_pod(ray.namespace, label_selector="job-name=ttl").items
    assert pods, "the submitter Job's pod was removed with the cluster"
    assert "rayjob-output-ok" in ray.core.read_namespaced_pod_log(pods[0].metadata.name, ray.namespace)


def _rule(policy: str, ttl: int, job_status: str = "SUCCEEDED") -> dict[str, Any]:
    return {"policy": policy, "condition": {"jobStatus": job_status, "ttlSeconds": ttl}}


@DELETION_POLICY
def test_deletion_rules_act_in_ttl_order(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a deletion rule acting before its TTL or more than ttl_slack_s after it, rules
    acting out of order (each deletion's own time, watched side by side), DeleteWorkers taking the head."""
    ttls, slack = {"worker": 0, "cluster": 10, "rayjob": 20}, profile.thresholds["ttl_slack_s"]
    rules = [_rule("DeleteWorkers", ttls["worker"]), _rule("DeleteCluster", ttls["cluster"]),
             _rule("DeleteSelf", ttls["rayjob"])]  # fmt: skip
    body = rayjobs.job(cluster_values, "rules", deletionStrategy={"deletionRules": rules})
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = rayjobs.fixed_workers(cluster_values)
    job = _start(ray, body)
    cluster = _status(job.running(timeouts))["rayClusterName"]
    with _deletions(ray, cluster, "rules") as deletions:
        final = _completed(job, timeouts)
        after = _acted_in_ttl_order(final, deletions, ttls, slack, timeouts, metrics)
        with behaviour("the head goes with its cluster"):
            head = _seconds_after_end(final, deletions.at("head", slack + timeouts.apply))
    assert head >= after["cluster"] - CLOCK_TOLERANCE_S, (
        f"the head went at {head}s, before the cluster: {after}"
    )


def _deployment_rule(policy: str, ttl: int) -> dict[str, Any]:
    return {"policy": policy, "condition": {"jobDeploymentStatus": "Failed", "ttlSeconds": ttl}}


@DELETION_POLICY
def test_deletion_rules_on_a_failed_deployment_act_after_an_active_deadline(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: rules on `jobDeploymentStatus: Failed` ignored, acting before their TTL, more than
    ttl_slack_s after it or out of order, once activeDeadlineSeconds failed a RayJob whose Ray job
    still runs (KubeRay's TestDeletionStrategy); and such a failure read as the Ray job's FAILED
    status (the rule on jobStatus FAILED, DeleteSelf at 0 s, would delete the RayJob at once)."""
    deadline, ttls = 60, {"worker": 0, "cluster": 10, "rayjob": 20}
    policies = {"worker": "DeleteWorkers", "cluster": "DeleteCluster", "rayjob": "DeleteSelf"}
    rules = [_deployment_rule(policies[what], ttl) for what, ttl in ttls.items()]
    rules.append(_rule("DeleteSelf", 0, "FAILED"))
    body = rayjobs.job(cluster_values, "deadline-rules", rayjobs.runs_for(600),
                       activeDeadlineSeconds=deadline, deletionStrategy={"deletionRules": rules})  # fmt: skip
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = rayjobs.fixed_workers(cluster_values)
    job = _start(ray, body)
    cluster = _status(job.running(timeouts))["rayClusterName"]
    with _deletions(ray, cluster, "deadline-rules") as deletions:
        final = job.finished(deadline + profile.thresholds["deadline_slack_s"] + timeouts.apply)
        status = _status(final)
        assert (status.get("jobDeploymentStatus"), status.get("reason")) == ("Failed", "DeadlineExceeded"), (
            rayjobs.brief(status)
        )
        assert status.get("jobStatus") not in ("FAILED", "SUCCEEDED", "STOPPED"), (
            f"the Ray job had ended before the deadline: {rayjobs.brief(status)}"
        )
        _acted_in_ttl_order(final, deletions, ttls, profile.thresholds["ttl_slack_s"], timeouts, metrics)


def _acted_in_ttl_order(
    final: dict[str, Any],
    deletions: DeletionTimes,
    ttls: dict[str, int],
    slack: float,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> dict[str, float]:
    """Seconds from the job's end to each deletion, each within its TTL plus slack, in TTL order."""
    with behaviour("deletion rules act after their TTLs"):
        after = {what: _seconds_after_end(final, deletions.at(what, ttl + slack + timeouts.apply))
                 for what, ttl in ttls.items()}  # fmt: skip
    metrics.update({f"{what}_deleted_s": seconds for what, seconds in after.items()})
    for what, ttl in ttls.items():
        _within(f"the {what} was deleted", after[what], ttl, slack)
    assert after["worker"] < after["cluster"] < after["rayjob"], f"deletions after the end: {after}"
    return after


def _cluster_stays(ray: Ray, cluster: str, profile: Profile) -> str:
    """Watch the job's cluster for as long as a TTL-0 rule may take to act (the profile's
    ttl_slack_s); "" if it was never marked for deletion."""
    return holds_for(
        ray.list_fn("rayclusters"),
        lambda o: o["metadata"].get("deletionTimestamp") is None,
        what=f"RayCluster {cluster} stays",
        duration=profile.thresholds["ttl_slack_s"],
        field_selector=f"metadata.name={cluster}",
    )


def _workers_go(ray: Ray, cluster: str, what: str, profile: Profile, timeouts: Timeouts) -> None:
    with behaviour(what):
        wait_gone(
            ray.core.list_namespaced_pod,
            what=f"the workers of {cluster}",
            timeout=profile.thresholds["ttl_slack_s"] + timeouts.apply,
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={cluster},ray.io/node-type=worker",
        )


@DELETION_POLICY
def test_delete_none_deletes_nothing(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: DeleteNone deleting the cluster. The positive control, a RayJob beside it whose
    DeleteCluster rule must act, shows the operator applies deletion rules at all (an operator that
    ignored them would pass DeleteNone alone)."""
    keep = _start(
        ray, rayjobs.job(cluster_values, "keep", deletionStrategy={"deletionRules": [_rule("DeleteNone", 0)]})
    )
    rules = {"deletionRules": [_rule("DeleteCluster", 0)]}
    control = _start(ray, rayjobs.job(cluster_values, "control", deletionStrategy=rules))
    kept = _status(_completed(keep, timeouts))["rayClusterName"]
    controlled = _status(_completed(control, timeouts))["rayClusterName"]
    with behaviour("the control RayJob's DeleteCluster rule deletes its cluster"):
        wait_gone(ray.list_fn("rayclusters"), what=f"RayCluster {controlled}",
                  timeout=profile.thresholds["ttl_slack_s"] + timeouts.apply,
                  field_selector=f"metadata.name={controlled}")  # fmt: skip
    broken = _cluster_stays(ray, kept, profile)
    assert not broken, f"DeleteNone: RayCluster {kept}: {broken}"


@DELETION_POLICY
def test_rules_act_only_on_their_outcome(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: a rule for SUCCEEDED acting on a FAILED job. The FAILED job's own rule
    (DeleteWorkers) must act, so an operator that ignored rules altogether fails too."""
    rules = [_rule("DeleteCluster", 0, "SUCCEEDED"), _rule("DeleteWorkers", 0, "FAILED")]
    body = rayjobs.job(cluster_values, "on-failure", rayjobs.FAILS, deletionStrategy={"deletionRules": rules})
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = rayjobs.fixed_workers(cluster_values)
    job = _start(ray, body)
    final = job.finished(_job_timeout(timeouts))
    assert _status(final).get("jobStatus") == "FAILED", rayjobs.brief(_status(final))
    cluster = _status(final)["rayClusterName"]
    _workers_go(ray, cluster, "the FAILED job's DeleteWorkers rule deletes its workers", profile, timeouts)
    broken = _cluster_stays(ray, cluster, profile)
    assert not broken, f"the SUCCEEDED rule acted on a FAILED job: {broken}"


@DELETION_POLICY
def test_legacy_on_success_policy_still_works(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: the legacy onSuccess policy ignored in favour of shutdownAfterJobFinishes. Its
    DeleteWorkers must delete only the workers, where shutdown alone would delete the whole cluster."""
    # 1.6 refuses shutdownAfterJobFinishes with a DeleteNone policy, hence DeleteCluster on failure.
    strategy = {"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteCluster"}}
    body = rayjobs.job(cluster_values, "legacy", shutdownAfterJobFinishes=True, deletionStrategy=strategy)
    body["spec"]["rayClusterSpec"]["workerGroupSpecs"] = rayjobs.fixed_workers(cluster_values)
    final = _completed(_start(ray, body), timeouts)
    cluster = _status(final)["rayClusterName"]
    _workers_go(ray, cluster, "onSuccess DeleteWorkers deletes the workers", profile, timeouts)
    broken = _cluster_stays(ray, cluster, profile)
    assert not broken, f"onSuccess DeleteWorkers, yet the whole RayCluster {cluster} went: {broken}"
    assert ray.list_fn("rayjobs")(field_selector="metadata.name=legacy")["items"], "the RayJob itself went"


# -- validation -------------------------------------------------------------------------


def _validation_cases(values: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    rules = {"deletionRules": [_rule("DeleteCluster", 0)]}
    return {
        "rules_with_shutdown": (
            {"shutdownAfterJobFinishes": True, "deletionStrategy": rules}, "mutually exclusive"),
        "ttls_out_of_order": (
            {"deletionStrategy": {"deletionRules": [_rule("DeleteCluster", 5), _rule("DeleteWorkers", 10)]}},
            "TTL"),
        "delete_workers_with_autoscaling": (
            {"deletionStrategy": {"deletionRules": [_rule("DeleteWorkers", 0)]}}, "autoscaling"),
        "delete_cluster_with_cluster_selector": (
            {"clusterSelector": {"ray.io/cluster": "elsewhere"}, "rayClusterSpec": None,
             "deletionStrategy": rules},
            "ClusterSelector"),
        "ttl_without_shutdown": ({"ttlSecondsAfterFinished": 30}, "shutdownAfterJobFinishes"),
        # As Kueue requires: a suspended RayJob must let KubeRay delete its cluster on resume's end.
        "suspend_without_shutdown": ({"suspend": True}, "not allowed to be suspended"),
        "runtime_env_not_yaml": ({"runtimeEnvYAML": "env_vars: [never closed"}, "RuntimeEnvYAML"),
    }  # fmt: skip


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=DELETION_POLICY) for case in (
        "rules_with_shutdown", "ttls_out_of_order", "delete_workers_with_autoscaling",
        "delete_cluster_with_cluster_selector")]
    + ["ttl_without_shutdown", "suspend_without_shutdown", "runtime_env_not_yaml"])  # fmt: skip
@pytest.mark.no_pods
def test_invalid_spec_ends_in_validation_failed_with_a_message(
    case: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: an invalid RayJob spec accepted (a cluster made), or refused without saying why."""
    spec, words = _validation_cases(cluster_values)[case]
    body = rayjobs.job(cluster_values, "invalid", **spec)
    if spec.get("rayClusterSpec", "") is None:
        del body["spec"]["rayClusterSpec"]
    if case == "delete_workers_with_autoscaling":
        body["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    job = _start(ray, body)
    final = job.finished(timeouts.apply)
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "ValidationFailed", rayjobs.brief(status)
    assert words.lower() in (status.get("message") or "").lower(), rayjobs.brief(status)
    assert not ray.list_fn("rayclusters")()["items"], "an invalid RayJob still made a cluster"


# -- retries and deadlines --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode", "SidecarMode"])
def test_backoff_limit_retries_with_a_new_cluster_each_time(
    mode: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: backoffLimit ignored in this submission mode (fewer or more attempts than 1 + 2),
    or a retry reusing a cluster."""
    body = rayjobs.job(cluster_values, "retries", rayjobs.FAILS, backoffLimit=2, submissionMode=mode)
    job = _start(ray, body)
    clusters: set[str] = set()

    def failed_for_good(obj: dict[str, Any]) -> bool:
        status = _status(obj)
        if status.get("rayClusterName"):
            clusters.add(status["rayClusterName"])
        # KubeRay turns a retryable failure into Retrying in the same status write, so Failed is
        # only ever written once the RayJob has failed for good: an operator that never retries
        # ends here after one attempt instead of running the wait out.
        return status.get("jobDeploymentStatus") == "Failed"

    started = time.monotonic()
    with behaviour("backoffLimit 2 retries a failing job twice, then it fails"):
        final = job.until(failed_for_good, "RayJob retries to fail for good", 3 * _job_timeout(timeouts))
    metrics["job_failed_s"] = round(time.monotonic() - started, 2)
    attempts = _status(final).get("failed")
    assert attempts == 3, f"backoffLimit 2: the RayJob failed for good after {attempts} attempt(s), not 3"
    assert "Retrying" in job.seen, f"never Retrying: {job.seen}"
    assert len(clusters) == 3, f"clusters used: {sorted(clusters)}"


def test_active_deadline_ends_in_deadline_exceeded_and_is_not_retried(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: a RayJob outliving activeDeadlineSeconds (beyond deadline_slack_s), ended before
    it, not marked DeadlineExceeded, or retried although DeadlineExceeded is never retried."""
    deadline, slack = 40, profile.thresholds["deadline_slack_s"]
    sleeps = rayjobs.runs_for(600)
    job = _start(
        ray, rayjobs.job(cluster_values, "deadline", sleeps, activeDeadlineSeconds=deadline, backoffLimit=2)
    )
    final = job.finished(deadline + slack + timeouts.apply)
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "Failed", rayjobs.brief(status)
    assert status.get("reason") == "DeadlineExceeded", rayjobs.brief(status)
    _within("the job ended", _run_time(status), deadline, slack)
    assert "Retrying" not in job.seen, f"a DeadlineExceeded job was retried: {job.seen}"


def test_pre_running_deadline_fails_a_job_whose_cluster_cannot_start(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: a RayJob whose cluster can never start not failed by preRunningDeadlineSeconds
    (within deadline_slack_s), failed before it, or not marked PreRunningDeadlineExceeded."""
    deadline, slack = 20, profile.thresholds["deadline_slack_s"]
    body = rayjobs.job(cluster_values, "never-runs", preRunningDeadlineSeconds=deadline)
    head = body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"] = {"requests": {"cpu": "64"}, "limits": {"cpu": "64"}}  # no node has that much
    job = _start(ray, body)
    final = job.finished(deadline + slack + timeouts.apply)
    status = _status(final)
    assert status.get("jobDeploymentStatus") == "Failed", rayjobs.brief(status)
    assert status.get("reason") == "PreRunningDeadlineExceeded", rayjobs.brief(status)
    _within("the job failed", _run_time(status), deadline, slack)


# -- existing clusters, suspension, deletion ---------------------------------------------


def test_cluster_selector_runs_on_an_existing_cluster_and_never_deletes_it(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: a clusterSelector RayJob not run on the selected cluster, making its own, or the
    selected cluster deleted with the RayJob."""
    ray.create(
        "rayclusters",
        render("ray/raycluster.yaml", **{**cluster_values, "name": "shared", "head_num_cpus": 1}),
    )
    ray.wait_cluster_ready("shared", timeouts.ready)
    body = rayjobs.job(cluster_values, "guest", clusterSelector={"ray.io/cluster": "shared"})
    del body["spec"]["rayClusterSpec"]
    job = _start(ray, body)
    final = _completed(job, timeouts)
    assert _status(final).get("rayClusterName") == "shared", rayjobs.brief(_status(final))
    assert [c["metadata"]["name"] for c in ray.list_fn("rayclusters")()["items"]] == ["shared"]
    ray.delete("rayjobs", "guest")
    with behaviour("a deleted RayJob goes (its finalizer is removed)"):
        wait_gone(
            ray.list_fn("rayjobs"),
            what="RayJob guest",
            timeout=timeouts.cleanup,
            field_selector="metadata.name=guest",
        )
    broken = _cluster_stays(ray, "shared", profile)
    assert not broken, f"the selected cluster did not stay: {broken}"


def _wait_children_gone(ray: Ray, cluster: str, job_name: str, timeouts: Timeouts) -> None:
    """The job's RayCluster and its submitter Job are both deleted."""
    wait_gone(
        ray.list_fn("rayclusters"),
        what=f"RayCluster {cluster}",
        timeout=timeouts.cleanup,
        field_selector=f"metadata.name={cluster}",
    )
    wait_gone(
        client.BatchV1Api(ray.api).list_namespaced_job,
        what="the submitter Job",
        timeout=timeouts.cleanup,
        namespace=ray.namespace,
        field_selector=f"metadata.name={job_name}",
    )


def test_suspend_deletes_cluster_and_submitter_and_resume_completes(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: suspend not deleting the cluster and submitter or never reaching Suspended, and a
    resumed RayJob not starting anew on a new cluster and completing."""
    body = rayjobs.job(
        cluster_values,
        "pausable",
        rayjobs.runs_for(30, "rayjob-output-ok"),
        shutdownAfterJobFinishes=True,
    )
    job = _start(ray, body)
    first_cluster = _status(job.running(timeouts))["rayClusterName"]
    ray.patch("rayjobs", "pausable", {"spec": {"suspend": True}})
    with behaviour("suspend deletes the cluster and the submitter and reaches Suspended"):
        job.until(
            lambda o: _status(o).get("jobDeploymentStatus") == "Suspended",
            "RayJob pausable to be suspended",
            timeouts.cleanup,
        )
        _wait_children_gone(ray, first_cluster, "pausable", timeouts)
    started = time.monotonic()
    ray.patch("rayjobs", "pausable", {"spec": {"suspend": False}})
    final = _completed(job, timeouts)
    metrics["job_complete_after_resume_s"] = round(time.monotonic() - started, 2)
    assert _status(final)["jobStatus"] == "SUCCEEDED"
    assert _status(final)["rayClusterName"] != first_cluster, "the resumed job reused the deleted cluster"


def test_deleting_a_running_job_removes_its_cluster_and_submitter(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: the RayCluster, submitter Job or pods of a deleted running RayJob left behind."""
    job = _start(ray, rayjobs.job(cluster_values, "doomed", rayjobs.runs_for(600)))
    cluster = _status(job.running(timeouts))["rayClusterName"]
    started = time.monotonic()
    ray.delete("rayjobs", "doomed")
    with behaviour("deleting a running RayJob removes its children"):
        _wait_children_gone(ray, cluster, "doomed", timeouts)
        wait_gone(
            ray.core.list_namespaced_pod,
            what="its pods",
            timeout=timeouts.cleanup,
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={cluster}",
        )
    metrics["cleanup_s"] = round(time.monotonic() - started, 2)


# Asks the head's job server (the API the operator calls) how one Ray job ends. Stopping is
# asynchronous in Ray (the job's process is signalled, then reaped), so ask until the status
# is terminal or argv[2] seconds have passed.
RAY_JOB_END = """
import sys, time
from ray.job_submission import JobSubmissionClient
jobs = JobSubmissionClient("http://127.0.0.1:8265")
deadline = time.monotonic() + float(sys.argv[2])
status = jobs.get_job_status(sys.argv[1])
while not status.is_terminal() and time.monotonic() < deadline:
    time.sleep(1)  # poll-interval: the job server offers no watch
    status = jobs.get_job_status(sys.argv[1])
print("ray-job-status", status.value)
"""


def test_deleting_a_running_job_stops_its_ray_job_first(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a deleted RayJob whose Ray job keeps running (its finalizer does not stop it).

    The job runs in HTTPMode (no submitter pod that could stop it on its own) on a cluster
    chosen by clusterSelector, which outlives the RayJob: its job server is then asked how
    the Ray job ended.
    """
    ray.create(
        "rayclusters",
        render("ray/raycluster.yaml", **{**cluster_values, "name": "keeper", "head_num_cpus": 1}),
    )
    ray.wait_cluster_ready("keeper", timeouts.ready)
    body = rayjobs.job(
        cluster_values,
        "stoppable",
        rayjobs.runs_for(600),
        clusterSelector={"ray.io/cluster": "keeper"},
        submissionMode="HTTPMode",
    )
    del body["spec"]["rayClusterSpec"]
    job = _start(ray, body)
    running = job.until(
        lambda o: _status(o).get("jobStatus") == "RUNNING",
        "the Ray job of RayJob stoppable to run",
        _job_timeout(timeouts),
    )
    finalizers = running["metadata"].get("finalizers") or []
    assert "ray.io/rayjob-finalizer" in finalizers, (
        f"a running RayJob has no ray.io/rayjob-finalizer (finalizers: {finalizers})"
    )
    job_id = _status(running)["jobId"]
    ray.delete("rayjobs", "stoppable")
    with behaviour("deleting a running RayJob stops its Ray job before the RayJob is gone"):
        wait_gone(
            ray.list_fn("rayjobs"),
            what="RayJob stoppable",
            timeout=timeouts.cleanup,
            field_selector="metadata.name=stoppable",
        )
        command = ["python", "-c", RAY_JOB_END, job_id, str(timeouts.cleanup)]
        out = ray.exec(ray.head_pod("keeper"), command, timeout=timeouts.cleanup + 60)
        assert "ray-job-status STOPPED" in out, f"the Ray job of a deleted RayJob did not stop: {out}"
