"""Seeded faults of area rayservice."""

from __future__ import annotations

from .behind_the_back import drop_rbac
from .faults import Fault
from .rogue import Rogue, before_checks

RAYSERVICE = "test_rayservice.py::"
OPERATOR_CLUSTER_ROLE = "kuberay-operator"


@before_checks
def clusterrole_without_rayservice_status(rogue: Rogue) -> None:
    """The operator's ClusterRole edited to lose rayservices/status: it reconciles, but can never
    say so, so no RayService is ever reported Ready."""
    drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "rayservices/status")


FAULTS = [
    Fault(
        name="rayservice-status-forbidden",
        area="rayservice",
        misbehaviour="the operator cannot write RayService status, so none is ever Ready",
        rogue=clusterrole_without_rayservice_status,
        catches=(RAYSERVICE + "test_rayservice_becomes_ready_and_answers_through_the_gateway",),
        run_args=("--timeout", "ready=120"),  # Ready takes about 26 s here
        evidence="Ready",
    ),
]
