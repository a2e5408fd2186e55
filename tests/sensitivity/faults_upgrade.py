"""Seeded faults of area upgrade."""

from __future__ import annotations

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

UPGRADE = "test_upgrade.py::"


@before_checks
def stale_crd_without_deletion_delay(rogue: Rogue) -> None:
    """A RayService CRD that predates rayClusterDeletionDelaySeconds: the API server drops it, and
    KubeRay deletes an upgraded-away cluster after its default 60 s instead of the 10 s asked."""
    spec = {"rayClusterDeletionDelaySeconds": 10, "rayClusterConfig": raycluster_spec()}
    drop_crd_fields(rogue, "rayservices", [["rayClusterDeletionDelaySeconds"]], probe("RayService", spec))


FAULTS = [
    Fault(
        name="deletion-delay-dropped-by-a-stale-crd",
        area="upgrade",
        misbehaviour="the old RayCluster stays 60 s after promotion, not the 10 s delay asked",
        rogue=stale_crd_without_deletion_delay,
        catches=(UPGRADE + "test_new_cluster_upgrade_under_load",),
        evidence="rayClusterDeletionDelaySeconds",
    ),
]
