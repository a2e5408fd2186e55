"""Seeded faults of area operator."""

from __future__ import annotations

from .behind_the_back import drop_rbac
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
]
