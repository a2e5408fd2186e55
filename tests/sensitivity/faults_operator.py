"""Seeded faults of area operator."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException

from .behind_the_back import RAY_GROUP, drop_rbac
from .faults import Fault
from .rogue import Rogue, before_checks

OPERATOR = "test_operator.py::"
LEADER_ELECTION_ROLE = "kuberay-operator-leader-election"
OPERATOR_CLUSTER_ROLE = "kuberay-operator"


@before_checks
def lease_update_forbidden(rogue: Rogue) -> None:
    """The operator's Role and ClusterRole edited to lose `update` on leases (both grant it): the
    running leader cannot renew, and a replacement pod can never take over the lease, so nothing is
    reconciled."""
    drop_rbac(rogue, "Role", LEADER_ELECTION_ROLE, "leases", verb="update")
    drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "leases", verb="update")


def recreate_head_on_ray_version_change(rogue: Rogue) -> None:
    """An operator that recreates a RayCluster's head when only its rayVersion changes (KubeRay
    leaves pods and images alone). The head goes at once (no grace): the check's window is 30 s."""
    first_seen: dict[str, str] = {}
    for cluster in rogue.ray_objects("rayclusters"):
        meta, version = cluster["metadata"], cluster["spec"].get("rayVersion", "")
        if first_seen.setdefault(meta["uid"], version) == version:
            continue
        first_seen[meta["uid"]] = version  # once per change
        selector = f"ray.io/cluster={meta['name']},ray.io/node-type=head"
        for pod in rogue.core.list_namespaced_pod(meta["namespace"], label_selector=selector).items:
            try:
                rogue.core.delete_namespaced_pod(pod.metadata.name, meta["namespace"], grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            rogue.acted(f"deleted head {pod.metadata.name} after rayVersion became {version}")


def schedule_raycronjobs_whatever_the_gate(rogue: Rogue) -> None:
    """An operator whose RayCronJob controller runs with its gate off: each RayCronJob of the run is
    marked scheduled (status.lastScheduleTime, the current minute) as the controller would mark it.
    Its RayJob is not made: the status alone is what the check sees first."""
    for cron in rogue.ray_objects("raycronjobs"):
        meta = cron["metadata"]
        if cron.get("status", {}).get("lastScheduleTime"):
            continue
        tick = datetime.now(UTC).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            rogue.custom.patch_namespaced_custom_object_status(
                RAY_GROUP, "v1", meta["namespace"], "raycronjobs", meta["name"],
                {"status": {"lastScheduleTime": tick}}, _content_type="application/merge-patch+json",
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        rogue.acted(f"marked RayCronJob {meta['namespace']}/{meta['name']} scheduled at {tick}")


FAULTS = [
    Fault(
        name="lease-update-forbidden",
        area="operator",
        misbehaviour="after its pod is replaced, no operator takes the leader lease",
        rogue=lease_update_forbidden,
        catches=(OPERATOR + "test_operator_is_ready_and_recovers_after_its_pod_is_deleted",),
        run_args=("--timeout", "ready=90"),  # the replacement is Ready within about 14 s here
        evidence="leader lease",
    ),
    Fault(
        name="head-recreated-on-ray-version-change",
        area="operator",
        misbehaviour="changing only rayVersion recreates the head pod",
        rogue=recreate_head_on_ray_version_change,
        catches=(OPERATOR + "test_ray_version_alone_does_not_change_the_image",),
        bystanders=(OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",),
        evidence="after rayVersion",
    ),
    Fault(
        name="raycronjob-scheduled-with-the-gate-off",
        area="operator",
        misbehaviour="with the RayCronJob gate off, a RayCronJob is scheduled all the same",
        rogue=schedule_raycronjobs_whatever_the_gate,
        catches=(OPERATOR + "test_raycronjob_with_the_gate_off_creates_no_rayjob",),
        bystanders=(OPERATOR + "test_crds_are_served_at_v1_and_v1alpha1_is_kept",),
        evidence="the RayCronJob was scheduled",
    ),
]
