"""Area upgrade: RayService upgrades under constant load through the Gateway API.

A RayCluster spec change (an env var of the head) makes KubeRay build a new cluster and move
traffic to it: all at once (NewCluster) or step by step through the HTTPRoute it owns
(NewClusterWithIncrementalUpgrade). Each check runs an open-model load the whole time, samples
the RayService status and the HTTPRoute, and writes a per-second timeline to
`<run-dir>/timelines/<check>.json` (format: conformance/load/traffic.py).

Bounds come from the configured values plus the profile's slack: the old cluster goes no sooner
than rayClusterDeletionDelaySeconds after promotion and no later than `deletion_delay_slack_s`
after that. Every check asserts that its status history is complete (kube/sampling.py) and that
its step, capacity and share analyses had something to judge.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from conformance.environment import Environment
from conformance.exclusive import BEFORE_LOAD
from conformance.kube import rayservice as rs
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, poll_until, wait_for, wait_gone
from conformance.load import analysis, traffic
from conformance.load.generator import LoadGenerator, running
from conformance.load.records import Record
from conformance.profiles import Profile
from conformance.suites import ray_processes, serving
from conformance.timeouts import Timeouts

# Every check here measures failed requests under load, so none shares the machine (exclusive.py).
pytestmark = [
    pytest.mark.area("upgrade"),
    pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD),
]

NAME = "echo"
# Short, so a check does not wait the default minute; the check measures that it is honoured.
DELETION_DELAY_S = 10
# Promotion is known to the sampler's resolution, so "not before the delay" allows this much.
DELETION_EARLY_S = rs.MAX_READ_GAP_S
# The step plans KubeRay's own e2e tests use (stepSizePercent, intervalSeconds, maxSurgePercent).
PLANS = [
    pytest.param(100, 1, 100, id="step100-interval1-surge100"),
    pytest.param(25, 5, 50, id="step25-interval5-surge50"),
    pytest.param(5, 10, 25, id="step5-interval10-surge25"),
]


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME, deletion_delay_s=DELETION_DELAY_S)


def _deletion_bound_s(profile: Profile) -> float:
    return DELETION_DELAY_S + profile.thresholds["deletion_delay_slack_s"]


def _wait_deleted(ray: Ray, cluster: str, profile: Profile) -> float:
    """Wait (from now: the moment `cluster` stopped being active or pending) for it to be gone,
    no longer than rayClusterDeletionDelaySeconds plus the profile's slack; when it went."""
    bound = _deletion_bound_s(profile)
    with behaviour(
        f"RayCluster {cluster} is deleted within rayClusterDeletionDelaySeconds={DELETION_DELAY_S}"
        f" + {bound - DELETION_DELAY_S:.0f}s (profile thresholds.deletion_delay_slack_s)"
    ):
        wait_gone(
            ray.list_fn("rayclusters"),
            what=f"RayCluster {cluster}",
            timeout=bound,
            field_selector=f"metadata.name={cluster}",
        )
    return time.time()


def _budget(profile: Profile, metrics: dict[str, float]) -> int:
    budget = profile.thresholds["upgrade_failed_requests"]
    metrics["failed_requests_budget"] = budget
    return budget


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
    marks: list[tuple[float, str]] | None = None,
) -> Iterator[rs.Sampler]:
    """Load and status sampling around an upgrade. On the way out, whatever happened, the load
    metrics and the timeline are saved (with `marks`, what the check did and when, as events).
    The check then records its own figures and calls `gen.check()` (the generator's
    self-check, a harness error) before its assertions."""
    sampler = rs.Sampler(ray, NAME, route=route)
    try:
        with running(gen, timeouts.ready, check=False), sampler:
            yield sampler
    finally:
        new = next((s.pending for s in sampler.samples if s.pending not in ("", old)), "")
        serving.save_load(conformance, request.node.nodeid, title, gen.records, metrics, serving.UPGRADE_RATE,
                          samples=sampler.samples, old=old, new=new, marks=marks or [])  # fmt: skip


def _assert_deleted_after_delay(
    deleted: float, promoted: float, profile: Profile, what: str = "promotion"
) -> None:
    gap, bound = deleted - promoted, _deletion_bound_s(profile)
    assert gap >= DELETION_DELAY_S - DELETION_EARLY_S, (
        f"the cluster went {gap:.1f}s after {what}, before rayClusterDeletionDelaySeconds={DELETION_DELAY_S}"
    )
    assert gap <= bound, (
        f"the cluster went {gap:.1f}s after {what}, later than rayClusterDeletionDelaySeconds="
        f"{DELETION_DELAY_S} + {bound - DELETION_DELAY_S:.0f}s of slack"
    )


# How long the load goes on after a resumed RayService first answers: the answers the check
# then asserts come only from the resumed cluster (2 s of slack for the data plane, then these).
RESUMED_WINDOW_S = 15


def _pending_percent(svc: dict[str, Any]) -> int:
    return svc.get("status", {}).get("pendingServiceStatus", {}).get("trafficRoutedPercent") or 0


def _seen(sampler: rs.Sampler, kind: str) -> bool:
    return any(s.conditions.get(kind) == "True" for s in sampler.samples)


