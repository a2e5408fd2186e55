"""Area rayjob (basic): a RayJob runs to completion and, by default, leaves its cluster running.

Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from conformance.kube.manifests import manifest_values, render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for
from conformance.profiles import Profile
from conformance.suites import rayjobs
from conformance.suites.shared import Shared
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("rayjob")

FINISHED = ("Complete", "Failed", "ValidationFailed")


@pytest.fixture(scope="module")
def finished_job(
    api: Any, module_namespace: str, profile: Profile, ray_version: str, timeouts: Timeouts
) -> Shared[dict[str, Any]]:
    """A K8sJobMode RayJob with default settings, run to its end by the first check that asks."""
    return Shared(lambda: _run_basic_job(Ray(api, module_namespace), profile, ray_version, timeouts))


def _run_basic_job(ray: Ray, profile: Profile, ray_version: str, timeouts: Timeouts) -> dict[str, Any]:
    token = uuid.uuid4().hex
    entrypoint = (
        'python -c "import ray; ray.init(); '
        f"print('answer', ray.get(ray.remote(lambda: 6 * 7).remote()), '{token}')\""
    )
    values = {**manifest_values(profile, ray_version), "name": "basic", "entrypoint": entrypoint}
    started = time.monotonic()
    ray.create("rayjobs", render("ray/rayjob.yaml", **values))
    with behaviour("a default K8sJobMode RayJob finishes"):
        job = ray.wait(
            "rayjobs",
            "basic",
            lambda obj: obj.get("status", {}).get("jobDeploymentStatus") in FINISHED,
            what="RayJob basic to finish",
            timeout=timeouts.ready + timeouts.apply,
            describe=lambda obj: "{jobDeploymentStatus}/{jobStatus}".format(
                jobDeploymentStatus=obj.get("status", {}).get("jobDeploymentStatus"),
                jobStatus=obj.get("status", {}).get("jobStatus"),
            ),
        )
    return {"job": job, "token": token, "seconds": round(time.monotonic() - started, 2), "ray": ray}


@pytest.mark.smoke
def test_k8s_job_mode_reaches_succeeded_and_complete(
    finished_job: Shared[dict[str, Any]], metrics: dict[str, float]
) -> None:
    """Catches: a RayJob with a succeeding entrypoint not ending Complete/SUCCEEDED with its times."""
    finished = finished_job.get()
    status = finished["job"]["status"]
    metrics["job_complete_s"] = finished["seconds"]
    assert status.get("jobDeploymentStatus") == "Complete", rayjobs.brief(status)
    assert status.get("jobStatus") == "SUCCEEDED", rayjobs.brief(status)
    assert status.get("startTime") and status.get("endTime"), rayjobs.brief(status)


def test_job_logs_are_readable_from_the_submitter(finished_job: Shared[dict[str, Any]]) -> None:
    """Catches: the submitter's pod removed at the job's end, or not carrying this job's output."""
    finished = finished_job.get()
    ray: Ray = finished["ray"]
    pods = ray.core.list_namespaced_pod(ray.namespace, label_selector="job-name=basic").items
    assert pods, "the submitter Job has no pods"
    logs = ray.core.read_namespaced_pod_log(pods[0].metadata.name, ray.namespace)
    assert f"answer 42 {finished['token']}" in logs, f"the submitter's log: {logs[-500:]}"


def test_cluster_survives_the_job_by_default(finished_job: Shared[dict[str, Any]], profile: Profile) -> None:
    """Catches: a finished RayJob's cluster deleted although shutdownAfterJobFinishes is unset
    (it defaults to false)."""
    finished = finished_job.get()
    ray: Ray = finished["ray"]
    cluster_name = finished["job"]["status"]["rayClusterName"]
    # shutdownAfterJobFinishes defaults to false: the cluster stays, ready and not being deleted,
    # for as long as a TTL-0 deletion would have taken (the profile's ttl_slack_s).
    broken = holds_for(
        ray.list_fn("rayclusters"),
        lambda obj: (
            obj["metadata"].get("deletionTimestamp") is None and obj.get("status", {}).get("state") == "ready"
        ),
        what=f"RayCluster {cluster_name} stays ready",
        duration=profile.thresholds["ttl_slack_s"],
        field_selector=f"metadata.name={cluster_name}",
    )
    assert not broken, f"RayCluster {cluster_name} of a finished RayJob did not stay: {broken}"
    assert ray.head_pod(cluster_name).status.phase == "Running"
