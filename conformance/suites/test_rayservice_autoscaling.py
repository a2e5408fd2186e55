"""Area rayservice: Serve autoscaling and the Ray autoscaler together, under a burst of load
through the Gateway API.

The RayService's Echo deployment autoscales between 1 and MAX_REPLICAS replicas of one CPU each;
the head offers no CPU, so every replica needs a worker of its own, and the RayCluster autoscales
its worker group between 1 and MAX_REPLICAS pods. A burst keeps more requests in flight than the
target per replica: Serve asks for more replicas, they cannot be placed, and the autoscaler adds
workers for them. After the burst Serve removes the extra replicas, then drains its proxies on the
workers left without one, and the autoscaler removes those workers once idle. Each replica takes
the whole burst at once (the app only sleeps), so no request has a reason to fail meanwhile. The
timelines (`<run-dir>/timelines/`) have the worker pods, Ray's alive workers, the Serve replicas
and proxies, and the load's per-second latency.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.environment import Environment
from conformance.exclusive import BEFORE_LOAD
from conformance.kube import rayservice as rs
from conformance.kube.ray import Ray
from conformance.kube.scaling import ScaleReading, ScaleWatcher
from conformance.kube.wait import behaviour
from conformance.load import analysis
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.report.timelines import Recorder
from conformance.suites import autoscaling, serving
from conformance.timeouts import Timeouts

pytestmark = [
    pytest.mark.area("rayservice"),
    pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD),
]

NAME = "echo"
GROUP = "serve"  # the worker group of manifests/ray/rayservice.yaml with serve_workers
DEPLOYMENT = ("echo", "Echo")  # the Serve application and deployment
MAX_REPLICAS = 3
TARGET_ONGOING = 2  # target_ongoing_requests per replica
UPSCALE_DELAY_S = 3
DOWNSCALE_DELAY_S = 15
LOOK_BACK_S = 10  # Serve averages the requests in flight over this long
SHUTDOWN_S = 5  # graceful_shutdown_timeout_s: a replica going may take this long to stop
# A node whose last replica went keeps Serve's proxy (an actor: the node is not idle) until Serve
# has drained it, at least RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S (30 s by default in Ray 2.58).
PROXY_DRAIN_S = 30
IDLE_TIMEOUT_S = 30  # the autoscaler's idleTimeoutSeconds
REQUEST_S = 0.5  # the app's time per request
# 20 req/s of 0.5 s each keep 10 requests in flight: 5 replicas' worth at the target, capped at 3.
BURST_RATE = 20


def _values(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(
        cluster_values,
        NAME,
        autoscaling=True,
        serve_workers=1,
        serve_workers_max=MAX_REPLICAS,
        idle_timeout_s=IDLE_TIMEOUT_S,
        serve_max_replicas=MAX_REPLICAS,
        target_ongoing_requests=TARGET_ONGOING,
        upscale_delay_s=UPSCALE_DELAY_S,
        downscale_delay_s=DOWNSCALE_DELAY_S,
        look_back_period_s=LOOK_BACK_S,
        graceful_shutdown_s=SHUTDOWN_S,
        replica_cpus=1,
        delay_s=REQUEST_S,
    )


def _at(replicas: int) -> Any:
    """A sample with `replicas` Serve replicas, all RUNNING, and as many worker pods, all Running."""

    def holds(s: ScaleReading) -> bool:
        serving_as_many = s.replicas() == s.replicas("RUNNING") == replicas
        return serving_as_many and s.pods(GROUP) == s.pods(GROUP, "Running") == replicas

    return holds


@pytest.mark.requires("gateway_api")
def test_a_burst_scales_serve_replicas_and_workers_up_then_both_back_to_steady_state(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    timeline: Recorder,
    request: pytest.FixtureRequest,
) -> None:
    """A RayService with Serve autoscaling (1 to 3 replicas of one CPU) on an autoscaling cluster
    (1 to 3 workers, the head offering no CPU) gets a burst of load through the Gateway: Serve
    scales to 3 replicas and the autoscaler adds the 2 workers they need; after the burst Serve goes
    back to 1 replica within downscale_delay_s, drains the proxies of the workers left without a
    replica, and the autoscaler removes those workers idleTimeoutSeconds after (each bound plus the
    profile's slack); no request fails.

    Sources (v1.7.0): test/e2erayservice/rayservice_ha_test.go TestAutoscalingRayService (more
    workers right after a Locust burst, back to one when steady) with testdata/
    rayservice.autoscaling.yaml; Ray Serve's autoscaling_config (target_ongoing_requests,
    upscale_delay_s, downscale_delay_s, look_back_period_s).

    Catches: Serve replicas that stay pending because the autoscaler never adds workers for them
    (the in-tree autoscaler not wired into the RayService's cluster), workers beyond maxReplicas,
    idle workers never removed or removed before idleTimeoutSeconds, a RayService cluster that
    does not come back to its steady state, and failed requests while workers join and leave the
    serve Service (a worker behind it before its proxy is ready)."""
    values, gateway_class = _values(cluster_values), profile.gateway_class
    svc, address, host = serving.ready_behind_own_gateway(ray, values, gateway_class, timeouts, metrics)
    cluster = rs.active_cluster(svc)
    recording = timeline.autoscaling(f"a burst of {BURST_RATE} req/s of {REQUEST_S}s each")
    gen = serving.generator(ray.api, ray.namespace, serving.load_delivery(conformance), address, host,
                            rate=BURST_RATE, max_duration_s=int(timeouts.scale + timeouts.ready))  # fmt: skip
    with ScaleWatcher(ray, cluster, recording, serve_deployment=DEPLOYMENT) as watch:
        with behaviour("steady before the burst: 1 Serve replica on 1 worker"):
            steady = autoscaling.until(watch, _at(1), "1 Serve replica and 1 worker", timeouts.scale)
        proxies = next(s.serve_proxies for s in watch.samples if s.t == steady)
        with running(gen, timeouts.ready, check=False):
            watch.event("burst under way")
            with behaviour(f"the burst scales Serve to {MAX_REPLICAS} replicas on {MAX_REPLICAS} workers"):
                up = autoscaling.until(watch, _at(MAX_REPLICAS), f"{MAX_REPLICAS} replicas and workers",
                                       timeouts.scale)  # fmt: skip
        ended = watch.event("burst ends")
        if gen.records:  # the attack starts a little before the generator says so
            metrics["scale_up_s"] = round(up - watch.clock(gen.records[0].sent), 2)
        title = f"Serve autoscaling: a burst of {BURST_RATE} req/s"
        serving.save_load(
            conformance, request.node.nodeid, title, gen.records, metrics, BURST_RATE, old=cluster
        )
        replicas_down = _replicas_down(watch, profile, ended, metrics)
        idle = _proxies_drained(watch, profile, proxies, replicas_down, metrics)
        window = autoscaling.scale_down_window(profile, IDLE_TIMEOUT_S)
        autoscaling.scaled_down(watch, _at(1), "the autoscaler removes the idle workers", "1 worker",
                                idle, window, metrics)  # fmt: skip
    gen.check()  # a generator that did not keep its rate measured nothing
    watch.assert_evidence()
    most = max((s.replicas("RUNNING") or 0 for s in watch.samples), default=0)
    assert watch.max_pods(GROUP) <= MAX_REPLICAS and most <= MAX_REPLICAS, (
        f"up to {watch.max_pods(GROUP)} workers and {most} replicas, over maxReplicas={MAX_REPLICAS}"
    )
    failed = [r for r in gen.records if not r.ok]
    assert not failed, f"{len(failed)} failed requests during the burst: {analysis.error_details(failed)}"


def _replicas_down(watch: ScaleWatcher, profile: Profile, ended: float, metrics: dict[str, float]) -> float:
    """When (the watcher's clock) Serve is back to 1 replica, the others stopped and gone (their
    workers idle from then on): within downscale_delay_s, plus the look-back period its average
    of requests in flight needs to fall, plus graceful_shutdown_timeout_s, plus the profile's slack."""
    slack = profile.thresholds["scale_down_slack_s"]
    bound = DOWNSCALE_DELAY_S + LOOK_BACK_S + SHUTDOWN_S + slack
    with behaviour(
        f"Serve goes back to 1 replica within downscale_delay_s={DOWNSCALE_DELAY_S} + "
        f"look_back_period_s={LOOK_BACK_S} + graceful_shutdown_timeout_s={SHUTDOWN_S} + {slack:.0f}s "
        "(profile thresholds.scale_down_slack_s)"
    ):
        down = autoscaling.until(watch, lambda s: s.replicas() == 1, "1 Serve replica", bound)
    metrics["replicas_down_s"] = round(down - ended, 2)
    return down


def _proxies_drained(
    watch: ScaleWatcher, profile: Profile, steady: int | None, since: float, metrics: dict[str, float]
) -> float:
    """When (the watcher's clock) Serve's proxies are back to the `steady` count, those of the
    nodes without a replica drained and gone: from then on those workers are idle. Serve's
    behaviour, not KubeRay's, bounded by its draining period plus the profile's slack."""
    slack = profile.thresholds["scale_down_slack_s"]
    with behaviour(
        f"Serve drains the proxies of the workers it no longer uses within {PROXY_DRAIN_S}s + {slack:.0f}s"
    ):
        drained = autoscaling.until(watch, lambda s: s.serve_proxies == steady, f"{steady} Serve proxies",
                                    PROXY_DRAIN_S + slack)  # fmt: skip
    metrics["proxies_drained_s"] = round(drained - since, 2)
    return drained
