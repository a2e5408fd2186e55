"""Area rayjob: a RayJob acted on from outside its entrypoint: its Ray job stopped through Ray's
job API, its submitter pod or (in SidecarMode) its head lost mid-run, the RayJob created
suspended, or handed to another controller with `managedBy` (KubeRay v1.7.0's
e2erayjob/rayjob_test.go, rayjob_sidecar_mode_test.go, rayjob_cluster_selector_test.go,
e2erayjobsubmitter and e2e/raycluster_test.go).

Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.errors import HarnessError
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, stays_absent, wait_for, wait_gone
from conformance.suites import rayjobs
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("rayjob")

# KubeRay acts on a new object within a reconcile (about a second); anything it wrongly makes
# shows within this window.
SETTLED_S = 15
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # the one external manager KubeRay's CRDs accept
KUBERAY = "ray.io/kuberay-operator"  # utils.KubeRayController

# Asks the head's job server to stop one Ray job, as `ray job stop` or the dashboard would.
STOP_RAY_JOB = """
import sys
from ray.job_submission import JobSubmissionClient
print("stop-accepted", JobSubmissionClient("http://127.0.0.1:8265").stop_job(sys.argv[1]))
"""
# Submits one Ray job under a submission id of the caller's choosing, as an interactive user would.
SUBMIT_AS = """
import sys
from ray.job_submission import JobSubmissionClient
print("submitted", JobSubmissionClient("http://127.0.0.1:8265").submit_job(
    entrypoint=sys.argv[2], submission_id=sys.argv[1]))
"""
# Counts the Ray jobs the head's job server holds under one submission id.
COUNT_SUBMISSIONS = """
import sys
from ray.job_submission import JobSubmissionClient
jobs = JobSubmissionClient("http://127.0.0.1:8265").list_jobs()
print("submissions", sum(1 for j in jobs if j.submission_id == sys.argv[1]))
"""


def _stop_ray_job(ray: Ray, cluster: str, job_id: str, timeouts: Timeouts) -> None:
    out = ray.exec(ray.head_pod(cluster), ["python", "-c", STOP_RAY_JOB, job_id], timeout=timeouts.apply)
    if "stop-accepted True" not in out:
        # Ray's job server, not KubeRay, refused: nothing is learned about KubeRay.
        raise HarnessError(f"Ray's job server did not accept stopping job {job_id}: {out.strip()[-300:]}")


@pytest.mark.kuberay_issue(1866, 1855)
@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode", "SidecarMode"])
def test_ray_job_stopped_through_rays_job_api_ends_complete_with_stopped(
    mode: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayJob whose Ray job was stopped outside KubeRay (`ray job stop`, the dashboard)
    left Running, ended Failed, or reporting another jobStatus than STOPPED."""
    body = rayjobs.job(cluster_values, "stopped", rayjobs.runs_for(600), submissionMode=mode)
    job = rayjobs.start(ray, body)
    running = job.until(
        lambda o: rayjobs.status(o).get("jobStatus") == "RUNNING",
        "the Ray job of RayJob stopped to run",
        rayjobs.job_timeout(timeouts),
    )
    status = rayjobs.status(running)
    _stop_ray_job(ray, status["rayClusterName"], status["jobId"], timeouts)
    stopped_at = time.monotonic()
    final = rayjobs.status(job.finished(timeouts.cleanup))
    metrics["complete_after_stop_s"] = round(time.monotonic() - stopped_at, 2)
    assert final.get("jobDeploymentStatus") == "Complete", (
        f"a stopped Ray job ended its RayJob {rayjobs.brief(final)} (passed through {job.seen})"
    )
    assert final.get("jobStatus") == "STOPPED", rayjobs.brief(final)


