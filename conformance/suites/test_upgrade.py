"""Area upgrade: RayService upgrades under constant load through the Gateway API.

A RayCluster spec change (an env var of the head) makes KubeRay build a new cluster and move
traffic to it: all at once (NewCluster) or step by step through the HTTPRoute it owns
(NewClusterWithIncrementalUpgrade). Each check runs an open-model load the whole time, samples
the RayService status and the HTTPRoute, and writes a per-second timeline to
`<run-dir>/timelines/<check>.json` (format: conformance/load/traffic.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance.environment import Environment
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, wait_gone
from conformance.load import traffic
from conformance.load.generator import LoadGenerator, running
from conformance.load.records import Record
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("upgrade")

NAME = "echo"
# Short, so a check does not wait the default minute; the check measures that it is honoured.
DELETION_DELAY_S = 10
# The share of answers from the new cluster may differ from its route weight by this much (in
# percentage points) in a stretch where the weights held still.
DEFAULT_SHARE_TOLERANCE = 15.0
# The step plans KubeRay's own e2e tests use (stepSizePercent, intervalSeconds, maxSurgePercent).
PLANS = [
    pytest.param(100, 1, 100, id="step100-interval1-surge100"),
    pytest.param(25, 5, 50, id="step25-interval5-surge50"),
    pytest.param(5, 10, 25, id="step5-interval10-surge25"),
]


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME, deletion_delay_s=DELETION_DELAY_S)


def _respec(ray: Ray, values: dict[str, Any]) -> float:
    """Patch the RayCluster spec to `values`; return when it was sent (epoch seconds)."""
    spec = render("ray/rayservice.yaml", **values)["spec"]
    ray.patch("rayservices", NAME, {"spec": {"rayClusterConfig": spec["rayClusterConfig"]}})
    return time.time()


def _wait_promoted(ray: Ray, old: str, timeout: float) -> dict[str, Any]:
    with behaviour("the pending RayCluster is promoted"):
        return ray.wait(
            "rayservices",
            NAME,
            lambda s: rs.active_cluster(s) not in ("", old) and not rs.pending_cluster(s),
            what=f"a new RayCluster to replace {old} as the active one",
            timeout=timeout,
            describe=rs.describe,
        )


def _wait_deleted(ray: Ray, cluster: str, timeouts: Timeouts) -> float:
    with behaviour(f"RayCluster {cluster} is deleted after rayClusterDeletionDelaySeconds"):
        wait_gone(
            ray.list_fn("rayclusters"),
            what=f"RayCluster {cluster}",
            timeout=DELETION_DELAY_S + timeouts.cleanup,
            field_selector=f"metadata.name={cluster}",
        )
    return time.time()


def _budget(profile: Profile, metrics: dict[str, float]) -> int:
    budget = int(profile.thresholds.get("upgrade_failed_requests", 0))
    metrics["failed_requests_budget"] = budget
    return budget


def _finish(
    conformance: Environment,
    request: pytest.FixtureRequest,
    title: str,
    records: list[Record],
    sampler: rs.Sampler,
    old: str,
    new: str,
    metrics: dict[str, float],
) -> None:
    """Metrics and the timeline, written before any assertion so a failed check has them too."""
    serving.load_metrics(records, metrics, serving.UPGRADE_RATE)
    start = records[0].sent if records else time.time()
    serving.record_timeline(
        conformance, request.node.nodeid, title, records, sampler.samples, start, old, new
    )


@contextmanager
def _under_load(
    conformance: Environment,
    request: pytest.FixtureRequest,
    ray: Ray,
    gen: LoadGenerator,
    title: str,
    old: str,
    timeouts: Timeouts,
    metrics: dict[str, float],
    route: str = "",
) -> Iterator[rs.Sampler]:
    """Load and status sampling around an upgrade. On the way out, whatever happened, the load
    metrics and the timeline are saved. The check then records its own figures and calls
    `gen.check()` (the generator's self-check, a harness error) before its assertions."""
    sampler = rs.Sampler(ray, NAME, route=route)
    try:
        with running(gen, timeouts.ready, check=False), sampler:
            yield sampler
    finally:
        new = next((s.pending for s in sampler.samples if s.pending not in ("", old)), "")
        _finish(conformance, request, title, gen.records, sampler, old, new, metrics)


def _assert_deleted_after_delay(deleted: float, promoted: float) -> None:
    # Two seconds of slack: promotion is known to the sampler's resolution.
    gap = deleted - promoted
    assert gap >= DELETION_DELAY_S - 2, f"the old cluster went {gap:.0f}s after promotion, before the delay"


def _assert_all_from(records: list[Record], since: float, cluster: str, when: str) -> None:
    # Two seconds for the data plane to follow the switch.
    late = [r for r in records if r.sent > since + 2 and r.ok]
    others = {r.backend for r in late} - {cluster}
    assert late and not others, f"{when}, answers came from {others or 'nobody'} instead of {cluster}"


def _pending_percent(svc: dict[str, Any]) -> int:
    return svc.get("status", {}).get("pendingServiceStatus", {}).get("trafficRoutedPercent") or 0


def _seen(sampler: rs.Sampler, kind: str) -> bool:
    return any(s.conditions.get(kind) == "True" for s in sampler.samples)


@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177, 1245)
def test_new_cluster_upgrade_under_load(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    values = {**base, "upgrade_type": "NewCluster"}
    svc, address, host = serving.ready_behind_own_gateway(
        ray, values, profile.gateway_class, timeouts, metrics
    )
    old = rs.active_cluster(svc)
    image = serving.load_image(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, image, address, host, max_duration_s=int(timeouts.upgrade)
    )
    title = "NewCluster upgrade under load"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics) as sampler:
        patched = _respec(ray, {**values, "generation": "2"})
        new = rs.active_cluster(_wait_promoted(ray, old, timeouts.upgrade))
        seen_promoted = time.time()
        deleted = _wait_deleted(ray, old, timeouts)
    records = gen.records
    # Read from the samples once sampling stopped: the watch may see the promotion first.
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = serving.max_served_step(records, new)
    gen.check()  # a generator that did not keep its rate measured nothing
    assert _seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert any(s.pending == new for s in sampler.samples), f"{new} was never the pending cluster"
    _assert_deleted_after_delay(deleted, promoted)
    _assert_all_from(records, promoted, new, "after promotion")
    _assert_within_budget(records, profile, metrics)


