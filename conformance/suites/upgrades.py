"""A RayService upgraded under load: the steps the upgrade area's checks share, written for any
check that upgrades a RayService under load (the operator and rayservice areas too).

`ServiceUnderLoad` is a Ready RayService behind a Gateway (one of the check's own, or the one
KubeRay makes for an incremental upgrade) with a load generator aimed at it. Its `upgrading()`
runs the load and samples the RayService's status (and HTTPRoute) around whatever the check does,
and saves the load's figures and timeline on the way out, whatever happened. Then come the waits of
an upgrade (started, promoted, the old cluster deleted) and the judgements of what was recorded
(the deletion delay, the failed-request budget, the pending clusters seen).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from conformance.fixtures import Check
from conformance.kube import rayservice as rs
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, wait_gone
from conformance.load.generator import LoadGenerator, running
from conformance.load.records import Record
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

# Promotion is known to the sampler's resolution, so "not before the delay" allows this much.
DELETION_EARLY_S = rs.MAX_READ_GAP_S


@dataclass(frozen=True)
class ServiceUnderLoad:
    """A Ready RayService and a load generator (not started) aimed at it, in one check."""

    check: Check
    values: dict[str, Any]  # manifests/ray/rayservice.yaml's values, as the RayService was created
    old: str  # the RayCluster active before the upgrade
    gen: LoadGenerator
    address: str  # the Gateway's address the load goes to
    host: str = ""  # the Host header the load sends ("" at KubeRay's own Gateway)
    route: str = ""  # an HTTPRoute sampled with the status (KubeRay's own, in an incremental upgrade)

    @property
    def name(self) -> str:
        return self.values["name"]

    @property
    def deletion_delay_s(self) -> int:
        """rayClusterDeletionDelaySeconds, as the RayService was created with it."""
        return self.values["deletion_delay_s"]

    @contextmanager
    def upgrading(self, title: str, marks: list[tuple[float, str]] | None = None) -> Iterator[rs.Sampler]:
        """Load and status sampling around an upgrade. On the way out, whatever happened, the load
        metrics and the timeline are saved (with `marks`, what the check did and when, as events).
        The check then records its own figures and calls `gen.check()` (the generator's
        self-check, a harness error) before its assertions."""
        check = self.check
        sampler = rs.Sampler(check.ray, self.name, route=self.route)
        try:
            with running(self.gen, check.timeouts.ready, check=False), sampler:
                yield sampler
        finally:
            new = next((s.pending for s in sampler.samples if s.pending not in ("", self.old)), "")
            serving.save_load(check.environment, check.nodeid, title, self.gen.records, check.metrics,
                              serving.UPGRADE_RATE, samples=sampler.samples, old=self.old, new=new,
                              marks=marks or [])  # fmt: skip

    def respec(self, serve_config: bool = False, **changes: Any) -> float:
        """The RayService's cluster spec (with `serve_config` its Serve config too) patched to its
        values with `changes`; when the patch was sent."""
        return serving.respec(self.check.ray, {**self.values, **changes}, serve_config=serve_config)

    def wait_promoted(self) -> str:
        """The RayCluster promoted in place of `old`, once no cluster is pending (timeouts.upgrade)."""
        check = self.check
        return rs.active_cluster(
            serving.wait_promoted(check.ray, self.name, self.old, check.timeouts.upgrade)
        )

    def wait_started(self, timeout: float) -> dict[str, Any]:
        return wait_upgrade_started(self.check.ray, self.name, timeout)

    def wait_deleted(self, cluster: str) -> float:
        """Wait (from now: the moment `cluster` stopped being active or pending) for it to be gone,
        no longer than rayClusterDeletionDelaySeconds plus the profile's slack; when it went."""
        delay, bound = self.deletion_delay_s, deletion_bound_s(self.check.profile, self.deletion_delay_s)
        with behaviour(
            f"RayCluster {cluster} is deleted within rayClusterDeletionDelaySeconds={delay}"
            f" + {bound - delay:.0f}s (profile thresholds.deletion_delay_slack_s)"
        ):
            wait_gone(
                self.check.ray.list_fn("rayclusters"),
                what=f"RayCluster {cluster}",
                timeout=bound,
                field_selector=f"metadata.name={cluster}",
            )
        return time.time()

    def assert_deleted_after_delay(self, deleted: float, promoted: float, what: str = "promotion") -> None:
        delay = self.deletion_delay_s
        gap, bound = deleted - promoted, deletion_bound_s(self.check.profile, delay)
        assert gap >= delay - DELETION_EARLY_S, (
            f"the cluster went {gap:.1f}s after {what}, before rayClusterDeletionDelaySeconds={delay}"
        )
        assert gap <= bound, (
            f"the cluster went {gap:.1f}s after {what}, later than rayClusterDeletionDelaySeconds="
            f"{delay} + {bound - delay:.0f}s of slack"
        )

    def assert_within_budget(self, records: list[Record]) -> None:
        assert_within_budget(self.check, records)


# --- a RayService made ready, with a load aimed at it ---------------------------------------------


def behind_own_gateway(check: Check, values: dict[str, Any]) -> ServiceUnderLoad:
    """A Ready RayService behind a Gateway of its own, and a load generator (not started) aimed at
    it for as long as an upgrade may take."""
    ray, timeouts = check.ray, check.timeouts
    svc, address, host = serving.ready_behind_own_gateway(
        ray, values, check.profile.gateway_class, timeouts, check.metrics
    )
    delivery = serving.load_delivery(check.environment)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, host, max_duration_s=int(timeouts.upgrade)
    )
    return ServiceUnderLoad(check, values, rs.active_cluster(svc), gen, address, host)


