"""Seeded faults of the RayCronJob checks (area operator).

Those checks run a namespace-scoped operator of their own with the RayCronJob gate on, so a seed in
the shared operator's profile would not reach it: these act on what that operator reads instead,
the RayCronJob CRD and the RayCronJobs' status.
"""

from __future__ import annotations

from .behind_the_back import drop_crd_fields, probe
from .faults import Fault
from .rogue import Rogue, before_checks

OPERATOR = "test_operator.py::"


@before_checks
def stale_crd_without_cron_suspend(rogue: Rogue) -> None:
    """A RayCronJob CRD without `suspend` in its schema (a hand-trimmed or pre-release one; 1.6.x
    ships it): the API server drops the field from every write, so suspending a RayCronJob is
    silently lost and its controller goes on making a RayJob every tick."""
    spec = {"schedule": "* * * * *", "suspend": True, "jobTemplate": {"entrypoint": "true"}}
    drop_crd_fields(rogue, "raycronjobs", [["suspend"]], probe("RayCronJob", spec))


FAULTS = [
    Fault(
        name="raycronjob-suspend-dropped-by-a-stale-crd",
        area="operator",
        misbehaviour="a suspended RayCronJob is still scheduled: the suspend never reaches its controller",
        rogue=stale_crd_without_cron_suspend,
        catches=(OPERATOR + "test_raycronjob_suspend_stops_new_rayjobs",),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        evidence="suspended RayCronJob was scheduled",
    ),
]
