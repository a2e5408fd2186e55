"""Suspending a RayService mid incremental upgrade: `rayClusterConfig.suspend` (KubeRay 1.6.1 and
1.6.2, what Kueue toggles) and `spec.suspend` (1.7.0), the steps and judgements of test_upgrade.py's
two suspend checks."""

from __future__ import annotations

import time
from typing import Any

from conformance.fixtures import Check
from conformance.kube import rayservice as rs
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, wait_for
from conformance.load import analysis, traffic
from conformance.load.records import Record
from conformance.suites import serving


def set_cluster_suspend(ray: Ray, name: str, suspend: bool) -> float:
    """Set spec.rayClusterConfig.suspend (what Kueue toggles); return when it was sent."""
    ray.patch("rayservices", name, {"spec": {"rayClusterConfig": {"suspend": suspend}}})
    return time.time()


def suspend_running_pending(check: Check, name: str, sampler: rs.Sampler, new: str) -> tuple[str, float]:
    """Once the pending cluster runs (its head pod made, not one still to be created), suspend it
    through RayService `name` and wait until its pods are gone: (its uid, when the patch was sent)."""
    ray, timeouts, metrics = check.ray, check.timeouts, check.metrics
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
    suspended = set_cluster_suspend(ray, name, True)
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


def assert_only_pending_suspended(ray: Ray, old: str, new: str, old_head: str, window_s: float) -> None:
    """For `window_s`: `new` stays suspended without pods, `old` is not suspended and keeps its
    head, and no other RayCluster appears."""

    def holds(cluster: dict[str, Any]) -> bool:
        name = cluster["metadata"]["name"]
        suspend = bool(cluster.get("spec", {}).get("suspend"))
        return (name == old and not suspend) or (name == new and rs.cluster_suspended(cluster))

    broke = holds_for(
        ray.list_fn("rayclusters"),
        holds,
        what=f"{new} stays suspended, {old} is not, and no other RayCluster appears",
        duration=window_s,
    )
    assert not broke, f"while suspended: {broke} ({old} active, {new} pending)"
    left = [p.metadata.name for p in ray.pods(new) if p.metadata.deletion_timestamp is None]
    assert not left, f"the suspended RayCluster {new} still has pods: {left}"
    assert ray.head_pod(old).metadata.uid == old_head, f"the active RayCluster {old}'s head was replaced"


def resumed_load(check: Check, address: str, seconds: int) -> list[Record]:
    """`seconds` of load at `address` from a generator of its own; its records."""
    ray, timeouts = check.ray, check.timeouts
    delivery = serving.load_delivery(check.environment)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, rate=serving.PROBE_RATE, max_duration_s=seconds,
        name="load-resumed",
    )  # fmt: skip
    gen.start(timeouts.ready)
    return gen.collect(timeouts.ready + seconds)  # the attack ends by itself


def assert_serves_the_upgrade(records: list[Record], cluster: str) -> None:
    """Every answer of the load after resuming came from `cluster` with the upgraded message v2."""
    summary = analysis.summarize(records)
    assert summary.failed == 0, f"after resuming: {summary.describe()}"
    served = {(r.backend, r.version) for r in records}
    assert served == {(cluster, "v2")}, (
        f"after resuming, answers (cluster, message) were {served}, not {(cluster, 'v2')}"
    )
