"""Seeded faults of area upgrade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, drop_rbac, json_patch, probe, raycluster_spec
from .faults import Fault
from .faults_rayservice import (
    ORIGINATED_FROM_NAME,
    RAY_GROUP,
    RAY_VERSION,
    made_for_a_rayservice,
)
from .rogue import Rogue, before_checks

UPGRADE = "test_upgrade.py::"
INCREMENTAL = UPGRADE + "test_incremental_upgrade_under_load"
ROLLBACK = UPGRADE + "test_reverting_the_spec_mid_upgrade_rolls_back"
STAMP = "/status/pendingServiceStatus/lastTrafficMigratedTime"
OPERATOR_CLUSTER_ROLE = "kuberay-operator"
OLD_HEAD_FAILS = UPGRADE + (
    "test_old_head_failing_mid_upgrade_leaves_the_rayservice_not_ready_until_the_new_cluster_serves"
)


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
        if not json_patch(rogue, "rayservices", meta, patch, status=True):
            continue  # gone, or KubeRay moved on meanwhile: the next event
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


def serve_config_changes_dropped_with_a_spec_change(rogue: Rogue) -> None:
    """The Serve config a RayService was created with is put back whenever a later spec changes it,
    as an operator would act that deploys the old config on the new cluster of an upgrade that
    changed both (the new cluster then answers with the old message)."""
    first: dict[str, str] = {}
    for svc in rogue.ray_objects("rayservices"):
        meta, config = svc["metadata"], (svc.get("spec") or {}).get("serveConfigV2", "")
        original = first.setdefault(meta["uid"], config)
        if config == original:
            continue
        patch = [
            {"op": "test", "path": "/spec/serveConfigV2", "value": config},
            {"op": "replace", "path": "/spec/serveConfigV2", "value": original},
        ]
        if not json_patch(rogue, "rayservices", meta, patch):
            continue
        rogue.acted(f"put back the first Serve config of {meta['namespace']}/{meta['name']}")


def upgrade_strategy_none_dropped_on_a_spec_change(rogue: Rogue) -> None:
    """`upgradeStrategy.type: None` is taken away when the RayService's spec changes (generation 2
    on), so KubeRay upgrades to a new cluster by its default, as an operator that ignored None would."""
    for svc in rogue.ray_objects("rayservices"):
        meta = svc["metadata"]
        strategy = (svc.get("spec") or {}).get("upgradeStrategy") or {}
        if strategy.get("type") != "None" or int(meta.get("generation", 1)) < 2:
            continue
        patch = [
            {"op": "test", "path": "/spec/upgradeStrategy/type", "value": "None"},
            {"op": "remove", "path": "/spec/upgradeStrategy"},
        ]
        if not json_patch(rogue, "rayservices", meta, patch):
            continue
        rogue.acted(
            f"removed upgradeStrategy None from {meta['namespace']}/{meta['name']} after its spec changed"
        )


def pending_cluster_deleted_when_a_rollback_starts(rogue: Rogue) -> None:
    """As soon as a RayService reports RollbackInProgress, its pending RayCluster is deleted, as an
    operator that drops the pending cluster at once would, instead of moving its traffic back by
    steps first: the share of requests the route still sends there fails, and a cancelled
    rollback can only finish on a cluster built anew."""
    deleted: set[str] = set()
    for svc in rogue.ray_objects("rayservices"):
        status = svc.get("status") or {}
        rolling_back = any(
            c.get("type") == "RollbackInProgress" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        pending = (status.get("pendingServiceStatus") or {}).get("rayClusterName", "")
        if not rolling_back or not pending or pending in deleted:
            continue
        namespace = svc["metadata"]["namespace"]
        try:
            rogue.custom.delete_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, "rayclusters", pending
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        deleted.add(pending)
        rogue.acted(f"deleted the pending RayCluster {namespace}/{pending} as RollbackInProgress appeared")


def pods_frozen_once_an_upgrade_starts(rogue: Rogue) -> None:
    """Once a RayService of the run is upgrading (an active and a pending RayCluster), the operator
    may no longer update pods: the serve label of every head stays as it was, so a head whose
    Serve proxy hangs stays behind the serve Service, as with an operator that stops
    health-checking the active head while it upgrades."""
    for svc in rogue.ray_objects("rayservices"):
        status = svc.get("status") or {}
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
        # A new RayService's first cluster is pending too, with no active one: not an upgrade.
        if active and (status.get("pendingServiceStatus") or {}).get("rayClusterName"):
            drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "pods", verb="update")
            return


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
        catches=(INCREMENTAL + "[step100-interval1-surge100]", ROLLBACK + "[middle]"),
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
    Fault(
        name="old-serve-config-on-the-new-cluster",
        area="upgrade",
        misbehaviour="a RayCluster spec and a Serve config changed together: the new cluster is "
        "deployed with the old Serve config",
        rogue=serve_config_changes_dropped_with_a_spec_change,
        catches=(UPGRADE + "test_cluster_spec_and_serve_config_changed_together_switch_only_at_promotion",),
        evidence="answers (cluster, message)",
    ),
    Fault(
        name="upgrade-strategy-none-ignored",
        area="upgrade",
        misbehaviour="a RayService with upgradeStrategy None is upgraded to a new cluster when its "
        "cluster spec changes",
        rogue=upgrade_strategy_none_dropped_on_a_spec_change,
        catches=(
            UPGRADE + "test_upgrade_strategy_none_applies_the_serve_config_in_place_and_not_the_cluster_spec",
        ),
        evidence="with upgradeStrategy None",
    ),
    Fault(
        name="pending-cluster-dropped-at-once-on-rollback",
        area="upgrade",
        misbehaviour="a rollback deletes the pending RayCluster at once, while the route still "
        "sends it traffic, instead of moving the traffic back by steps first",
        rogue=pending_cluster_deleted_when_a_rollback_starts,
        on_checkout=True,  # the before-traffic bystander is a 1.7.0 behaviour
        catches=(
            ROLLBACK + "[early]",
            ROLLBACK + "[middle]",
            ROLLBACK + "[late]",
            ROLLBACK + "[cancelled]",
            ROLLBACK + "[third-spec]",
        ),
        bystanders=(ROLLBACK + "[before-traffic]",),
        evidence=(
            "failed requests",
            "failed requests",
            "failed requests",
            "not the pending",
            "failed requests",
        ),
    ),
    Fault(
        name="headless-pending-cluster-dropped-at-once-on-rollback",
        area="upgrade",
        misbehaviour="a rollback that starts just after the pending RayCluster lost its head deletes that "
        "cluster at once, not rayClusterDeletionDelaySeconds after the traffic is back",
        rogue=pending_cluster_deleted_when_a_rollback_starts,
        on_checkout=True,
        catches=(ROLLBACK + "[pending-head-lost]",),
        evidence="before rayClusterDeletionDelaySeconds",
    ),
    Fault(
        name="revert-before-traffic-on-1.6",
        area="upgrade",
        misbehaviour="KubeRay 1.6 (before PR #4989) takes a spec reverted before any traffic moved "
        "for a third spec",
        claimed_version="v1.7.0",
        catches=(ROLLBACK + "[before-traffic]",),
        evidence="not the original",
    ),
    Fault(
        name="hung-old-head-kept-behind-the-serve-service",
        area="upgrade",
        misbehaviour="a head whose Serve proxy hangs mid upgrade keeps its ray.io/serve=true label "
        "(the operator cannot update pods once the upgrade started)",
        rogue=pods_frozen_once_an_upgrade_starts,
        on_checkout=True,  # where the check was seen passing (1.7.0)
        catches=(OLD_HEAD_FAILS,),
        run_args=("--timeout", "ready=150"),  # each wait of the check takes under a minute here
        evidence="ray.io/serve=false on the old head",
    ),
]