def _serving_with_a_load(
    ray: Ray,
    conformance: Environment,
    values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> tuple[str, LoadGenerator, tuple[str, str]]:
    """A Ready RayService behind a Gateway of its own, and a load generator (not started) aimed at
    it for as long as an upgrade may take: (its active cluster, the generator, (address, host))."""
    svc, address, host = serving.ready_behind_own_gateway(
        ray, values, profile.gateway_class, timeouts, metrics
    )
    delivery = serving.load_delivery(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, host, max_duration_s=int(timeouts.upgrade)
    )
    return rs.active_cluster(svc), gen, (address, host)


@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177, 1245)
@pytest.mark.smoke
def test_new_cluster_upgrade_under_load(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """Catches: a RayCluster spec change that starts no upgrade or never promotes (#1245), the old
    cluster deleted before rayClusterDeletionDelaySeconds or long after it, answers from the old
    cluster after promotion, failed requests over the budget (#2177)."""
    values = {**base, "upgrade_type": "NewCluster"}
    old, gen, _ = _serving_with_a_load(ray, conformance, values, profile, timeouts, metrics)
    title = "NewCluster upgrade under load"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2"})
        new = rs.active_cluster(serving.wait_promoted(ray, NAME, old, timeouts.upgrade))
        seen_promoted = time.time()
        deleted = _wait_deleted(ray, old, profile)
    records = gen.records
    # Read from the samples once sampling stopped: the watch may see the promotion first.
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = serving.max_served_step(records, new)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert _seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert any(s.pending == new for s in sampler.samples), f"{new} was never the pending cluster"
    _assert_deleted_after_delay(deleted, promoted, profile)
    serving.assert_all_from(records, promoted, new, "after promotion")
    _assert_within_budget(records, profile, metrics)


# After a promotion, the load goes on this long, so that answers after it can be judged.
PROMOTED_WINDOW_S = 10
# Answers sooner than this after the promotion was seen are not judged (the data plane follows).
DATA_PLANE_S = 2
# A RayService with upgrades off is watched this long for a pending cluster after a spec change.
NO_UPGRADE_HOLD_S = 30


def _head_template(ray: Ray, cluster: str) -> dict[str, Any]:
    """The pod template of `cluster`'s head group, as its RayCluster spec has it."""
    return ray.get("rayclusters", cluster)["spec"]["headGroupSpec"]["template"]


@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177)
def test_cluster_spec_and_serve_config_changed_together_switch_only_at_promotion(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """A RayCluster spec and a Serve config changed in one patch (NewCluster): the new config goes
    to the new cluster only, and the old cluster serves the old config until the promotion.

    Catches: the new Serve config applied to the old cluster in place (answers v2 from it), the old
    config deployed on the new cluster, traffic moved before the promotion, answers from the old
    cluster after it, or failed requests over the budget (#2177)."""
    values = {**base, "upgrade_type": "NewCluster"}
    old, gen, _ = _serving_with_a_load(ray, conformance, values, profile, timeouts, metrics)
    title = "cluster spec and Serve config changed together (NewCluster)"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2", "message": "v2"}, serve_config=True)
        new = rs.active_cluster(serving.wait_promoted(ray, NAME, old, timeouts.upgrade))
        seen_promoted = time.time()
        time.sleep(PROMOTED_WINDOW_S)  # poll-interval: a load window after the promotion
    records = gen.records
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    served = {(r.backend, r.version) for r in records if r.ok}
    assert served <= {(old, "v1"), (new, "v2")}, (
        f"answers (cluster, message): {sorted(served)}; only ({old}, v1) and ({new}, v2) may answer"
    )
    # The serve Service may switch just before the status says so: one status read earlier.
    early = [r for r in records if r.ok and r.sent < promoted - rs.MAX_READ_GAP_S and r.backend != old]
    lead = promoted - early[0].sent if early else 0.0
    assert not early, f"{len(early)} answers from {new} before the promotion, the first {lead:.1f}s before it"
    serving.assert_all_from(records, promoted, new, "after promotion")
    _assert_within_budget(records, profile, metrics)


# The new cluster's head is held back this long by an init container, as in KubeRay's own
# TestOldHeadPodFailDuringUpgrade, so the old head fails while the new cluster is still pending.
PENDING_HOLD_S = 30
# The Ray process that answers the serve Service on a head (Serve's HTTP proxy actor).
SERVE_PROXY = "ray::ProxyActor"
SERVE_LABEL = "ray.io/serve"  # KubeRay's label: the head is behind the serve Service


def _serve_label(pod: Any) -> str:
    return f"{pod.metadata.name}: {SERVE_LABEL}={(pod.metadata.labels or {}).get(SERVE_LABEL)}"


def _not_ready_before_promotion(ray: Ray, old: str, timeout: float) -> dict[str, Any]:
    """The RayService once it is not Ready with `old` still active, or once `old` is no longer
    active (promoted without ever saying so: the check fails on it)."""
    with behaviour("the RayService reports not Ready while the old cluster still serves nothing"):
        svc = ray.wait(
            "rayservices",
            NAME,
            lambda s: rs.active_cluster(s) != old or rs.conditions(s).get("Ready") == "False",
            what=f"Ready=False with {old} still active",
            timeout=timeout,
            describe=rs.describe,
        )
    assert rs.active_cluster(svc) == old, f"promoted to {rs.active_cluster(svc)} without reporting not Ready"
    return svc


@pytest.mark.requires("gateway_api")
def test_old_head_failing_mid_upgrade_leaves_the_rayservice_not_ready_until_the_new_cluster_serves(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """A NewCluster upgrade under load; once the new cluster is pending, the Serve proxy of the old
    (active) head hangs (SIGSTOP, for as long as the pod lives). KubeRay takes the old head out of
    the serve Service, reports the RayService not Ready (no serve endpoint) while the upgrade goes
    on, promotes the new cluster, puts its head behind the serve Service and is Ready again.

    Sources (v1.7.0): test/e2erayservice/rayservice_upgrade_test.go TestOldHeadPodFailDuringUpgrade
    (iptables drops the old head's port 8000; its pending head sleeps 30 s in an init container);
    controllers/ray/rayservice_controller.go `updateHeadPodServeLabel` (the head's ray.io/serve
    label follows its proxy's health check) and the Ready condition (ZeroServeEndpoints).

    Catches: an old head whose proxy no longer answers kept behind the serve Service (its label
    still true, requests sent into a hung proxy until promotion), a RayService still reported Ready
    with no endpoint that answers, an upgrade that stalls because the active cluster is unhealthy,
    the serve Service not moved to the new head, answers from the old cluster or failed requests
    after the promotion."""
    values = {**base, "upgrade_type": "NewCluster"}
    old, gen, _ = _serving_with_a_load(ray, conformance, values, profile, timeouts, metrics)
    old_head, service = ray.head_pod(old), f"{NAME}-serve-svc"
    with behaviour(f"the serve Service {service} has the old head as its endpoint"):
        serving.wait_serve_endpoints(ray, service, old_head, "the old head", timeouts.ready)
    marks: list[tuple[float, str]] = []
    title = "old head failing during a NewCluster upgrade"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, marks=marks) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2", "head_init_sleep_s": PENDING_HOLD_S})
        marks.append((patched, "cluster spec changed"))
        _wait_upgrade_started(ray, timeouts.ready)
        ray_processes.freeze(ray, old_head, SERVE_PROXY, timeouts.apply)
        failed = time.time()
        marks.append((failed, f"Serve proxy hung in the old head {old_head.metadata.name}"))
        with behaviour("KubeRay takes the old head out of the serve Service"):
            wait_for(
                ray.core.list_namespaced_pod,
                lambda pod: (pod.metadata.labels or {}).get(SERVE_LABEL) == "false",
                what=f"{SERVE_LABEL}=false on the old head",
                timeout=timeouts.ready,
                describe=_serve_label,
                namespace=ray.namespace,
                field_selector=f"metadata.name={old_head.metadata.name}",
            )
        metrics["old_head_unlabelled_s"] = round(time.time() - failed, 2)
        _not_ready_before_promotion(ray, old, timeouts.ready)
        metrics["not_ready_s"] = round(time.time() - failed, 2)
        marks.append((time.time(), "RayService not Ready"))
        new = rs.active_cluster(serving.wait_promoted(ray, NAME, old, timeouts.upgrade))
        seen_promoted = time.time()
        new_head = ray.head_pod(new)
        with behaviour(f"the serve Service {service} has the new head as its endpoint"):
            serving.wait_serve_endpoints(ray, service, new_head, "the new head", timeouts.ready)
        with behaviour("the RayService is Ready again on the new cluster"):
            ray.wait(
                "rayservices",
                NAME,
                lambda s: rs.is_ready(s) and rs.active_cluster(s) == new,
                what=f"Ready with {new} active",
                timeout=timeouts.ready,
                describe=rs.describe,
            )
        time.sleep(PROMOTED_WINDOW_S)  # poll-interval: a load window after the promotion
    records = gen.records
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["failed_to_promoted_s"] = round(promoted - failed, 2)
    metrics["outage_s"] = traffic.outage_s(records)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    upgrading = [s for s in sampler.samples if s.active == old and s.pending == new]
    assert any(s.conditions.get("Ready") == "False" for s in upgrading), (
        "no status sample shows Ready=False while the upgrade was under way"
    )
    serving.assert_all_from(records, promoted, new, "after promotion")
    late = [r for r in records if r.sent > promoted + DATA_PLANE_S and not r.ok]
    assert not late, f"{len(late)} failed requests after the promotion: {analysis.error_details(late)}"


@pytest.mark.requires("gateway_api")
def test_upgrade_strategy_none_applies_the_serve_config_in_place_and_not_the_cluster_spec(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """With `upgradeStrategy.type: None`, a RayCluster spec and a Serve config changed together:
    the config is applied in place on the active cluster; the cluster spec change is not rolled out
    (no pending cluster, the active cluster's spec as it was).

    Catches: upgrades not turned off by type None (a pending cluster, a promotion), the cluster
    spec change written into the active cluster, the Serve config not applied, answers from
    another cluster, or failed requests over the budget."""
    values = {**base, "upgrade_type": "None"}
    old, gen, (address, host) = _serving_with_a_load(ray, conformance, values, profile, timeouts, metrics)
    title = "upgradeStrategy None: cluster spec and Serve config changed together"
    head_before = _head_template(ray, old)
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2", "message": "v2"}, serve_config=True)
        with behaviour("the new Serve config answers through the Gateway"):
            poll_until(
                lambda: serving.answers(serving.probe(ray, gen, address, host), "v2"),
                what="the app to answer with the new message",
                timeout=timeouts.upgrade,
                every=serving.PROBE_INTERVAL_S,
            )
        metrics["in_place_update_s"] = round(time.time() - patched, 2)
        upgraded = holds_for(
            ray.list_fn("rayservices"),
            lambda s: rs.active_cluster(s) == old and not rs.pending_cluster(s),
            what=f"RayService {NAME} keeps {old} active and makes no pending cluster",
            duration=NO_UPGRADE_HOLD_S,
            field_selector=f"metadata.name={NAME}",
        )
    records = gen.records
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert not upgraded, f"with upgradeStrategy None: {upgraded}"
    assert not [s for s in sampler.samples if s.pending], (
        "with upgradeStrategy None, a pending cluster was made"
    )
    assert _head_template(ray, old) == head_before, (
        f"the cluster spec change was written into the active cluster {old}'s head group"
    )
    answered = [r for r in records if r.ok]
    assert {r.backend for r in answered} == {old}, (
        f"answers came from {sorted({r.backend for r in answered})}"
    )
    assert answered[0].version == "v1" and answered[-1].version == "v2", (
        f"first and last answers said {answered[0].version!r} and {answered[-1].version!r}, not v1 and v2"
    )
    _assert_within_budget(records, profile, metrics)


def _assert_one_pending_cluster(samples: list[Any], promoted: str) -> None:
    """Every pending cluster sampled is the one promoted: a spurious rollback, then an upgrade to
    another new cluster, would otherwise pass (only the promoted cluster's series is judged)."""
    pending = list(dict.fromkeys(s.pending for s in samples if s.pending))
    assert pending == [promoted], f"pending clusters in order: {pending}; promoted: {promoted}"


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
    delivery = serving.load_delivery(conformance)
    return old, serving.generator(
        ray.api, ray.namespace, delivery, address, max_duration_s=int(timeouts.upgrade)
    )


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
@pytest.mark.kuberay_issue(2177)
@pytest.mark.parametrize(("step", "interval", "surge"), PLANS)
@pytest.mark.smoke("step100-interval1-surge100")
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
    """Catches: traffic moved by more than stepSizePercent, sooner than intervalSeconds or back
    again; targetCapacity over maxSurgePercent or traffic over capacity; promotion before the
    full shift; the old cluster deleted outside its delay; answers that do not follow the route
    weights; failed requests over the budget (#2177, PR #3166)."""
    values = _incremental_values(base, profile, step, interval, surge)
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    title = f"incremental upgrade: step {step}%, every {interval}s, surge {surge}%"
    route = f"{NAME}-httproute"
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2"})
        new = rs.active_cluster(serving.wait_promoted(ray, NAME, old, timeouts.upgrade))
        seen_promoted = time.time()
        deleted = _wait_deleted(ray, old, profile)
    records = gen.records
    # Read from the samples once sampling stopped: the watch may see the promotion first.
    promotion = traffic.promotion(sampler.samples, new)
    promoted = promotion.at or seen_promoted
    steps = traffic.check_steps(sampler.samples, new, step, interval)
    capacity = traffic.check_capacity(sampler.samples, surge)
    # The data plane applies a route change after it is written: only answers past this are judged.
    allowance = profile.thresholds["route_propagation_allowance_s"]
    windows = traffic.share_windows(records, sampler.samples, new, allowance)
    deviation = traffic.max_share_deviation(traffic.judged(windows))
    delays = traffic.propagation_delays(records, sampler.samples, new)
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = steps.max_step
    if steps.min_interval_s is not None:
        metrics["min_step_interval_s"] = steps.min_interval_s
    if deviation is not None:
        metrics["max_share_deviation_percent"] = round(deviation, 1)
    metrics["share_windows_judged"] = len(traffic.judged(windows))
    if delays:
        metrics["route_propagation_max_s"] = max(delays)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert _seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert not steps.violations, "; ".join(steps.violations)
    assert not capacity.violations, "; ".join(capacity.violations[:5])
    problem = traffic.promoted_at_full_shift(promotion, old, new)
    assert not problem, problem
    _assert_one_pending_cluster(sampler.samples, new)
    _assert_deleted_after_delay(deleted, promoted, profile)
    tolerance = profile.thresholds["traffic_share_tolerance_percent"]
    shares = traffic.check_shares(windows, tolerance, allowance)  # too few answers: a harness error
    assert not shares.violations, "answers did not follow the route weights: " + "; ".join(shares.violations)
    _assert_within_budget(records, profile, metrics)


# --- rolling back an incremental upgrade ----------------------------------------------------------


@dataclass(frozen=True)
class Rollback:
    """One case of KubeRay's rollback matrix (e2eincrementalupgrade's
    TestRayServiceIncrementalUpgradeRollback): spec B applied to a RayService on spec A, reverted
    to A once the pending cluster's traffic is within `at` (percent, inclusive), then, for `then`
    "B" or "C", a spec applied again once the rollback has given the active cluster traffic back."""

    plan: tuple[int, int, int]  # stepSizePercent, intervalSeconds, maxSurgePercent
    at: tuple[int, int]
    then: str = ""  # "" (A->B->A), "B" (the rollback cancelled) or "C" (a third spec)
    crash_pending: bool = False  # the pending cluster's head pod deleted just before the revert


ROLLBACKS = [
    pytest.param(Rollback((25, 2, 50), (1, 30)), id="early"),
    pytest.param(Rollback((25, 5, 50), (30, 70)), id="middle"),
    pytest.param(Rollback((25, 10, 50), (70, 99)), id="late"),
    # KubeRay 1.6.x treated a revert before any traffic moved like a third spec (PR #4989).
    pytest.param(
        Rollback((100, 1, 100), (0, 0)), id="before-traffic", marks=pytest.mark.requires("kuberay>=1.7.0")
    ),
    pytest.param(Rollback((5, 2, 25), (30, 70), then="B"), id="cancelled"),
    pytest.param(Rollback((5, 2, 25), (30, 70), then="C"), id="third-spec"),
    pytest.param(Rollback((25, 10, 50), (70, 99), crash_pending=True), id="pending-head-lost"),
]
# What each spec of a rollback case answers: its Serve config's message.
MESSAGES = {"A": "v1", "B": "v2", "C": "v3"}


def _spec(values: dict[str, Any], which: str) -> dict[str, Any]:
    """Spec A (as created), B or C: a RayCluster spec change and a Serve config change together."""
    return {**values, "generation": str(" ABC".index(which)), "message": MESSAGES[which]}


def _wait_pending_at(ray: Ray, low: int, high: int, timeout: float) -> dict[str, Any]:
    """The RayService once its pending cluster carries low..high percent of the traffic."""
    with behaviour(f"the pending cluster gets {low}-{high}% of the traffic"):
        return ray.wait(
            "rayservices",
            NAME,
            lambda s: bool(rs.pending_cluster(s)) and low <= _pending_percent(s) <= high,
            what=f"a pending RayCluster with {low}-{high}% of the traffic",
            timeout=timeout,
            describe=rs.describe,
        )


def _active_percent(svc: dict[str, Any]) -> int:
    return svc.get("status", {}).get("activeServiceStatus", {}).get("trafficRoutedPercent") or 0


def _wait_rolling_back(ray: Ray, active_before: int, timeout: float) -> None:
    """RollbackInProgress, and the active cluster given traffic back beyond `active_before`."""
    with behaviour("the revert starts a rollback that gives the active cluster traffic back"):
        ray.wait(
            "rayservices",
            NAME,
            lambda s: (
                rs.conditions(s).get("RollbackInProgress") == "True" and _active_percent(s) > active_before
            ),
            what=f"RollbackInProgress=True and the active cluster above {active_before}% of the traffic",
            timeout=timeout,
            describe=rs.describe,
        )


def _converged(svc: dict[str, Any]) -> bool:
    conditions = rs.conditions(svc)
    return (
        not rs.pending_cluster(svc)
        and _active_percent(svc) == 100
        and conditions.get("RollbackInProgress") != "True"
        and conditions.get("UpgradeInProgress") != "True"
    )


def _wait_converged(ray: Ray, old: str, case: Rollback, timeout: float) -> dict[str, Any]:
    """Converged on a spec applied after the revert means on another cluster than the original:
    on the way to C, KubeRay first completes the rollback to the original cluster."""
    done = (lambda s: _converged(s) and rs.active_cluster(s) != old) if case.then else _converged
    with behaviour(
        "the rollback or upgrade completes: one cluster, all the traffic, no condition in progress"
    ):
        return ray.wait(
            "rayservices",
            NAME,
            done,
            what="no pending cluster, 100% on the active one, no RollbackInProgress or UpgradeInProgress",
            timeout=timeout,
            describe=rs.describe,
        )


def _lose_pending_head(ray: Ray, pending: str, metrics: dict[str, float]) -> float:
    head = ray.head_pod(pending)
    ray.core.delete_namespaced_pod(head.metadata.name, ray.namespace, grace_period_seconds=0)
    metrics["pending_percent_at_head_loss"] = _pending_percent(ray.get("rayservices", NAME))
    return time.time()


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
@pytest.mark.kuberay_issue(4109, 4989, 2177)
@pytest.mark.parametrize("case", ROLLBACKS)
def test_reverting_the_spec_mid_upgrade_rolls_back(
    case: Rollback,
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """KubeRay's rollback matrix under load through its Gateway: spec B (a cluster spec and a Serve
    config) applied, then A again early, midway, late, before any traffic moved, or late just
    after the pending cluster lost its head: RollbackInProgress, traffic back on the original
    cluster by steps, the pending cluster deleted after the deletion delay, only v1 answers from
    the original cluster afterwards. Cancelled (A->B->A->B): the same pending cluster is promoted
    and answers v2. A third spec (A->B->A->C): the rollback completes, B goes, and a new cluster C
    is promoted and answers v3.

    Sources (v1.7.0): controllers/ray/rayservice_controller.go `reconcileRollbackState` (the three
    cases), `calculateTrafficRoutedPercent` (a rollback moves traffic back by stepSizePercent
    every intervalSeconds, whatever the pending cluster's health), `shouldCompleteIncrementalRollback`;
    PR #4109 (rollback), #4989 (a revert before any traffic moved).

    Catches: a revert that sets no RollbackInProgress, keeps moving traffic to the pending cluster,
    never gives all traffic back (or not while the pending cluster is down), leaves the pending
    cluster behind, deletes it before the rollback completes (at once, even if KubeRay then makes
    it anew) or deletes the original; a cancelled rollback that builds another cluster; a
    third spec promoted onto the stale pending cluster; the old cluster answering a new config;
    failed requests over the budget (outside the pending-head-lost case, where they are measured)."""
    values = _incremental_values(base, profile, *case.plan)
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    title = f"rollback ({request.node.callspec.id}): step {case.plan[0]}%, every {case.plan[1]}s"
    route, marks = f"{NAME}-httproute", []
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route, marks) as sampler:
        marks.append((serving.respec(ray, _spec(values, "B"), serve_config=True), "spec B"))
        moving = _wait_pending_at(ray, *case.at, timeouts.upgrade)
        pending = rs.pending_cluster(moving)
        # Before any traffic moved, the RayCluster may not exist yet.
        pending_uid = ray.get("rayclusters", pending)["metadata"]["uid"] if case.at != (0, 0) else ""
        if case.crash_pending:
            marks.append((_lose_pending_head(ray, pending, metrics), f"{pending}'s head deleted"))
        active_before = _active_percent(moving)
        reverted = serving.respec(ray, _spec(values, "A"), serve_config=True)
        marks.append((reverted, "spec A again"))
        if case.at != (0, 0):
            _wait_rolling_back(ray, active_before, timeouts.upgrade)
        if case.then:
            marks.append(
                (serving.respec(ray, _spec(values, case.then), serve_config=True), f"spec {case.then}")
            )
        final = _wait_converged(ray, old, case, timeouts.upgrade)
        converged = time.time()
        pending_uid_at_convergence = _uid_or_gone(ray, pending) if not case.then and pending_uid else ""
        active = rs.active_cluster(final)
        # The cluster that lost last: the original one once B or C is promoted, else the pending one.
        gone = old if case.then else pending
        deleted = _wait_deleted(ray, gone, profile) if active != gone else 0.0
    records = gen.records
    metrics["revert_to_converged_s"] = round(converged - reverted, 2)
    metrics["pending_percent_at_revert"] = _pending_percent(moving)
    if deleted:
        metrics["deleted_after_converged_s"] = round(deleted - converged, 2)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    _assert_final_cluster(ray, case, active, old, pending, pending_uid)
    if pending_uid_at_convergence:
        _assert_pending_kept(pending, pending_uid, pending_uid_at_convergence)
    if case.then != "B":  # A->B->A and A->B->A->C: the pending cluster never gains after the revert
        back = traffic.percent_series([s for s in sampler.samples if s.at >= reverted], pending)
        assert all(b[1] <= a[1] for a, b in itertools.pairwise(back)), (
            f"{pending} gained traffic after the revert"
        )
    if case.at == (0, 0):
        share = max((p for _, p in traffic.percent_series(sampler.samples, pending)), default=0)
        assert share == 0, (
            f"{pending} got {share}% of the traffic though the spec was reverted before any moved"
        )
    _assert_deleted_after_delay(deleted, converged, profile, "the rollback or promotion")
    _assert_answers(records, case, old, active, converged)
    if case.crash_pending:
        after = [r for r in records if r.sent > converged + 2 and not r.ok]
        assert not after, f"{len(after)} failed requests after the rollback completed"
    else:
        _assert_within_budget(records, profile, metrics)


def _uid_or_gone(ray: Ray, cluster: str) -> str:
    try:
        return ray.get("rayclusters", cluster)["metadata"]["uid"]
    except ApiException as exc:
        if exc.status != 404:
            raise
        return "gone"


def _assert_pending_kept(pending: str, uid_at_revert: str, uid_at_convergence: str) -> None:
    """The pending cluster rolled back from is the same object until the rollback completes: its
    deletion comes rayClusterDeletionDelaySeconds after that, never at the start of the rollback
    (KubeRay's RayService then makes one anew under the same name, which the later deletion hides)."""
    assert uid_at_convergence != "gone", (
        f"the pending cluster {pending} was gone when the rollback completed, "
        f"before rayClusterDeletionDelaySeconds={DELETION_DELAY_S}"
    )
    assert uid_at_convergence == uid_at_revert, (
        f"the pending cluster {pending} was deleted during the rollback and made anew (uid {uid_at_revert} "
        f"then {uid_at_convergence}), before rayClusterDeletionDelaySeconds={DELETION_DELAY_S}"
    )


def _assert_answers(records: list[Any], case: Rollback, old: str, active: str, converged: float) -> None:
    """The original cluster answers only v1; once converged, the final cluster answers its spec's."""
    if case.then != "C":
        # With a third spec, 1.7.0 was seen to apply C's Serve config to the original cluster
        # before C's own cluster took over (2026-12-05); neither documented nor refused upstream.
        answered = {r.version for r in records if r.ok and r.backend == old}
        assert answered <= {"v1"}, f"the original cluster {old} answered {sorted(answered)}, not only v1"
    expected = MESSAGES[case.then or "A"]
    serving.assert_all_from(records, converged, active, "once converged")
    late = {r.version for r in records if r.ok and r.sent > converged + 2}
    assert late == {expected}, f"once converged, answers said {sorted(late)}, not {expected}"


def _assert_final_cluster(
    ray: Ray, case: Rollback, active: str, old: str, pending: str, pending_uid: str
) -> None:
    if not case.then:
        assert active == old, f"after the rollback {active} is active, not the original {old}"
    elif case.then == "B":
        uid = ray.get("rayclusters", active)["metadata"]["uid"] if active == pending else ""
        assert uid == pending_uid, (
            f"after cancelling the rollback {active} is active, not the pending {pending}"
        )
    else:
        assert active not in (old, pending), f"the third spec ended on {active}, not on a cluster of its own"
        left = [c["metadata"]["name"] for c in ray.list_fn("rayclusters")()["items"]]
        assert pending not in left, f"the pending cluster {pending} of spec B is still there: {left}"


# --- suspending mid incremental upgrade ----------------------------------------------------------

# Fast enough that the resumed upgrade finishes in well under a minute, slow enough (a step every
# 5 s) that a paused migration is seen as such in the window below.
SUSPEND_PLAN = (25, 5, 50)  # stepSizePercent, intervalSeconds, maxSurgePercent
# How long the suspended state is watched for anything to move: three migration intervals.
SUSPENDED_WINDOW_S = 3 * SUSPEND_PLAN[1]


def _set_cluster_suspend(ray: Ray, suspend: bool) -> float:
    """Set spec.rayClusterConfig.suspend (what Kueue toggles); return when it was sent."""
    ray.patch("rayservices", NAME, {"spec": {"rayClusterConfig": {"suspend": suspend}}})
    return time.time()


def _wait_upgrade_started(ray: Ray, timeout: float) -> dict[str, Any]:
    with behaviour("a pending RayCluster appears with UpgradeInProgress"):
        return ray.wait(
            "rayservices",
            NAME,
            lambda s: bool(rs.pending_cluster(s)) and rs.conditions(s).get("UpgradeInProgress") == "True",
            what="a pending RayCluster and UpgradeInProgress=True",
            timeout=timeout,
            describe=rs.describe,
        )


def _suspend_running_pending(
    ray: Ray, sampler: rs.Sampler, new: str, timeouts: Timeouts, metrics: dict[str, float]
) -> tuple[str, float]:
    """Once the pending cluster runs (its head pod made, not one still to be created), suspend it
    through the RayService and wait until its pods are gone: (its uid, when the patch was sent)."""
    with behaviour(f"the pending RayCluster {new} gets a head pod"):
        wait_for(
            ray.core.list_namespaced_pod,
            lambda pod: True,
            what=f"a head pod of {new}",
            timeout=timeouts.ready,
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={new},ray.io/node-type=head",
        )
    uid = ray.get("rayclusters", new)["metadata"]["uid"]
    metrics["pending_pods_at_suspend"] = len(ray.pods(new))
    metrics["pending_percent_at_suspend"] = traffic.weight_at(sampler.samples, new, time.time()) or 0
    suspended = _set_cluster_suspend(ray, True)
    with behaviour(f"the pending RayCluster {new} is suspended in place"):
        ray.wait(
            "rayclusters",
            new,
            rs.cluster_suspended,
            what=f"RayCluster {new} suspended (no pods)",
            timeout=timeouts.cleanup,
            describe=rs.describe_cluster,
        )
    metrics["pending_suspended_s"] = round(time.time() - suspended, 2)
    return uid, suspended


def _assert_only_pending_suspended(ray: Ray, old: str, new: str, old_head: str) -> None:
    """For a window: `new` stays suspended without pods, `old` is not suspended and keeps its head,
    and no other RayCluster appears."""

    def holds(cluster: dict[str, Any]) -> bool:
        name = cluster["metadata"]["name"]
        suspend = bool(cluster.get("spec", {}).get("suspend"))
        return (name == old and not suspend) or (name == new and rs.cluster_suspended(cluster))

    broke = holds_for(
        ray.list_fn("rayclusters"),
        holds,
        what=f"{new} stays suspended, {old} is not, and no other RayCluster appears",
        duration=SUSPENDED_WINDOW_S,
    )
    assert not broke, f"while suspended: {broke} ({old} active, {new} pending)"
    left = [p.metadata.name for p in ray.pods(new) if p.metadata.deletion_timestamp is None]
    assert not left, f"the suspended RayCluster {new} still has pods: {left}"
    assert ray.head_pod(old).metadata.uid == old_head, f"the active RayCluster {old}'s head was replaced"


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade", "kuberay>=1.6.1", "kuberay<1.7.0")
@pytest.mark.kuberay_issue(4686, 4878, 2177)
def test_suspending_mid_incremental_upgrade_holds_only_the_pending_cluster(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """KubeRay 1.6.1 and 1.6.2: a RayService has no suspend of its own; `rayClusterConfig.suspend`
    (the field Kueue toggles) is applied in place to the existing RayClusters (PR #4739, fixing
    #4686). During an upgrade only the pending cluster is compared with the spec, so only it is
    suspended: its pods go, the active cluster keeps serving, no cluster is made and no rollback
    starts, and no traffic moves to it. Setting the field back resumes the same pending cluster
    and the upgrade completes.

    Sources (v1.6.2): controllers/ray/rayservice_controller.go `shouldUpdateCluster` (an
    active cluster is left alone while UpgradeInProgress; a suspend toggle updates in place),
    `reconcileRollbackState` (the in-place update rewrote the pending hash, so no rollback),
    `calculateTrafficRoutedPercent` (no migration while the pending cluster is not ready);
    apis/ray/v1/raycluster_types.go `Suspend` ("head pods and worker pods deleted");
    controllers/ray/raycluster_controller.go (state `suspended`, RayClusterSuspended).
    The maintainers call this a half-suspended RayService (PR #4841); 1.7.0 replaces it with a
    top-level `spec.suspend` (issue #4878, checked by the test below) and ignores
    `rayClusterConfig.suspend` once a cluster exists, hence not applicable from 1.7.0.
    Incremental upgrades: https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/rayservice-incremental-upgrade.html

    Catches: a suspend that also suspends or replaces the active cluster, starts a rollback or a
    new cluster, or moves traffic to the suspended one; a resume that makes a new pending cluster
    instead of resuming the same one, or an upgrade that then breaks its step plan or deletion delay.
    """
    step, interval, surge = SUSPEND_PLAN
    values = _incremental_values(base, profile, step, interval, surge)
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    old_head = ray.head_pod(old).metadata.uid
    title = f"rayClusterConfig.suspend mid incremental upgrade: step {step}%, every {interval}s"
    route, marks = f"{NAME}-httproute", []
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route, marks) as sampler:
        patched = serving.respec(ray, {**values, "generation": "2"})
        marks.append((patched, "spec change"))
        new = rs.pending_cluster(_wait_upgrade_started(ray, timeouts.upgrade))
        pending_uid, suspended = _suspend_running_pending(ray, sampler, new, timeouts, metrics)
        marks.append((suspended, "rayClusterConfig.suspend=true"))
        _assert_only_pending_suspended(ray, old, new, old_head)
        resumed = _set_cluster_suspend(ray, False)
        marks.append((resumed, "rayClusterConfig.suspend=false"))
        promoted_cluster = rs.active_cluster(serving.wait_promoted(ray, NAME, old, timeouts.upgrade))
        seen_promoted = time.time()
        same_pending = ray.get("rayclusters", promoted_cluster)["metadata"]["uid"] == pending_uid
        deleted = _wait_deleted(ray, old, profile)
    records = gen.records
    promotion = traffic.promotion(sampler.samples, promoted_cluster)
    promoted = promotion.at or seen_promoted
    held = traffic.held_while_paused(sampler.samples, old, new, suspended, resumed)
    steps = traffic.check_steps(sampler.samples, promoted_cluster, step, interval)
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["resume_to_promotion_s"] = round(promoted - resumed, 2)
    metrics["suspended_s"] = round(resumed - suspended, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = steps.max_step
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert not held.violations, "while suspended: " + "; ".join(held.violations)
    assert promoted_cluster == new and same_pending, (
        f"{promoted_cluster} was promoted, not the pending cluster {new} resumed in place"
    )
    assert not steps.violations, "; ".join(steps.violations)
    problem = traffic.promoted_at_full_shift(promotion, old, new)
    assert not problem, problem
    _assert_deleted_after_delay(deleted, promoted, profile)
    # Two seconds for the data plane, as after a promotion.
    paused = [r for r in analysis.between(records, suspended + 2, resumed) if r.ok]
    others = {r.backend for r in paused} - {old}
    assert paused and not others, f"while suspended, answers came from {others or 'nobody'}, not {old}"
    serving.assert_all_from(records, promoted, new, "after promotion")
    _assert_within_budget(records, profile, metrics)


# After resuming, a load of its own runs this long at the address KubeRay's recreated Gateway
# publishes: every answer must come from the resumed cluster, with the upgraded config's message.
RESUMED_LOAD_S = 10


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade", "kuberay>=1.7.0")
@pytest.mark.kuberay_issue(4878, 2177)
def test_suspending_the_rayservice_mid_incremental_upgrade_removes_it_until_resumed(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """KubeRay 1.7.0: `spec.suspend: true` on a RayService mid incremental upgrade makes it
    Suspending, then Suspended once every RayCluster, Service, its Gateway and HTTPRoute are
    deleted (Ready and UpgradeInProgress False); `false` resumes it on the spec as it is then
    (the upgraded one: a new cluster config and a new Serve config) and it becomes Ready and
    answers through a recreated Gateway again.

    Catches: a suspend that leaves owned objects behind or never reports Suspended; a resume
    that does not come back Ready, comes back on the pre-upgrade cluster or config, or answers
    with failures; failed requests before the suspend.

    Sources (v1.7.0): apis/ray/v1/rayservice_types.go `RayServiceSpec.Suspend`, conditions
    `Suspending`/`Suspended`; controllers/ray/rayservice_controller.go `handleSuspend` (status
    staged as Suspending, owned objects deleted by `deleteRayServiceOwnedResources`, then
    Suspended with Ready and UpgradeInProgress False; a resume sets Ready=False Initializing and
    reconciles the current spec anew); KubeRay's e2e test/e2eincrementalupgrade/
    rayservice_suspend_test.go `TestRayServiceSuspendDuringIncrementalUpgrade`; PR #4841, #4878.
    Not run on the local provider (it builds 1.6.2, which has no `spec.suspend`): unverified here.
    """
    step, interval, surge = SUSPEND_PLAN
    values = _incremental_values(base, profile, step, interval, surge)
    upgraded = {**values, "generation": "2", "message": "v2"}
    old, gen = _incremental_under_way(ray, conformance, values, timeouts, metrics)
    title = "spec.suspend mid incremental upgrade"
    route, marks = f"{NAME}-httproute", []
    with _under_load(conformance, request, ray, gen, title, old, timeouts, metrics, route, marks) as sampler:
        patched = serving.respec(ray, upgraded, serve_config=True)
        marks.append((patched, "spec change (cluster and Serve config)"))
        _wait_upgrade_started(ray, timeouts.upgrade)
        suspended = time.time()
        ray.patch("rayservices", NAME, {"spec": {"suspend": True}})
        marks.append((suspended, "spec.suspend=true"))
        with behaviour("the RayService becomes Suspended"):
            svc = ray.wait(
                "rayservices",
                NAME,
                lambda s: rs.conditions(s).get("Suspended") == "True",
                what="Suspended=True",
                timeout=timeouts.cleanup,
                describe=rs.describe,
            )
        metrics["suspend_s"] = round(time.time() - suspended, 2)
        with behaviour("everything KubeRay made for the RayService is deleted"):
            left = poll_until(
                lambda: "gone" if not rs.owned(ray, NAME) else None,
                what="no RayCluster, Service, Gateway or HTTPRoute of the RayService",
                timeout=timeouts.cleanup,
            )
        states = rs.conditions(svc)
        resumed = time.time()
        ray.patch("rayservices", NAME, {"spec": {"suspend": False}})
        marks.append((resumed, "spec.suspend=false"))
        with behaviour("the resumed RayService becomes Ready"):
            svc = rs.wait_ready(ray, NAME, timeouts.upgrade)
        metrics["resume_s"] = round(time.time() - resumed, 2)
        resumed_state = rs.condition(svc, "Suspended")
        address = _kuberay_gateway(ray, timeouts)
        back = rs.active_cluster(svc)

        def answered() -> bool | None:
            record = serving.probe(ray, gen, address)
            return True if serving.answers(record, "v2") and record and record.backend == back else None

        with behaviour(f"the resumed RayService answers through its Gateway from {back} with v2"):
            poll_until(
                answered, what=f"an answer from {back} with the upgraded message", timeout=timeouts.ready
            )
        answering = time.time()
        # The load stops when this block ends: keep it running for a window after the first answer,
        # or no record can be after it (the first 1.7.0 run failed on exactly that, the harness's fault).
        time.sleep(RESUMED_WINDOW_S)  # poll-interval: the observation window of the load
    records = gen.records
    before = analysis.between(records, 0, suspended)
    metrics["failed_before_suspend"] = analysis.failed(before)
    metrics["upgrade_s"] = round(answering - patched, 2)
    gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    after = _resumed_load(ray, conformance, address, timeouts)
    metrics.update(analysis.summarize(after).metrics(prefix="resumed_"))
    assert left == "gone"
    assert states.get("Ready") == "False" and states.get("UpgradeInProgress") == "False", states
    assert back not in ("", old), f"resumed on {back or 'no cluster'}, the pre-upgrade cluster's name"
    # handleSuspend keeps the condition, False with reason RayServiceResumed, once resumed.
    assert resumed_state.get("status") == "False", f"Suspended after the resume: {resumed_state}"
    budget = _budget(profile, metrics)
    assert analysis.failed(before) <= budget, f"{analysis.failed(before)} failed requests before the suspend"
    _assert_serves_the_upgrade(after, back)


def _assert_serves_the_upgrade(records: list[Record], cluster: str) -> None:
    """Every answer of the load after resuming came from `cluster` with the upgraded message v2."""
    summary = analysis.summarize(records)
    assert summary.failed == 0, f"after resuming: {summary.describe()}"
    served = {(r.backend, r.version) for r in records}
    assert served == {(cluster, "v2")}, (
        f"after resuming, answers (cluster, message) were {served}, not {(cluster, 'v2')}"
    )


def _resumed_load(ray: Ray, conformance: Environment, address: str, timeouts: Timeouts) -> list[Record]:
    """RESUMED_LOAD_S of load at `address` from a generator of its own; its records."""
    delivery = serving.load_delivery(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, rate=serving.PROBE_RATE, max_duration_s=RESUMED_LOAD_S,
        name="load-resumed",
    )  # fmt: skip
    gen.start(timeouts.ready)
    return gen.collect(timeouts.ready + RESUMED_LOAD_S)  # the attack ends by itself
