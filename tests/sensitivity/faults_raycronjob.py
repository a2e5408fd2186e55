"""Seeded faults of the RayCronJob checks (area operator).

Those checks run a namespace-scoped operator of their own with the RayCronJob gate on, so a seed in
the shared operator's profile would not reach it: these act on what that operator reads instead,
the RayCronJob CRD and the RayCronJobs' status.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, probe, set_last_schedule_time
from .faults import Fault
from .rogue import Rogue, before_checks

OPERATOR = "test_operator.py::"
SCOPED_OPERATOR = "app.kubernetes.io/name=kuberay-operator-scoped"  # the check's own operator
WATCH_FLAG = "--watch-namespace"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # how metav1.Time is written


@before_checks
def stale_crd_without_cron_suspend(rogue: Rogue) -> None:
    """A RayCronJob CRD without `suspend` in its schema (a hand-trimmed or pre-release one; 1.6.x
    ships it): the API server drops the field from every write, so suspending a RayCronJob is
    silently lost and its controller goes on making a RayJob every tick."""
    spec = {"schedule": "* * * * *", "suspend": True, "jobTemplate": {"entrypoint": "true"}}
    drop_crd_fields(rogue, "raycronjobs", [["suspend"]], probe("RayCronJob", spec))


@before_checks
def stale_crd_without_time_zone(rogue: Rogue) -> None:
    """A RayCronJob CRD without `timeZone` (1.6.x's, which Helm does not replace on an upgrade): the
    API server drops the field, so a schedule meant for a time zone runs in UTC, and an unknown zone
    is never seen to be refused."""
    spec = {"schedule": "* * * * *", "timeZone": "Asia/Kolkata", "jobTemplate": {"entrypoint": "true"}}
    drop_crd_fields(rogue, "raycronjobs", [["timeZone"]], probe("RayCronJob", spec))


def scoped_operator_watches_one_namespace_more(rogue: Rogue) -> None:
    """The RayCronJob checks' scoped operator, as it is made, is also given the namespace the check
    keeps unwatched (its `--watch-namespace` widened, its Role and RoleBinding copied there): an
    operator that reconciles beyond the namespaces it was told to watch."""
    apps = rogue.apps()
    for event in rogue.events(apps.list_deployment_for_all_namespaces, label_selector=SCOPED_OPERATOR):
        deployment = event["object"]
        if event["type"] != "ADDED" or not rogue.in_run(deployment):
            continue
        container = deployment.spec.template.spec.containers[0]
        args = list(container.args)
        at = args.index(WATCH_FLAG) + 1
        watched = args[at].split(",")
        other = f"{watched[0]}-other"[:63]  # the unwatched namespace the check makes beside its own
        _grant_like(rogue, deployment.metadata.name, watched[0], other)
        args[at] = ",".join([*watched, other])
        patch = {"spec": {"template": {"spec": {"containers": [{"name": container.name, "args": args}]}}}}
        apps.patch_namespaced_deployment(deployment.metadata.name, deployment.metadata.namespace, patch)
        rogue.acted(f"widened {deployment.metadata.name}'s {WATCH_FLAG} to {args[at]}")


def _grant_like(rogue: Rogue, name: str, source: str, target: str) -> None:
    """Copy the Role and RoleBinding `name` from namespace `source` into `target`."""
    rbac = client.RbacAuthorizationV1Api(rogue.api)
    role, binding = rbac.read_namespaced_role(name, source), rbac.read_namespaced_role_binding(name, source)
    meta = client.V1ObjectMeta(name=name, namespace=target)
    try:
        rbac.create_namespaced_role(target, client.V1Role(metadata=meta, rules=role.rules))
        rbac.create_namespaced_role_binding(
            target, client.V1RoleBinding(metadata=meta, role_ref=binding.role_ref, subjects=binding.subjects)
        )
    except ApiException as exc:
        if exc.status != 409:  # already granted by an earlier event
            raise
    rogue.acted(f"copied Role and RoleBinding {name} from {source} to {target}")


def tick_scheduled_again(rogue: Rogue) -> None:
    """kuberay#4849 made certain: the first lastScheduleTime each RayCronJob of the run gets is set
    back, behind the operator's back, to just before the tick it marks, as a reconcile reading a
    stale cache sees it. The controller then takes that tick for unscheduled and, up to 1.6.x (a
    random RayJob name), makes its RayJob a second time; 1.7.0 names RayJobs by minute, so the
    second create is refused. Once per RayCronJob, so it never loops."""
    rewound: set[str] = set()
    for cron in rogue.ray_objects("raycronjobs"):
        meta, last = cron["metadata"], cron.get("status", {}).get("lastScheduleTime")
        if not last or meta["uid"] in rewound:
            continue
        rewound.add(meta["uid"])
        tick = datetime.strptime(last, TIME_FORMAT).replace(second=0)
        before = (tick - timedelta(seconds=1)).strftime(TIME_FORMAT)
        if set_last_schedule_time(rogue, meta, before):
            where = f"{meta['namespace']}/{meta['name']}"
            rogue.acted(f"set RayCronJob {where}'s lastScheduleTime {last} back to {before}")


FAULTS = [
    Fault(
        name="raycronjob-time-zone-dropped-by-a-stale-crd",
        area="operator",
        misbehaviour="a RayCronJob's schedule is read in UTC, not in the timeZone it names",
        rogue=stale_crd_without_time_zone,
        on_checkout=True,  # timeZone is 1.7.0's
        catches=(OPERATOR + "test_raycronjob_schedule_is_read_in_its_time_zone",),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        evidence="makes a RayJob at",
    ),
    Fault(
        name="raycronjob-suspend-dropped-by-a-stale-crd",
        area="operator",
        misbehaviour="a suspended RayCronJob is still scheduled: the suspend never reaches its controller",
        rogue=stale_crd_without_cron_suspend,
        catches=(OPERATOR + "test_raycronjob_suspend_stops_new_rayjobs",),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        evidence="suspended RayCronJob was scheduled",
    ),
    Fault(
        name="scoped-operator-watches-one-namespace-more",
        area="operator",
        misbehaviour="an operator limited by --watch-namespace reconciles a namespace it was not given",
        rogue=scoped_operator_watches_one_namespace_more,
        catches=(OPERATOR + "test_watch_namespace_limits_the_operator_to_its_namespace",),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        run_args=("--timeout", "ready=120"),  # the rogue's edit makes the scoped operator roll once
        evidence="watch",
    ),
    Fault(
        name="raycronjob-tick-scheduled-twice",
        area="operator",
        misbehaviour="a RayCronJob reconcile that reads a stale lastScheduleTime makes the tick's RayJob "
        "again (kuberay#4849, up to 1.6.x)",
        rogue=tick_scheduled_again,
        catches=(OPERATOR + "test_raycronjob_makes_one_rayjob_per_tick_without_duplicates",),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        evidence="more than one RayJob for a tick",
    ),
]