def _assert_within_budget(records: list[Record], profile: Profile, metrics: dict[str, float]) -> None:
    budget = _budget(profile, metrics)
    failed = int(metrics.get("failed_requests", 0))
    summary = serving.analysis.summarize(records)
    assert failed <= budget, f"{failed} failed requests, budget {budget}: {summary.describe()}"


def _incremental_values(base: dict[str, Any], profile: Profile, step: int, interval: int, surge: int) -> dict:
    return {
        **base,
        "upgrade_type": rs.INCREMENTAL,
        "gateway_class": profile.gateway_class,
        "autoscaling": True,
        "step_percent": step,
        "interval_s": interval,
        "max_surge_percent": surge,
    }


def _kuberay_gateway(ray: Ray, timeouts: Timeouts) -> str:
    """KubeRay's own Gateway and HTTPRoute, checked as the upgrade needs them; the address."""
    gateways = rs.Gateways(ray.api, ray.namespace)
    with behaviour(f"KubeRay's Gateway {NAME}-gateway and HTTPRoute {NAME}-httproute are ready"):
        address = gateways.wait_programmed(f"{NAME}-gateway", timeouts.ready)
        gateways.wait_route_ready(f"{NAME}-httproute", f"{NAME}-gateway", timeouts.ready)
    rs.wait_sole_catch_all(ray.api, ray.namespace, timeouts.cleanup)
    return address


