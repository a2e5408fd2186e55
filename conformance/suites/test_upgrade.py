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

The steps the checks share (a RayService under load, the upgrade around it, its waits and
judgements) are in upgrades.py; the rollback matrix's in rollbacks.py, the suspend checks' in
suspensions.py.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from conformance.exclusive import BEFORE_LOAD
from conformance.fixtures import Check
from conformance.kube import rayservice as rs
from conformance.kube.wait import behaviour, holds_for, poll_until, wait_for
from conformance.load import analysis, traffic
from conformance.suites import ray_processes, rollbacks, serving, suspensions, upgrades
from conformance.suites.rollbacks import Rollback
from conformance.suites.upgrades import SERVE_LABEL

# Every check here measures failed requests under load, so none shares the machine (exclusive.py).
pytestmark = [
    pytest.mark.area("upgrade"),
    pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD),
]

NAME = "echo"
# Short, so a check does not wait the default minute; the check measures that it is honoured.
DELETION_DELAY_S = 10
# The step plans KubeRay's own e2e tests use (stepSizePercent, intervalSeconds, maxSurgePercent).
PLANS = [
    pytest.param(100, 1, 100, id="step100-interval1-surge100"),
    pytest.param(25, 5, 50, id="step25-interval5-surge50"),
    pytest.param(5, 10, 25, id="step5-interval10-surge25"),
]


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME, deletion_delay_s=DELETION_DELAY_S)


# How long the load goes on after a resumed RayService first answers: the answers the check
# then asserts come only from the resumed cluster (2 s of slack for the data plane, then these).
RESUMED_WINDOW_S = 15


@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177, 1245)
@pytest.mark.smoke
def test_new_cluster_upgrade_under_load(check: Check, base: dict[str, Any]) -> None:
    """Catches: a RayCluster spec change that starts no upgrade or never promotes (#1245), the old
    cluster deleted before rayClusterDeletionDelaySeconds or long after it, answers from the old
    cluster after promotion, failed requests over the budget (#2177)."""
    service = upgrades.behind_own_gateway(check, {**base, "upgrade_type": "NewCluster"})
    metrics, old = check.metrics, service.old
    with service.upgrading("NewCluster upgrade under load") as sampler:
        patched = service.respec(generation="2")
        new = service.wait_promoted()
        seen_promoted = time.time()
        deleted = service.wait_deleted(old)
    records = service.gen.records
    # Read from the samples once sampling stopped: the watch may see the promotion first.
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = serving.max_served_step(records, new)
    service.gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert upgrades.seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert any(s.pending == new for s in sampler.samples), f"{new} was never the pending cluster"
    service.assert_deleted_after_delay(deleted, promoted)
    serving.assert_all_from(records, promoted, new, "after promotion")
    service.assert_within_budget(records)


# After a promotion, the load goes on this long, so that answers after it can be judged.
PROMOTED_WINDOW_S = 10
# Answers sooner than this after the promotion was seen are not judged (the data plane follows).
DATA_PLANE_S = 2
# A RayService with upgrades off is watched this long for a pending cluster after a spec change.
NO_UPGRADE_HOLD_S = 30


@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177)
def test_cluster_spec_and_serve_config_changed_together_switch_only_at_promotion(
    check: Check, base: dict[str, Any]
) -> None:
    """A RayCluster spec and a Serve config changed in one patch (NewCluster): the new config goes
    to the new cluster only, and the old cluster serves the old config until the promotion.

    Catches: the new Serve config applied to the old cluster in place (answers v2 from it), the old
    config deployed on the new cluster, traffic moved before the promotion, answers from the old
    cluster after it, or failed requests over the budget (#2177)."""
    service = upgrades.behind_own_gateway(check, {**base, "upgrade_type": "NewCluster"})
    metrics, old = check.metrics, service.old
    title = "cluster spec and Serve config changed together (NewCluster)"
    with service.upgrading(title) as sampler:
        patched = service.respec(generation="2", message="v2", serve_config=True)
        new = service.wait_promoted()
        seen_promoted = time.time()
        time.sleep(PROMOTED_WINDOW_S)  # poll-interval: a load window after the promotion
    records = service.gen.records
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    service.gen.check()  # a generator that did not keep its rate measured nothing
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
    service.assert_within_budget(records)


