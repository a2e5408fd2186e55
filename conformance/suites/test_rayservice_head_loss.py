"""Area rayservice: a RayService whose head is lost while it serves comes back on the same
RayCluster, measured under load through the Gateway API.

Without GCS fault tolerance the head takes Ray and the Serve application with it (the app's
replica and proxy run on the head: manifests/ray/rayservice.yaml). KubeRay re-creates the head
pod in the same RayCluster, redeploys the Serve config on it, and puts it back behind the serve
Service (label `ray.io/serve=true`) once its proxy is healthy; the RayService is Ready again.
The outage is the time from the first failed request to the last, judged against the profile's
`head_loss_outage_s`; the per-second timeline goes to `<run-dir>/timelines/`.

With GCS fault tolerance (Redis), the Serve replica on a worker and the head kept out of the
serve Service (`excludeHeadPodFromServeSvc`), as KubeRay's own ray-service.ft.yaml has it, a
killed `gcs_server` restarts the head container in place, the worker and its replica live on,
and the app keeps answering: failed requests are judged against `gcs_restart_failed_requests`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from conformance.environment import Environment
from conformance.exclusive import BEFORE_LOAD
from conformance.kube import rayservice as rs
from conformance.kube.pods import is_serving, restarts
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until, wait_for
from conformance.load import analysis
from conformance.profiles import Profile
from conformance.suites import ray_processes, serving
from conformance.timeouts import Timeouts

pytestmark = [
    pytest.mark.area("rayservice"),
    pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD),
]

NAME = "echo"
# After the app answers again, the load goes on this long; every request in it must succeed.
RECOVERED_WINDOW_S = 10
# Answers sooner than this after the recovery was seen are not judged (the data plane follows).
DATA_PLANE_S = 2


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME)


@pytest.mark.requires("gateway_api")
def test_head_lost_while_serving_comes_back_on_the_same_cluster_within_the_outage_budget(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """The head pod of a Ready RayService's active cluster deleted under load: KubeRay re-creates
    it in the same RayCluster, the serve Service's endpoints move to the new head, the RayService
    is Ready again, and the app answers through the Gateway within `head_loss_outage_s`.

    Sources (v1.7.0): controllers/ray/rayservice_controller.go `updateHeadPodServeLabel` (the head
    is labelled ray.io/serve=true only once its Serve proxy answers), `reconcileServe` (the Serve
    config is submitted again to a head that lost it); controllers/ray/raycluster_controller.go
    (a missing head pod is created anew); test/e2erayservice/rayservice_redeploy_test.go
    TestRedeployRayServe asserts the same repair without load.

    Catches: a head not re-created, a new head never put behind the serve Service (its endpoints
    empty or still the old address), the Serve app not redeployed, a RayService that does not
    come back Ready, a head loss answered with a new RayCluster (an upgrade instead of a repair),
    an outage over the budget, failures once it answers again."""
    svc, address, host = serving.ready_behind_own_gateway(ray, base, profile.gateway_class, timeouts, metrics)
    cluster, service = rs.active_cluster(svc), f"{NAME}-serve-svc"
    lost = ray.head_pod(cluster)
    marks: list[tuple[float, str]] = []
    load = serving.FaultLoad(
        ray, conformance, (address, host), "head lost while serving", NAME, cluster, marks
    )
    with load.running(timeouts, metrics, request) as (gen, sampler):
        deleted = time.time()
        ray.core.delete_namespaced_pod(lost.metadata.name, ray.namespace, grace_period_seconds=0)
        marks.append((deleted, f"head pod {lost.metadata.name} deleted"))
        head = ray.wait_replaced(cluster, lost, "head", timeouts.ready)
        metrics["head_ready_s"] = round(time.time() - deleted, 2)
        marks.append((time.time(), f"new head {head.metadata.name} Ready"))
        with behaviour(f"the serve Service {service} has the new head as its endpoint"):
            serving.wait_serve_endpoints(ray, service, head, "the new head", timeouts.ready)
        metrics["endpoints_moved_s"] = round(time.time() - deleted, 2)
        serving.ready_again_on(ray, NAME, cluster, timeouts)
        with behaviour("the app answers through the Gateway from the new head"):
            poll_until(
                lambda: serving.answers(serving.probe(ray, gen, address, host), "v1"),
                what="an answer through the Gateway",
                timeout=timeouts.ready,
                every=serving.PROBE_INTERVAL_S,
            )
        recovered = time.time()
        marks.append((recovered, "answers again"))
        metrics["recovery_s"] = round(recovered - deleted, 2)
        time.sleep(RECOVERED_WINDOW_S)  # poll-interval: a load window after the recovery, judged below
    records = gen.records
    budget = profile.thresholds["head_loss_outage_s"]
    metrics["outage_budget_s"] = budget
    assert not [s for s in sampler.samples if s.pending], "the head loss made a pending RayCluster"
    answered = {r.backend for r in records if r.ok}
    assert answered == {cluster}, f"answers came from {sorted(answered)}, not only {cluster}"
    assert metrics["outage_s"] <= budget, (
        f"the new head answered after {metrics['outage_s']}s of failures, over the {budget}s budget"
        f" (thresholds.head_loss_outage_s): {analysis.summarize(records).describe()}"
    )
    late = [r for r in records if r.sent > recovered + DATA_PLANE_S and not r.ok]
    assert not late, (
        f"{len(late)} failed requests after the new head answered: {analysis.error_details(late)}"
    )


@pytest.fixture
def rayservice_goes_before_redis(ray: Ray, timeouts: Timeouts) -> Iterator[None]:
    yield from ray_processes.deleted_before_redis(ray, "rayservices", NAME, timeouts)


@pytest.mark.requires("gateway_api")
@pytest.mark.usefixtures("rayservice_goes_before_redis")
def test_gcs_server_killed_on_a_fault_tolerant_rayservice_restarts_the_head_in_place_and_keeps_serving(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """A Ready RayService with GCS fault tolerance on Redis, its Serve replica on a worker and its
    head kept out of the serve Service (excludeHeadPodFromServeSvc): `gcs_server` is killed in the
    head under load through the Gateway. The head container restarts
    in the same pod, the worker pod and its Ray node live on, the RayService stays on its cluster
    and is Ready again, and failed requests stay within `gcs_restart_failed_requests`.

    Sources (v1.7.0): test/e2erayservice/rayservice_ha_test.go TestRayServiceGCSFaultTolerance
    (`pkill gcs_server`; the same head pod name with one restart; no failed Locust request);
    controllers/ray/common/pod.go (the GCS FT env of the head and the workers); #1141.

    Catches: excludeHeadPodFromServeSvc ignored (the head behind the serve Service, so its restart
    fails requests); GCS fault tolerance not carried into the RayService's cluster (the restarted head
    starts an empty GCS, the worker's raylet is dropped and its container restarts, the app is
    redeployed while requests fail), KubeRay deleting the head or the worker instead of letting
    the head restart in place, a head loss answered with a new RayCluster, a RayService that does
    not come back Ready, failed requests over the budget."""
    redis = ray_processes.start_redis(ray, profile, timeouts)
    values = {**base, "redis_address": ray_processes.REDIS_ADDRESS, "serve_workers": 1}
    gateway_class = profile.gateway_class
    svc, address, host = serving.ready_behind_own_gateway(ray, values, gateway_class, timeouts, metrics)
    cluster, service = rs.active_cluster(svc), f"{NAME}-serve-svc"
    head = ray.head_pod(cluster)
    (worker,) = ray.pods(cluster, "worker")
    with behaviour(f"the serve Service {service} has the worker, not the head, as its endpoint"):
        serving.wait_serve_endpoints(ray, service, worker, "the worker alone", timeouts.ready)
    head_restarts, worker_restarts = restarts(head), restarts(worker)
    marks: list[tuple[float, str]] = []
    title = "gcs_server killed on a GCS fault-tolerant RayService"
    load = serving.FaultLoad(ray, conformance, (address, host), title, NAME, cluster, marks)
    with load.running(timeouts, metrics, request) as (gen, sampler):
        pid = ray_processes.the_process(ray, head, "gcs_server")
        killed = time.time()
        ray_processes.kill(ray, head, "gcs_server", pid)
        marks.append((killed, f"gcs_server killed in {head.metadata.name}"))
        with behaviour("the head container restarts in the same pod and is Ready again"):
            restarted = wait_for(
                ray.core.list_namespaced_pod,
                lambda pod: restarts(pod) > head_restarts and is_serving(pod),
                what=f"{head.metadata.name} restarted in place and Ready",
                timeout=timeouts.ready,
                describe=_describe_pod,
                namespace=ray.namespace,
                field_selector=f"metadata.name={head.metadata.name}",
            )
        metrics["head_restarted_s"] = round(time.time() - killed, 2)
        marks.append((time.time(), "head Ready again"))
        serving.ready_again_on(ray, NAME, cluster, timeouts)
        metrics["recovery_s"] = round(time.time() - killed, 2)
        time.sleep(RECOVERED_WINDOW_S)  # poll-interval: a load window after the recovery, judged below
    budget = profile.thresholds["gcs_restart_failed_requests"]
    metrics["failed_requests_budget"] = budget
    assert restarted.metadata.uid == head.metadata.uid, "the head pod was replaced, not restarted in place"
    (still,) = ray.pods(cluster, "worker")
    assert (still.metadata.uid, restarts(still)) == (worker.metadata.uid, worker_restarts), (
        f"the worker was replaced or restarted ({restarts(still) - worker_restarts} restarts): "
        "its Ray node did not outlive the GCS restart"
    )
    assert not [s for s in sampler.samples if s.pending], "the GCS restart made a pending RayCluster"
    summary = analysis.summarize(gen.records)
    assert summary.failed <= budget, (
        f"{summary.failed} failed requests while the GCS restarted ({budget} allowed, "
        f"thresholds.gcs_restart_failed_requests): {summary.describe()}"
    )
    storage = (head.metadata.annotations or {}).get("ray.io/external-storage-namespace", "")
    assert storage and ray_processes.redis_keys(ray, redis, storage) > 0, (
        f"the head keeps no state in Redis (storage namespace {storage!r}): GCS fault tolerance is off"
    )


def _describe_pod(pod: client.V1Pod) -> str:
    return f"{pod.metadata.name}: {pod.status.phase}, {restarts(pod)} restarts, ready {is_serving(pod)}"
