"""Seeded faults of area autoscaling."""

from __future__ import annotations

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

AUTOSCALING = "test_autoscaling.py::"
IDLE_TIMEOUTS = [["autoscalerOptions", "idleTimeoutSeconds"], ["workerGroupSpecs", "*", "idleTimeoutSeconds"]]


@before_checks
def stale_crd_without_idle_timeouts(rogue: Rogue) -> None:
    """A RayCluster CRD that predates idleTimeoutSeconds (Helm never upgrades CRDs): the API server
    drops the cluster's and the group's idle timeout, and the autoscaler uses its default 60 s."""
    spec = {**raycluster_spec(idleTimeoutSeconds=30), "autoscalerOptions": {"idleTimeoutSeconds": 30}}
    drop_crd_fields(rogue, "rayclusters", IDLE_TIMEOUTS, probe("RayCluster", spec))


FAULTS = [
    Fault(
        name="idle-timeouts-dropped-by-a-stale-crd",
        area="autoscaling",
        misbehaviour="idle workers go after the default 60 s, not the idleTimeoutSeconds the spec sets",
        rogue=stale_crd_without_idle_timeouts,
        catches=(
            AUTOSCALING + "test_scales_up_to_demand_within_max_and_down_after_idle[v2]",
            AUTOSCALING + "test_per_group_idle_timeout_overrides_the_global_one",
        ),
        bystanders=(AUTOSCALING + "test_in_tree_autoscaling_adds_sidecar_role_and_binding",),
        evidence="idleTimeoutSeconds",
    ),
]