def _submitter_pods(ray: Ray, job_name: str) -> list[client.V1Pod]:
    pods = ray.core.list_namespaced_pod(ray.namespace, label_selector=f"job-name={job_name}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


@pytest.mark.kuberay_issue(2154)
def test_a_lost_submitter_is_replaced_and_follows_the_job_without_submitting_it_again(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a K8sJobMode RayJob whose submitter pod is lost mid-run and whose replacement
    submits the Ray job a second time (#2154) or fails on the existing one, or whose RayJob then
    does not end Complete/SUCCEEDED with the job's output in the new submitter's log."""
    body = rayjobs.job(cluster_values, "resubmit", rayjobs.runs_for(40, "rayjob-output-ok"))
    job = rayjobs.start(ray, body)
    running = job.until(
        lambda o: rayjobs.status(o).get("jobStatus") == "RUNNING",
        "the Ray job of RayJob resubmit to run",
        rayjobs.job_timeout(timeouts),
    )
    (first,) = _submitter_pods(ray, "resubmit")
    ray.core.delete_namespaced_pod(first.metadata.name, ray.namespace)
    # The Kubernetes Job controller makes the replacement, but only because KubeRay's submitter Job
    # allows retries (backoffLimit 2 unless submitterConfig says otherwise): no replacement is KubeRay's.
    with behaviour("the lost submitter pod of RayJob resubmit is replaced"):
        second = wait_for(
            ray.core.list_namespaced_pod,
            lambda pod: pod.metadata.uid != first.metadata.uid and pod.metadata.deletion_timestamp is None,
            what="a new submitter pod of RayJob resubmit",
            timeout=timeouts.apply,
            namespace=ray.namespace,
            label_selector="job-name=resubmit",
        )
    final = rayjobs.status(rayjobs.completed(job, timeouts))
    assert final.get("jobStatus") == "SUCCEEDED", rayjobs.brief(final)
    log = ray.core.read_namespaced_pod_log(second.metadata.name, ray.namespace)
    assert "rayjob-output-ok" in log, f"the new submitter did not follow the job's output: {log[-500:]}"
    job_id = rayjobs.status(running)["jobId"]
    out = ray.exec(ray.head_pod(final["rayClusterName"]), ["python", "-c", COUNT_SUBMISSIONS, job_id])
    assert "submissions 1" in out, f"Ray's job server holds job {job_id} other than once: {out.strip()}"


@pytest.mark.requires("kuberay>=1.6.0")  # 1.6.0 stopped re-creating a SidecarMode job's head
def test_sidecar_mode_job_whose_head_is_lost_fails_without_a_new_head(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a SidecarMode RayJob whose head (and with it its submitter) is lost mid-run that
    gets a new head (which would start without the submitted job), or that is not ended Failed
    with reason AppFailed or SubmissionFailed."""
    body = rayjobs.job(cluster_values, "headless", rayjobs.runs_for(600), submissionMode="SidecarMode")
    job = rayjobs.start(ray, body)
    running = job.until(
        lambda o: rayjobs.status(o).get("jobStatus") == "RUNNING",
        "the Ray job of RayJob headless to run",
        rayjobs.job_timeout(timeouts),
    )
    cluster = rayjobs.status(running)["rayClusterName"]
    head = ray.head_pod(cluster)
    ray.core.delete_namespaced_pod(head.metadata.name, ray.namespace)
    lost_at = time.monotonic()
    wait_gone(  # the kubelet's termination, not KubeRay's doing
        ray.core.list_namespaced_pod,
        what=f"head {head.metadata.name}",
        timeout=timeouts.cleanup,
        namespace=ray.namespace,
        field_selector=f"metadata.name={head.metadata.name}",
    )
    heads = f"ray.io/cluster={cluster},ray.io/node-type=head"
    made = stays_absent(
        ray.core.list_namespaced_pod,
        what="head pod",
        duration=SETTLED_S,
        namespace=ray.namespace,
        label_selector=heads,
    )
    assert not made, f"KubeRay gave the SidecarMode RayJob's cluster a new head: {made}"
    final = rayjobs.status(job.finished(timeouts.cleanup))
    metrics["failed_after_head_loss_s"] = round(time.monotonic() - lost_at, 2)
    assert final.get("jobDeploymentStatus") == "Failed", f"{rayjobs.brief(final)} (passed through {job.seen})"
    assert final.get("reason") in ("AppFailed", "SubmissionFailed"), rayjobs.brief(final)


def test_created_suspended_makes_nothing_until_resumed_then_completes(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayJob created with `suspend: true` that creates its RayCluster or submitter
    anyway (it must wait, e.g. for Kueue to admit it), never reaches Suspended, or once resumed
    does not run on a new cluster to completion."""
    # KubeRay refuses suspend without shutdownAfterJobFinishes (ValidateRayJobSpec), as Kueue does.
    body = rayjobs.job(cluster_values, "held", suspend=True, shutdownAfterJobFinishes=True)
    job = rayjobs.start(ray, body)
    job.until(
        lambda o: rayjobs.status(o).get("jobDeploymentStatus") == "Suspended",
        "RayJob held, created suspended, to be Suspended",
        timeouts.apply,
    )
    assert "Running" not in job.seen, f"a RayJob created suspended ran first: {job.seen}"
    made = stays_absent(ray.list_fn("rayclusters"), what="RayCluster", duration=SETTLED_S)
    assert not made, f"a RayJob created suspended made a RayCluster: {made}"
    submitters = client.BatchV1Api(ray.api).list_namespaced_job(ray.namespace).items
    assert not submitters, f"a suspended RayJob made a submitter: {[j.metadata.name for j in submitters]}"
    resumed_at = time.monotonic()
    ray.patch("rayjobs", "held", {"spec": {"suspend": False}})
    final = rayjobs.status(rayjobs.completed(job, timeouts))
    metrics["job_complete_after_resume_s"] = round(time.monotonic() - resumed_at, 2)
    assert final.get("jobStatus") == "SUCCEEDED", rayjobs.brief(final)


def test_interactive_mode_waits_with_a_ready_cluster_until_given_a_job_id(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: an InteractiveMode RayJob that submits anything itself, leaves Waiting before it is
    given a job id, has no ready cluster to submit to while Waiting, or does not follow the job the
    user submitted under the given id to Complete/SUCCEEDED."""
    job = rayjobs.start(ray, rayjobs.job(cluster_values, "interactive", submissionMode="InteractiveMode"))
    waiting = job.until(
        lambda o: rayjobs.status(o).get("jobDeploymentStatus") == "Waiting",
        "RayJob interactive to wait for a job id",
        rayjobs.job_timeout(timeouts),
    )
    cluster = rayjobs.status(waiting)["rayClusterName"]
    state = (ray.get("rayclusters", cluster).get("status") or {}).get("state")
    assert state == "ready", (
        f"an InteractiveMode RayJob waits with its RayCluster {cluster} {state}, not ready"
    )
    left = holds_for(
        ray.list_fn("rayjobs"),
        lambda o: rayjobs.status(o).get("jobDeploymentStatus") == "Waiting",
        what="RayJob interactive stays Waiting",
        duration=SETTLED_S,
        field_selector="metadata.name=interactive",
    )
    assert not left, f"an InteractiveMode RayJob given no job id left Waiting: {left}"
    submitters = client.BatchV1Api(ray.api).list_namespaced_job(ray.namespace).items
    assert not submitters, (
        f"an InteractiveMode RayJob made a submitter: {[j.metadata.name for j in submitters]}"
    )
    job_id = "krc-interactive-1"
    ray.exec(ray.head_pod(cluster), ["python", "-c", SUBMIT_AS, job_id, rayjobs.SUCCEEDS])
    ray.patch("rayjobs", "interactive", {"spec": {"jobId": job_id}})
    final = rayjobs.status(rayjobs.completed(job, timeouts))
    assert final.get("jobId") == job_id and final.get("jobStatus") == "SUCCEEDED", rayjobs.brief(final)


def _managed_body(kind: str, values: dict[str, Any], name: str, manager: str) -> dict[str, Any]:
    if kind == "rayjobs":
        body = rayjobs.job(values, name)
    else:
        body = render("ray/raycluster.yaml", **{**values, "name": name})
    body["spec"]["managedBy"] = manager
    return body


def _refusal(call: Any) -> ApiException | None:
    try:
        call()
    except ApiException as exc:
        if exc.status == 422:
            return exc
        raise
    return None


@pytest.mark.requires("kuberay>=1.3.0")  # managedBy came with KubeRay 1.3.0's CRDs
@pytest.mark.parametrize("kind", ["rayjobs", "rayclusters"])
def test_managed_by_multikueue_is_left_alone_and_immutable_and_unknown_managers_refused(
    kind: str, ray: Ray, cluster_values: dict[str, Any]
) -> None:
    """Catches: KubeRay reconciling an object another controller (MultiKueue) manages: making its
    cluster or pods or writing its status; `managedBy` changeable after creation; and a manager
    KubeRay does not know accepted by the API."""
    ray.create(kind, _managed_body(kind, cluster_values, "external", MULTIKUEUE))
    made = stays_absent(ray.core.list_namespaced_pod, what="pod", duration=SETTLED_S, namespace=ray.namespace)
    assert not made, f"KubeRay made a pod for a {kind[:-1]} MultiKueue manages: {made}"
    clusters = [c["metadata"]["name"] for c in ray.list_fn("rayclusters")()["items"]]
    if kind == "rayjobs":
        assert not clusters, f"KubeRay made a RayCluster for a RayJob MultiKueue manages: {clusters}"
    status = ray.get(kind, "external").get("status") or {}
    assert not status.get("jobDeploymentStatus") and not status.get("state"), (
        f"KubeRay wrote the status of a {kind[:-1]} MultiKueue manages: {status}"
    )
    change = _refusal(lambda: ray.patch(kind, "external", {"spec": {"managedBy": KUBERAY}}))
    assert change is not None, f"managedBy of a {kind[:-1]} changed from {MULTIKUEUE} to {KUBERAY}"
    assert "immutable" in str(change.body), f"the refusal does not say managedBy is immutable: {change.body}"
    unknown = _refusal(
        lambda: ray.create(kind, _managed_body(kind, cluster_values, "other", "example.com/other-controller"))
    )
    assert unknown is not None, f"a {kind[:-1]} with managedBy example.com/other-controller was accepted"