def behind_kuberay_gateway(check: Check, values: dict[str, Any]) -> ServiceUnderLoad:
    """A Ready incremental RayService behind KubeRay's Gateway, and a load generator (not started)
    aimed at the Gateway's address; its HTTPRoute is sampled with the status."""
    ray, timeouts, name = check.ray, check.timeouts, values["name"]
    started = time.monotonic()
    rs.create(ray, values)
    with behaviour("the RayService becomes Ready with its Serve application RUNNING"):
        svc = rs.wait_ready(ray, name, timeouts.ready)
    check.metrics["ready_s"] = round(time.monotonic() - started, 2)
    old = rs.active_cluster(svc)
    address = kuberay_gateway(ray, name, timeouts)
    delivery = serving.load_delivery(check.environment)
    gen = serving.generator(ray.api, ray.namespace, delivery, address, max_duration_s=int(timeouts.upgrade))
    return ServiceUnderLoad(check, values, old, gen, address, route=f"{name}-httproute")


def incremental_values(base: dict[str, Any], profile: Profile, step: int, interval: int, surge: int) -> dict:
    """A RayService's values for NewClusterWithIncrementalUpgrade: stepSizePercent, intervalSeconds
    and maxSurgePercent, through the profile's GatewayClass."""
    return {
        **base,
        "upgrade_type": rs.INCREMENTAL,
        "gateway_class": profile.gateway_class,
        "autoscaling": True,
        "step_percent": step,
        "interval_s": interval,
        "max_surge_percent": surge,
    }


def kuberay_gateway(ray: Ray, name: str, timeouts: Timeouts) -> str:
    """KubeRay's own Gateway and HTTPRoute of RayService `name`, checked as the upgrade needs
    them; the address."""
    gateways = rs.Gateways(ray.api, ray.namespace)
    with behaviour(f"KubeRay's Gateway {name}-gateway and HTTPRoute {name}-httproute are ready"):
        address = gateways.wait_programmed(f"{name}-gateway", timeouts.ready)
        gateways.wait_route_ready(f"{name}-httproute", f"{name}-gateway", timeouts.ready)
    rs.wait_sole_catch_all(ray.api, ray.namespace, timeouts.cleanup)
    return address


# --- the waits and state of an upgrade -----------------------------------------------------------


def wait_upgrade_started(ray: Ray, name: str, timeout: float) -> dict[str, Any]:
    with behaviour("a pending RayCluster appears with UpgradeInProgress"):
        return ray.wait(
            "rayservices",
            name,
            lambda s: bool(rs.pending_cluster(s)) and rs.conditions(s).get("UpgradeInProgress") == "True",
            what="a pending RayCluster and UpgradeInProgress=True",
            timeout=timeout,
            describe=rs.describe,
        )


def pending_percent(svc: dict[str, Any]) -> int:
    return svc.get("status", {}).get("pendingServiceStatus", {}).get("trafficRoutedPercent") or 0


def active_percent(svc: dict[str, Any]) -> int:
    return svc.get("status", {}).get("activeServiceStatus", {}).get("trafficRoutedPercent") or 0


def head_template(ray: Ray, cluster: str) -> dict[str, Any]:
    """The pod template of `cluster`'s head group, as its RayCluster spec has it."""
    return ray.get("rayclusters", cluster)["spec"]["headGroupSpec"]["template"]


# --- judging what was recorded -------------------------------------------------------------------


def deletion_bound_s(profile: Profile, delay_s: int) -> float:
    return delay_s + profile.thresholds["deletion_delay_slack_s"]


def budget(check: Check) -> int:
    """The profile's failed-request budget of an upgrade, recorded with the metrics."""
    allowed = check.profile.thresholds["upgrade_failed_requests"]
    check.metrics["failed_requests_budget"] = allowed
    return allowed


def assert_within_budget(check: Check, records: list[Record]) -> None:
    allowed = budget(check)
    failed = int(check.metrics.get("failed_requests", 0))
    summary = serving.analysis.summarize(records)
    assert failed <= allowed, f"{failed} failed requests, budget {allowed}: {summary.describe()}"


def seen(sampler: rs.Sampler, kind: str) -> bool:
    """Condition `kind` was True in some status sample."""
    return any(s.conditions.get(kind) == "True" for s in sampler.samples)


def assert_one_pending_cluster(samples: list[Any], promoted: str) -> None:
    """Every pending cluster sampled is the one promoted: a spurious rollback, then an upgrade to
    another new cluster, would otherwise pass (only the promoted cluster's series is judged)."""
    pending = list(dict.fromkeys(s.pending for s in samples if s.pending))
    assert pending == [promoted], f"pending clusters in order: {pending}; promoted: {promoted}"


# --- an old head failing mid upgrade -------------------------------------------------------------

SERVE_LABEL = "ray.io/serve"  # KubeRay's label: the head is behind the serve Service


def serve_label(pod: Any) -> str:
    return f"{pod.metadata.name}: {SERVE_LABEL}={(pod.metadata.labels or {}).get(SERVE_LABEL)}"


def not_ready_before_promotion(ray: Ray, name: str, old: str, timeout: float) -> dict[str, Any]:
    """RayService `name` once it is not Ready with `old` still active, or once `old` is no longer
    active (promoted without ever saying so: the check fails on it)."""
    with behaviour("the RayService reports not Ready while the old cluster still serves nothing"):
        svc = ray.wait(
            "rayservices",
            name,
            lambda s: rs.active_cluster(s) != old or rs.conditions(s).get("Ready") == "False",
            what=f"Ready=False with {old} still active",
            timeout=timeout,
            describe=rs.describe,
        )
    assert rs.active_cluster(svc) == old, f"promoted to {rs.active_cluster(svc)} without reporting not Ready"
    return svc