def _ready_incremental(
    ray: Ray, values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> str:
    started = time.monotonic()
    rs.create(ray, values)
    with behaviour("the RayService becomes Ready with its Serve application RUNNING"):
        svc = rs.wait_ready(ray, NAME, timeouts.ready)
    metrics["ready_s"] = round(time.monotonic() - started, 2)
    return rs.active_cluster(svc)


def _incremental_under_way(
    ray: Ray, conformance: Environment, values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> tuple[str, LoadGenerator]:
    """A ready incremental RayService behind KubeRay's Gateway: its cluster and a generator
    (not started) aimed at the Gateway's address."""
    old = _ready_incremental(ray, values, timeouts, metrics)
    address = _kuberay_gateway(ray, timeouts)
    image = serving.load_image(conformance)
    return old, serving.generator(
        ray.api, ray.namespace, image, address, max_duration_s=int(timeouts.upgrade)
    )


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
@pytest.mark.kuberay_issue(2177)
@pytest.mark.parametrize(("step", "interval", "surge"), PLANS)
def test_incremental_upgrade_under_load(
    step: int,
    interval: int,
    surge: int,
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    values = _incremental_values(base, profile, step, interval, surge)
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    title = f"incremental upgrade: step {step}%, every {interval}s, surge {surge}%"
    route = f"{NAME}-httproute"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route) as sampler:
        patched = _respec(ray, {**values, "generation": "2"})
        new = rs.active_cluster(_wait_promoted(ray, old, timeouts.upgrade))
        seen_promoted = time.time()
        deleted = _wait_deleted(ray, old, timeouts)
    records = gen.records
    # Read from the samples once sampling stopped: the watch may see the promotion first.
    promotion = traffic.promotion(sampler.samples, new)
    promoted = promotion.at or seen_promoted
    steps = traffic.check_steps(sampler.samples, new, step, interval)
    capacity = traffic.check_capacity(sampler.samples, surge)
    windows = traffic.share_windows(records, sampler.samples, new)
    deviation = traffic.max_share_deviation(windows)
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = steps.max_step
    if steps.min_interval_s is not None:
        metrics["min_step_interval_s"] = steps.min_interval_s
    if deviation is not None:
        metrics["max_share_deviation_percent"] = round(deviation, 1)
    gen.check()  # a generator that did not keep its rate measured nothing
    assert _seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert not steps.violations, "; ".join(steps.violations)
    assert not capacity.violations, "; ".join(capacity.violations[:5])
    problem = traffic.promoted_at_full_shift(promotion, old, new)
    assert not problem, problem
    _assert_deleted_after_delay(deleted, promoted)
    tolerance = float(profile.thresholds.get("traffic_share_tolerance_percent", DEFAULT_SHARE_TOLERANCE))
    off = [w for w in windows if abs(w.served_percent - w.weight_percent) > tolerance]
    assert not off, "answers did not follow the route weights: " + "; ".join(
        f"{w.served_percent:.0f}% served at weight {w.weight_percent:.0f}% ({w.requests} answers)"
        for w in off
    )
    _assert_within_budget(records, profile, metrics)


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
def test_reverting_the_spec_mid_upgrade_rolls_back(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    values = _incremental_values(base, profile, 5, 10, 25)  # slow enough to be caught mid-way
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    title = "rollback mid incremental upgrade"
    route = f"{NAME}-httproute"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route) as sampler:
        _respec(ray, {**values, "generation": "2"})
        with behaviour("traffic starts moving to the pending cluster"):
            moving = ray.wait(
                "rayservices",
                NAME,
                lambda s: _pending_percent(s) >= 10,
                what="10% of traffic on the pending cluster",
                timeout=timeouts.upgrade,
                describe=rs.describe,
            )
        new = rs.pending_cluster(moving)
        reverted = _respec(ray, values)
        with behaviour("RollbackInProgress appears after the revert"):
            ray.wait(
                "rayservices",
                NAME,
                lambda s: rs.conditions(s).get("RollbackInProgress") == "True",
                what="RollbackInProgress=True",
                timeout=timeouts.apply,
                describe=rs.describe,
            )
        with behaviour("traffic returns to the original cluster and the pending one goes"):
            ray.wait(
                "rayservices",
                NAME,
                lambda s: (
                    rs.active_cluster(s) == old
                    and not rs.pending_cluster(s)
                    and rs.conditions(s).get("RollbackInProgress") != "True"
                ),
                what=f"all traffic back on {old}, no pending cluster",
                timeout=timeouts.upgrade,
                describe=rs.describe,
            )
        rolled_back = time.time()
        _wait_deleted(ray, new, timeouts)
    records = gen.records
    metrics["rollback_s"] = round(rolled_back - reverted, 2)
    after = [s for s in sampler.samples if s.at >= reverted]
    back = traffic.percent_series(after, new)
    gen.check()  # a generator that did not keep its rate measured nothing
    assert all(b[1] <= a[1] for a, b in itertools.pairwise(back)), f"{new} gained traffic after the revert"
    _assert_all_from(records, rolled_back, old, "after the rollback")
    _assert_within_budget(records, profile, metrics)