# The new cluster's head is held back this long by an init container, as in KubeRay's own
# TestOldHeadPodFailDuringUpgrade, so the old head fails while the new cluster is still pending.
PENDING_HOLD_S = 30
# The Ray process that answers the serve Service on a head (Serve's HTTP proxy actor).
SERVE_PROXY = "ray::ProxyActor"


@pytest.mark.requires("gateway_api")
def test_old_head_failing_mid_upgrade_leaves_the_rayservice_not_ready_until_the_new_cluster_serves(
    check: Check, base: dict[str, Any]
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
    service = upgrades.behind_own_gateway(check, {**base, "upgrade_type": "NewCluster"})
    ray, timeouts, metrics, old = check.ray, check.timeouts, check.metrics, service.old
    old_head, serve_svc = ray.head_pod(old), f"{NAME}-serve-svc"
    with behaviour(f"the serve Service {serve_svc} has the old head as its endpoint"):
        serving.wait_serve_endpoints(ray, serve_svc, old_head, "the old head", timeouts.ready)
    marks: list[tuple[float, str]] = []
    with service.upgrading("old head failing during a NewCluster upgrade", marks) as sampler:
        patched = service.respec(generation="2", head_init_sleep_s=PENDING_HOLD_S)
        marks.append((patched, "cluster spec changed"))
        service.wait_started(timeouts.ready)
        ray_processes.freeze(ray, old_head, SERVE_PROXY, timeouts.apply)
        failed = time.time()
        marks.append((failed, f"Serve proxy hung in the old head {old_head.metadata.name}"))
        with behaviour("KubeRay takes the old head out of the serve Service"):
            wait_for(
                ray.core.list_namespaced_pod,
                lambda pod: (pod.metadata.labels or {}).get(SERVE_LABEL) == "false",
                what=f"{SERVE_LABEL}=false on the old head",
                timeout=timeouts.ready,
                describe=upgrades.serve_label,
                namespace=ray.namespace,
                field_selector=f"metadata.name={old_head.metadata.name}",
            )
        metrics["old_head_unlabelled_s"] = round(time.time() - failed, 2)
        upgrades.not_ready_before_promotion(ray, NAME, old, timeouts.ready)
        metrics["not_ready_s"] = round(time.time() - failed, 2)
        marks.append((time.time(), "RayService not Ready"))
        new = service.wait_promoted()
        seen_promoted = time.time()
        new_head = ray.head_pod(new)
        with behaviour(f"the serve Service {serve_svc} has the new head as its endpoint"):
            serving.wait_serve_endpoints(ray, serve_svc, new_head, "the new head", timeouts.ready)
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
    records = service.gen.records
    promoted = traffic.promotion(sampler.samples, new).at or seen_promoted
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["failed_to_promoted_s"] = round(promoted - failed, 2)
    metrics["outage_s"] = traffic.outage_s(records)
    service.gen.check()  # a generator that did not keep its rate measured nothing
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
    check: Check, base: dict[str, Any]
) -> None:
    """With `upgradeStrategy.type: None`, a RayCluster spec and a Serve config changed together:
    the config is applied in place on the active cluster; the cluster spec change is not rolled out
    (no pending cluster, the active cluster's spec as it was).

    Catches: upgrades not turned off by type None (a pending cluster, a promotion), the cluster
    spec change written into the active cluster, the Serve config not applied, answers from
    another cluster, or failed requests over the budget."""
    service = upgrades.behind_own_gateway(check, {**base, "upgrade_type": "None"})
    ray, timeouts, metrics, old = check.ray, check.timeouts, check.metrics, service.old
    title = "upgradeStrategy None: cluster spec and Serve config changed together"
    head_before = upgrades.head_template(ray, old)
    with service.upgrading(title) as sampler:
        patched = service.respec(generation="2", message="v2", serve_config=True)
        with behaviour("the new Serve config answers through the Gateway"):
            poll_until(
                lambda: serving.answers(serving.probe(ray, service.gen, service.address, service.host), "v2"),
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
    records = service.gen.records
    service.gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert not upgraded, f"with upgradeStrategy None: {upgraded}"
    assert not [s for s in sampler.samples if s.pending], (
        "with upgradeStrategy None, a pending cluster was made"
    )
    assert upgrades.head_template(ray, old) == head_before, (
        f"the cluster spec change was written into the active cluster {old}'s head group"
    )
    answered = [r for r in records if r.ok]
    assert {r.backend for r in answered} == {old}, (
        f"answers came from {sorted({r.backend for r in answered})}"
    )
    assert answered[0].version == "v1" and answered[-1].version == "v2", (
        f"first and last answers said {answered[0].version!r} and {answered[-1].version!r}, not v1 and v2"
    )
    service.assert_within_budget(records)


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
@pytest.mark.kuberay_issue(2177)
@pytest.mark.parametrize(("step", "interval", "surge"), PLANS)
@pytest.mark.smoke("step100-interval1-surge100")
def test_incremental_upgrade_under_load(
    step: int, interval: int, surge: int, check: Check, base: dict[str, Any]
) -> None:
    """Catches: traffic moved by more than stepSizePercent, sooner than intervalSeconds or back
    again; targetCapacity over maxSurgePercent or traffic over capacity; promotion before the
    full shift; the old cluster deleted outside its delay; answers that do not follow the route
    weights; failed requests over the budget (#2177, PR #3166)."""
    profile, metrics = check.profile, check.metrics
    service = upgrades.behind_kuberay_gateway(
        check, upgrades.incremental_values(base, profile, step, interval, surge)
    )
    old = service.old
    with service.upgrading(
        f"incremental upgrade: step {step}%, every {interval}s, surge {surge}%"
    ) as sampler:
        patched = service.respec(generation="2")
        new = service.wait_promoted()
        seen_promoted = time.time()
        deleted = service.wait_deleted(old)
    records = service.gen.records
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
    service.gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert upgrades.seen(sampler, "UpgradeInProgress"), "UpgradeInProgress=True was never observed"
    assert not steps.violations, "; ".join(steps.violations)
    assert not capacity.violations, "; ".join(capacity.violations[:5])
    problem = traffic.promoted_at_full_shift(promotion, old, new)
    assert not problem, problem
    upgrades.assert_one_pending_cluster(sampler.samples, new)
    service.assert_deleted_after_delay(deleted, promoted)
    tolerance = profile.thresholds["traffic_share_tolerance_percent"]
    shares = traffic.check_shares(windows, tolerance, allowance)  # too few answers: a harness error
    assert not shares.violations, "answers did not follow the route weights: " + "; ".join(shares.violations)
    service.assert_within_budget(records)


# --- rolling back an incremental upgrade (rollbacks.py) -------------------------------------------

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


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade")
@pytest.mark.kuberay_issue(4109, 4989, 2177)
@pytest.mark.parametrize("case", ROLLBACKS)
def test_reverting_the_spec_mid_upgrade_rolls_back(
    case: Rollback, check: Check, base: dict[str, Any]
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
    ray, timeouts, metrics = check.ray, check.timeouts, check.metrics
    values = upgrades.incremental_values(base, check.profile, *case.plan)
    service = upgrades.behind_kuberay_gateway(check, values)
    old = service.old
    title = f"rollback ({check.case}): step {case.plan[0]}%, every {case.plan[1]}s"
    marks: list[tuple[float, str]] = []
    with service.upgrading(title, marks) as sampler:
        marks.append((serving.respec(ray, rollbacks.spec(values, "B"), serve_config=True), "spec B"))
        moving = rollbacks.wait_pending_at(ray, NAME, *case.at, timeouts.upgrade)
        pending = rs.pending_cluster(moving)
        # Before any traffic moved, the RayCluster may not exist yet.
        pending_uid = ray.get("rayclusters", pending)["metadata"]["uid"] if case.at != (0, 0) else ""
        if case.crash_pending:
            marks.append(
                (rollbacks.lose_pending_head(ray, NAME, pending, metrics), f"{pending}'s head deleted")
            )
        active_before = upgrades.active_percent(moving)
        reverted = serving.respec(ray, rollbacks.spec(values, "A"), serve_config=True)
        marks.append((reverted, "spec A again"))
        if case.at != (0, 0):
            rollbacks.wait_rolling_back(ray, NAME, active_before, timeouts.upgrade)
        if case.then:
            marks.append(
                (
                    serving.respec(ray, rollbacks.spec(values, case.then), serve_config=True),
                    f"spec {case.then}",
                )
            )
        final = rollbacks.wait_converged(ray, NAME, old, case, timeouts.upgrade)
        converged = time.time()
        pending_uid_at_convergence = (
            rollbacks.uid_or_gone(ray, pending) if not case.then and pending_uid else ""
        )
        active = rs.active_cluster(final)
        # The cluster that lost last: the original one once B or C is promoted, else the pending one.
        gone = old if case.then else pending
        deleted = service.wait_deleted(gone) if active != gone else 0.0
    records = service.gen.records
    metrics["revert_to_converged_s"] = round(converged - reverted, 2)
    metrics["pending_percent_at_revert"] = upgrades.pending_percent(moving)
    if deleted:
        metrics["deleted_after_converged_s"] = round(deleted - converged, 2)
    service.gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    rollbacks.assert_final_cluster(ray, case, active, old, pending, pending_uid)
    if pending_uid_at_convergence:
        rollbacks.assert_pending_kept(pending, pending_uid, pending_uid_at_convergence, DELETION_DELAY_S)
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
    service.assert_deleted_after_delay(deleted, converged, "the rollback or promotion")
    rollbacks.assert_answers(records, case, old, active, converged)
    if case.crash_pending:
        after = [r for r in records if r.sent > converged + 2 and not r.ok]
        assert not after, f"{len(after)} failed requests after the rollback completed"
    else:
        service.assert_within_budget(records)


# --- suspending mid incremental upgrade (suspensions.py) ------------------------------------------

# Fast enough that the resumed upgrade finishes in well under a minute, slow enough (a step every
# 5 s) that a paused migration is seen as such in the window below.
SUSPEND_PLAN = (25, 5, 50)  # stepSizePercent, intervalSeconds, maxSurgePercent
# How long the suspended state is watched for anything to move: three migration intervals.
SUSPENDED_WINDOW_S = 3 * SUSPEND_PLAN[1]


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade", "kuberay>=1.6.1", "kuberay<1.7.0")
@pytest.mark.kuberay_issue(4686, 4878, 2177)
def test_suspending_mid_incremental_upgrade_holds_only_the_pending_cluster(
    check: Check, base: dict[str, Any]
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
    ray, timeouts, metrics = check.ray, check.timeouts, check.metrics
    step, interval, surge = SUSPEND_PLAN
    service = upgrades.behind_kuberay_gateway(
        check, upgrades.incremental_values(base, check.profile, step, interval, surge)
    )
    old = service.old
    old_head = ray.head_pod(old).metadata.uid
    title = f"rayClusterConfig.suspend mid incremental upgrade: step {step}%, every {interval}s"
    marks: list[tuple[float, str]] = []
    with service.upgrading(title, marks) as sampler:
        patched = service.respec(generation="2")
        marks.append((patched, "spec change"))
        new = rs.pending_cluster(service.wait_started(timeouts.upgrade))
        pending_uid, suspended = suspensions.suspend_running_pending(check, NAME, sampler, new)
        marks.append((suspended, "rayClusterConfig.suspend=true"))
        suspensions.assert_only_pending_suspended(ray, old, new, old_head, SUSPENDED_WINDOW_S)
        resumed = suspensions.set_cluster_suspend(ray, NAME, False)
        marks.append((resumed, "rayClusterConfig.suspend=false"))
        promoted_cluster = service.wait_promoted()
        seen_promoted = time.time()
        same_pending = ray.get("rayclusters", promoted_cluster)["metadata"]["uid"] == pending_uid
        deleted = service.wait_deleted(old)
    records = service.gen.records
    promotion = traffic.promotion(sampler.samples, promoted_cluster)
    promoted = promotion.at or seen_promoted
    held = traffic.held_while_paused(sampler.samples, old, new, suspended, resumed)
    steps = traffic.check_steps(sampler.samples, promoted_cluster, step, interval)
    metrics["upgrade_s"] = round(promoted - patched, 2)
    metrics["resume_to_promotion_s"] = round(promoted - resumed, 2)
    metrics["suspended_s"] = round(resumed - suspended, 2)
    metrics["old_cluster_deleted_after_promotion_s"] = round(deleted - promoted, 2)
    metrics["max_step_observed_percent"] = steps.max_step
    service.gen.check()  # a generator that did not keep its rate measured nothing
    serving.assert_sampled(sampler, metrics)
    assert not held.violations, "while suspended: " + "; ".join(held.violations)
    assert promoted_cluster == new and same_pending, (
        f"{promoted_cluster} was promoted, not the pending cluster {new} resumed in place"
    )
    assert not steps.violations, "; ".join(steps.violations)
    problem = traffic.promoted_at_full_shift(promotion, old, new)
    assert not problem, problem
    service.assert_deleted_after_delay(deleted, promoted)
    # Two seconds for the data plane, as after a promotion.
    paused = [r for r in analysis.between(records, suspended + 2, resumed) if r.ok]
    others = {r.backend for r in paused} - {old}
    assert paused and not others, f"while suspended, answers came from {others or 'nobody'}, not {old}"
    serving.assert_all_from(records, promoted, new, "after promotion")
    service.assert_within_budget(records)


# After resuming, a load of its own runs this long at the address KubeRay's recreated Gateway
# publishes: every answer must come from the resumed cluster, with the upgraded config's message.
RESUMED_LOAD_S = 10


@pytest.mark.requires("gateway_api", "gate:RayServiceIncrementalUpgrade", "kuberay>=1.7.0")
@pytest.mark.kuberay_issue(4878, 2177)
def test_suspending_the_rayservice_mid_incremental_upgrade_removes_it_until_resumed(
    check: Check, base: dict[str, Any]
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
    ray, timeouts, metrics = check.ray, check.timeouts, check.metrics
    step, interval, surge = SUSPEND_PLAN
    service = upgrades.behind_kuberay_gateway(
        check, upgrades.incremental_values(base, check.profile, step, interval, surge)
    )
    old, gen = service.old, service.gen
    marks: list[tuple[float, str]] = []
    with service.upgrading("spec.suspend mid incremental upgrade", marks) as sampler:
        patched = service.respec(generation="2", message="v2", serve_config=True)
        marks.append((patched, "spec change (cluster and Serve config)"))
        service.wait_started(timeouts.upgrade)
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
        address = upgrades.kuberay_gateway(ray, NAME, timeouts)
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
    after = suspensions.resumed_load(check, address, RESUMED_LOAD_S)
    metrics.update(analysis.summarize(after).metrics(prefix="resumed_"))
    assert left == "gone"
    assert states.get("Ready") == "False" and states.get("UpgradeInProgress") == "False", states
    assert back not in ("", old), f"resumed on {back or 'no cluster'}, the pre-upgrade cluster's name"
    # handleSuspend keeps the condition, False with reason RayServiceResumed, once resumed.
    assert resumed_state.get("status") == "False", f"Suspended after the resume: {resumed_state}"
    budget = upgrades.budget(check)
    assert analysis.failed(before) <= budget, f"{analysis.failed(before)} failed requests before the suspend"
    suspensions.assert_serves_the_upgrade(after, back)
