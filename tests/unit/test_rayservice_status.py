"""Reading RayCluster suspension as the RayService checks need it (conformance/kube/rayservice.py)."""

from conformance.kube import rayservice as rs


def cluster(suspend: object, state: str = "", **conditions: str) -> dict:
    return {
        "metadata": {"name": "echo-abc"},
        "spec": {} if suspend is None else {"suspend": suspend},
        "status": {"state": state, "conditions": [{"type": k, "status": v} for k, v in conditions.items()]},
    }


def test_a_cluster_is_suspended_once_asked_and_its_pods_are_gone() -> None:
    assert rs.cluster_suspended(cluster(True, state="suspended"))
    assert rs.cluster_suspended(cluster(True, RayClusterSuspended="True"))


def test_a_cluster_still_suspending_or_not_asked_is_not_suspended() -> None:
    assert not rs.cluster_suspended(cluster(True, state="ready", RayClusterSuspending="True"))
    assert not rs.cluster_suspended(cluster(None, state="ready"))
    # Asked to resume: the stale state and condition do not count.
    assert not rs.cluster_suspended(cluster(False, state="suspended", RayClusterSuspended="True"))
    assert (
        rs.describe_cluster(cluster(True, state="suspended"))
        == "suspend=True; state=suspended; no conditions"
    )
