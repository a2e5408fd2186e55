"""Seeded faults of area upgrade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .faults_rayservice import (
    JSON_PATCH,
    ORIGINATED_FROM_NAME,
    RAY_GROUP,
    RAY_VERSION,
    made_for_a_rayservice,
)
from .rogue import Rogue, before_checks

UPGRADE = "test_upgrade.py::"
INCREMENTAL = UPGRADE + "test_incremental_upgrade_under_load"
STAMP = "/status/pendingServiceStatus/lastTrafficMigratedTime"


@before_checks
def stale_crd_without_deletion_delay(rogue: Rogue) -> None:
    """A RayService CRD that predates rayClusterDeletionDelaySeconds: the API server drops it, and
    KubeRay deletes an upgraded-away cluster after its default 60 s instead of the 10 s asked."""
    spec = {"rayClusterDeletionDelaySeconds": 10, "rayClusterConfig": raycluster_spec()}
    drop_crd_fields(rogue, "rayservices", [["rayClusterDeletionDelaySeconds"]], probe("RayService", spec))


def migration_stamps_moved_back_by_the_interval(rogue: Rogue) -> None:
    """KubeRay waits intervalSeconds from `pendingServiceStatus.lastTrafficMigratedTime` before the
    next step of an incremental upgrade. Each time it records a migration there, the record is
    moved intervalSeconds back, so KubeRay moves the next step at its next reconcile (about 2 s
    later), as an operator that keeps no interval would; the step size and capacity stay its own."""
    written: set[tuple[str, str]] = set()
    for svc in rogue.ray_objects("rayservices"):
        meta, status = svc["metadata"], svc.get("status") or {}
        pending = status.get("pendingServiceStatus") or {}
        stamp, interval = pending.get("lastTrafficMigratedTime"), _interval_s(svc)
        upgrading = pending.get("rayClusterName") and (status.get("activeServiceStatus") or {}).get(
            "rayClusterName"
        )
        if not (upgrading and stamp and interval) or (meta["uid"], stamp) in written:
            continue
        earlier = _seconds_before(stamp, interval)
        patch = [
            {"op": "test", "path": STAMP, "value": stamp},
            {"op": "replace", "path": STAMP, "value": earlier},
        ]
        try:
            rogue.custom.patch_namespaced_custom_object_status(
                RAY_GROUP, RAY_VERSION, meta["namespace"], "rayservices", meta["name"], patch,
                _content_type=JSON_PATCH,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status in (404, 409, 422):  # gone, or KubeRay moved on meanwhile: the next event
                continue
            raise
        written.add((meta["uid"], earlier))
        rogue.acted(
            f"moved lastTrafficMigratedTime of {meta['namespace']}/{meta['name']}'s pending "
            f"{pending['rayClusterName']} back {interval}s: {stamp} -> {earlier}"
        )


def _interval_s(svc: dict[str, Any]) -> int:
    strategy = (svc.get("spec") or {}).get("upgradeStrategy") or {}
    return int((strategy.get("clusterUpgradeOptions") or {}).get("intervalSeconds") or 0)


def _seconds_before(stamp: str, seconds: int) -> str:
    """An RFC 3339 time (whole seconds, as metav1.Time writes it) `seconds` earlier."""
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC) - timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def suspend_the_active_cluster_too(rogue: Rogue) -> None:
    """KubeRay 1.6.2 applies `rayClusterConfig.suspend` mid incremental upgrade to the pending
    RayCluster only. Once it has, the active RayCluster of the same RayService is suspended as
    well, as an operator that applied the toggle to every RayCluster of the RayService would
    (the active one stops serving)."""
    done: set[tuple[str, str]] = set()
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        if not made_for_a_rayservice(cluster) or not (cluster.get("spec") or {}).get("suspend"):
            continue
        namespace, service = meta["namespace"], (meta.get("labels") or {}).get(ORIGINATED_FROM_NAME, "")
        status = _rayservice_status(rogue, namespace, service)
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName", "")
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName", "")
        if pending != meta["name"] or not active or (namespace, active) in done:
            continue
        try:
            rogue.custom.patch_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, "rayclusters", active, {"spec": {"suspend": True}}
            )
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        done.add((namespace, active))
        rogue.acted(f"suspended the active RayCluster {namespace}/{active} after KubeRay suspended {pending}")


def _rayservice_status(rogue: Rogue, namespace: str, name: str) -> dict[str, Any]:
    try:
        svc = rogue.custom.get_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, "rayservices", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return {}
        raise
    return svc.get("status") or {}


FAULTS = [
    Fault(
        name="deletion-delay-dropped-by-a-stale-crd",
        area="upgrade",
        misbehaviour="the old RayCluster stays 60 s after promotion, not the 10 s delay asked",
        rogue=stale_crd_without_deletion_delay,
        catches=(UPGRADE + "test_new_cluster_upgrade_under_load",),
        evidence="rayClusterDeletionDelaySeconds",
    ),
    Fault(
        name="deletion-delay-dropped-by-a-stale-crd-incremental",
        area="upgrade",
        misbehaviour="after an incremental upgrade's promotion, or a rollback, the RayCluster left "
        "behind stays 60 s, not the 10 s delay asked",
        rogue=stale_crd_without_deletion_delay,
        catches=(
            INCREMENTAL + "[step100-interval1-surge100]",
            UPGRADE + "test_reverting_the_spec_mid_upgrade_rolls_back",
        ),
        evidence="rayClusterDeletionDelaySeconds",
    ),
    Fault(
        name="incremental-steps-without-the-interval",
        area="upgrade",
        misbehaviour="an incremental upgrade moves its next traffic step at once (every reconcile, "
        "about 2 s), not intervalSeconds after the last",
        rogue=migration_stamps_moved_back_by_the_interval,
        catches=(INCREMENTAL + "[step25-interval5-surge50]", INCREMENTAL + "[step5-interval10-surge25]"),
        evidence="sooner than intervalSeconds",
    ),
    Fault(
        name="suspend-mid-upgrade-suspends-the-active-cluster",
        area="upgrade",
        misbehaviour="rayClusterConfig.suspend mid incremental upgrade suspends the active RayCluster "
        "too, not only the pending one",
        rogue=suspend_the_active_cluster_too,
        catches=(UPGRADE + "test_suspending_mid_incremental_upgrade_holds_only_the_pending_cluster",),
        evidence="while suspended",
    ),
]
