"""Area rayservice: a RayService whose head is lost while it serves comes back on the same
RayCluster, measured under load through the Gateway API.

Without GCS fault tolerance the head takes Ray and the Serve application with it (the app's
replica and proxy run on the head: manifests/ray/rayservice.yaml). KubeRay re-creates the head
pod in the same RayCluster, redeploys the Serve config on it, and puts it back behind the serve
Service (label `ray.io/serve=true`) once its proxy is healthy; the RayService is Ready again.
The outage is the time from the first failed request to the last, judged against the profile's
`head_loss_outage_s`; the per-second timeline goes to `<run-dir>/timelines/`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from conformance.environment import Environment
from conformance.kube import rayservice as rs
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until
from conformance.load import analysis, traffic
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

pytestmark = [
    pytest.mark.area("rayservice"),
    pytest.mark.exclusive("measures failed requests under load", quiet=True),
]

NAME = "echo"
# After the app answers again, the load goes on this long; every request in it must succeed.
RECOVERED_WINDOW_S = 10
# Answers sooner than this after the recovery was seen are not judged (the data plane follows).
DATA_PLANE_S = 2


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME)


def _serve_endpoints(ray: Ray, service: str) -> set[str]:
    """The ready addresses behind `service`, from its EndpointSlices."""
    slices = client.DiscoveryV1Api(ray.api).list_namespaced_endpoint_slice(
        ray.namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return {
        address
        for s in slices.items
        for e in s.endpoints or []
        if e.conditions is None or e.conditions.ready is not False
        for address in e.addresses
    }


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
    image = serving.load_image(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, image, address, host, max_duration_s=int(2 * timeouts.ready)
    )
    marks: list[tuple[float, str]] = []
    try:
        with running(gen, timeouts.ready, check=False), rs.Sampler(ray, NAME) as sampler:
            poll_until(
                lambda: serving.answers(serving.probe(ray, gen, address, host), "v1"),
                what="the app to answer under load before its head is deleted",
                timeout=timeouts.ready,
                every=serving.PROBE_INTERVAL_S,
            )
            deleted = time.time()
            ray.core.delete_namespaced_pod(lost.metadata.name, ray.namespace, grace_period_seconds=0)
            marks.append((deleted, f"head pod {lost.metadata.name} deleted"))
            head = ray.wait_replaced(cluster, lost, "head", timeouts.ready)
            metrics["head_ready_s"] = round(time.time() - deleted, 2)
            marks.append((time.time(), f"new head {head.metadata.name} Ready"))
            with behaviour(f"the serve Service {service} has the new head as its endpoint"):
                poll_until(
                    lambda: _serve_endpoints(ray, service) == {head.status.pod_ip} or None,
                    what=f"{service}'s ready endpoints to be the new head's address {head.status.pod_ip}",
                    timeout=timeouts.ready,
                    describe=lambda: f"ready endpoints {sorted(_serve_endpoints(ray, service))}",
                )
            metrics["endpoints_moved_s"] = round(time.time() - deleted, 2)
            with behaviour("the RayService is Ready again on the same RayCluster, with its new head"):
                ray.wait(
                    "rayservices",
                    NAME,
                    lambda s: (
                        rs.is_ready(s) and rs.active_cluster(s) == cluster and rs.app_status(s) == "RUNNING"
                    ),
                    what=f"Ready with {cluster} active and its app RUNNING",
                    timeout=timeouts.ready,
                    describe=rs.describe,
                )
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
    finally:
        serving.load_metrics(gen.records, metrics, serving.UPGRADE_RATE)
        metrics["outage_s"] = traffic.outage_s(gen.records)
        start = gen.records[0].sent if gen.records else time.time()
        title = "head lost while serving"
        serving.record_timeline(
            conformance, request.node.nodeid, title, gen.records, [], start, cluster, "", marks
        )
    records = gen.records
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
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
