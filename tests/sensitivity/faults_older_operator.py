"""Seeded faults that install an older operator where a newer one is promised.

The checks of behaviour a release added are marked `kuberay>=X`; on the default profile (the local
build falls back to 1.6.2) they are not applicable, so nothing shows they can fail. Here KubeRay
1.6.2, built from its served module as a checkout, claims to be 1.7.0 (`--kuberay-version`): those
checks then run on an operator that lacks what they assert, and must fail.
"""

from __future__ import annotations

from .faults import Fault

OPERATOR = "test_operator.py::"
UPGRADE = "test_upgrade.py::"
SUSPEND = "test_rayservice_suspend.py::"

FAULTS = [
    Fault(
        name="kuberay-1.6.2-claimed-as-1.7.0",
        area="operator",
        misbehaviour="an operator without 1.7.0's behaviour: RayCronJob RayJobs get random names "
        "(kuberay PR #4888), and a RayService has no spec.suspend (PR #4841)",
        claimed_version="v1.7.0",
        catches=(
            OPERATOR + "test_raycronjob_names_each_rayjob_by_its_scheduled_minute",
            UPGRADE + "test_suspending_the_rayservice_mid_incremental_upgrade_removes_it_until_resumed",
            SUSPEND + "test_suspended_rayservice_stops_serving_and_resumes_on_a_new_cluster",
            SUSPEND + "test_rayservice_created_suspended_makes_nothing_until_resumed",
            SUSPEND + "test_a_suspension_once_begun_completes_even_if_suspend_is_turned_back_off",
        ),
        bystanders=(OPERATOR + "test_raycronjob_crd_is_served_at_v1",),
        evidence=("RayJob for", "Suspended=True", "Suspended=True", "Suspended=True", "Suspending=True"),
    ),
]
