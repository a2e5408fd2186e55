"""Pure logic of the operator-scope, RayCronJob and CRD-drift checks."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

from conformance.install import crd_drift
from conformance.install.scoped_operator import ScopedOperator
from conformance.kube.manifests import render
from conformance.suites import cronjobs


def _job(name: str, scheduled: str | None) -> dict:
    annotations = {cronjobs.SCHEDULED_ANNOTATION: scheduled} if scheduled else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def test_seconds_to_next_minute() -> None:
    assert cronjobs.seconds_to_next_minute(datetime(2026, 1, 1, 10, 0, 45, 500000, UTC)) == 14.5
    assert cronjobs.seconds_to_next_minute(datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)) == 60.0


def test_ticks_duplicates_and_gaps() -> None:
    jobs = [
        _job("a", "2026-01-01T10:01:00Z"),
        _job("b", "2026-01-01T10:00:00Z"),
        _job("c", "2026-01-01T10:01:00Z"),
        _job("d", None),
    ]
    times = cronjobs.scheduled_times(jobs)
    assert times == ["", "2026-01-01T10:00:00Z", "2026-01-01T10:01:00Z", "2026-01-01T10:01:00Z"]
    assert cronjobs.duplicated_ticks(times) == {"2026-01-01T10:01:00Z": 2}
    assert cronjobs.tick_gaps_s(times) == [60.0]
    assert cronjobs.tick_gaps_s(["2026-01-01T10:00:00Z", "2026-01-01T10:03:00Z"]) == [180.0]


def test_a_daily_tick_in_a_zone_is_the_next_whole_minute_after_the_lead() -> None:
    schedule, tick = cronjobs.daily_tick_in_zone(
        datetime(2026, 12, 6, 3, 45, 20, tzinfo=UTC), "Asia/Kolkata", 45
    )
    assert tick == datetime(2026, 12, 6, 3, 47, tzinfo=UTC)  # 03:46:05 rounded up to a whole minute
    assert schedule == "17 9 * * *"  # 03:47 UTC is 09:17 at UTC+05:30
    late = cronjobs.daily_tick_in_zone(datetime(2026, 12, 6, 18, 29, 50, tzinfo=UTC), "Asia/Kolkata", 45)
    assert late == ("1 0 * * *", datetime(2026, 12, 6, 18, 31, tzinfo=UTC))  # past local midnight
    assert cronjobs.parsed(["", "2026-12-06T03:47:00Z"]) == [tick]


def test_minutes_name_is_minutes_since_the_epoch() -> None:
    assert cronjobs.minutes_name("nightly", "1970-01-01T01:00:00Z") == "nightly-60"


def _made(name: str, scheduled: str, created: str) -> dict:
    job = _job(name, scheduled)
    job["metadata"].update(
        creationTimestamp=created, ownerReferences=[{"name": "every-minute", "uid": "u-1"}]
    )
    return job


def _created_line(name: str, reconcile: str) -> str:
    entry = {"level": "info", "msg": cronjobs.CREATED_MESSAGE, "rayJobName": name, "reconcileID": reconcile}
    return json.dumps(entry)


# Two reconciles of one tick, as KubeRay 1.6.2 logs them when the second read a stale status.
TICK = "2026-12-01T08:41:00Z"
LOG = "\n".join(
    [
        "I1201 08:40:00 a line that is not JSON",
        _created_line("every-minute-abcde", "11111111-aaaa"),
        _created_line("every-minute-fghij", "22222222-bbbb"),
        json.dumps({"msg": cronjobs.STATUS_FAILED_MESSAGE, "error": "the object has been modified"}),
    ]
)


def test_every_rayjob_the_operator_logged_is_claimed_and_others_are_not() -> None:
    made = [_made("every-minute-abcde", TICK, TICK), _made("every-minute-fghij", TICK, TICK)]
    assert cronjobs.creations(LOG) == {
        "every-minute-abcde": "11111111-aaaa",
        "every-minute-fghij": "22222222-bbbb",
    }
    assert cronjobs.unclaimed(made, LOG) == []
    assert cronjobs.unclaimed([*made, _made("every-minute-zzzzz", TICK, TICK)], LOG) == ["every-minute-zzzzz"]
    assert cronjobs.unclaimed(made, "") == ["every-minute-abcde", "every-minute-fghij"]


def test_duplicates_are_described_with_their_creation_owner_and_reconcile() -> None:
    later = "2026-12-01T08:42:00Z"
    made = [_made("every-minute-abcde", TICK, TICK), _made("every-minute-fghij", TICK, TICK)]
    text = cronjobs.describe_duplicates([*made, _made("every-minute-klmno", later, later)], LOG)
    assert text.startswith(f"{TICK}: every-minute-abcde (created {TICK}, owner uid u-1, reconcile 11111111)")
    assert "every-minute-fghij (created 2026-12-01T08:41:00Z, owner uid u-1, reconcile 22222222)" in text
    assert "klmno" not in text  # one RayJob for its tick: not a duplicate
    assert text.endswith("1 failed status writes ('Failed to update RayCronJob status') in its log")


def _crd(schema: dict, versions: tuple[str, ...] = ("v1",)) -> dict:
    return {
        "metadata": {"name": "rayclusters.ray.io"},
        "spec": {
            "versions": [
                {"name": v, "served": True, "schema": {"openAPIV3Schema": copy.deepcopy(schema)}}
                for v in versions
            ]
        },
    }


SCHEMA = {"type": "object", "properties": {"spec": {"properties": {"rayVersion": {"type": "string"}}}}}


def test_no_drift_when_the_schemas_match() -> None:
    assert crd_drift.drift({"rayclusters.ray.io": _crd(SCHEMA)}, [_crd(SCHEMA)]) == {}


def test_drift_names_the_first_differing_path() -> None:
    newer = copy.deepcopy(SCHEMA)
    newer["properties"]["spec"]["properties"]["authOptions"] = {"type": "object"}
    found = crd_drift.drift({"rayclusters.ray.io": _crd(SCHEMA)}, [_crd(newer)])
    assert found == {
        "rayclusters.ray.io": "v1 schema differs at .properties.spec.properties.authOptions "
        "(missing from the served CRD)"
    }


def test_drift_in_versions_and_absence() -> None:
    served = {"rayclusters.ray.io": _crd(SCHEMA, ("v1",))}
    assert (
        "served versions" in crd_drift.drift(served, [_crd(SCHEMA, ("v1", "v1alpha1"))])["rayclusters.ray.io"]
    )
    assert crd_drift.drift({}, [_crd(SCHEMA)]) == {"rayclusters.ray.io": "not installed"}


def test_fix_command_names_the_version() -> None:
    assert crd_drift.fix_command("v1.6.2").endswith('config/crd?ref=v1.6.2"')
    on_prod = crd_drift.fix_command("v1.6.2", ["--kubeconfig", "/k", "--context", "prod"])
    assert on_prod.startswith("kubectl --kubeconfig /k --context prod apply --server-side")


def test_scoped_operator_gets_roles_only_and_no_leader_election() -> None:
    operator = ScopedOperator(
        name="kuberay-operator-scoped",
        namespace="ops",
        watch_namespaces=("ops",),
        image="img:v1.6.2",
        version="v1.6.2",
        feature_gates={"RayCronJob": True},
    )
    objects = operator.objects([{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get"]}])
    kinds = [o["kind"] for o in objects]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment"]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    args = objects[-1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--watch-namespace", "ops"]
    assert "--enable-leader-election=false" in args
    assert any(a.startswith("--feature-gates=") and "RayCronJob=true" in a for a in args)
    labels = objects[-1]["spec"]["template"]["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/name": "kuberay-operator-scoped"}  # never the shared one's


def test_scoped_operator_runs_the_installed_operators_gates_not_the_charts() -> None:
    """A checkout claiming v1.7.0 may be an older tree: 1.7.0's chart gate RayClusterMTLS would make
    its binary exit with "unrecognized feature gate"."""
    operator = ScopedOperator(
        name="scoped",
        namespace="ops",
        watch_namespaces=("ops",),
        image="img:v1.7.0-src.abc",
        version="v1.7.0",
        feature_gates={"RayCronJob": True},
        installed_gates={"RayServiceIncrementalUpgrade": True, "RayCronJob": False},
    )
    (gates,) = [a for a in operator.args() if a.startswith("--feature-gates=")]
    assert gates == "--feature-gates=RayServiceIncrementalUpgrade=true,RayCronJob=true"


def test_raycronjob_template_is_suspended_and_shuts_down() -> None:
    values = {
        "name": "c",
        "ray_version": "2.58.0",
        "image": "i",
        "pull_policy": "Never",
        "head_resources": {},
    }
    cron = render("ray/raycronjob.yaml", **values)
    assert cron["spec"]["schedule"] == "* * * * *" and cron["spec"]["suspend"] is False
    template = cron["spec"]["jobTemplate"]
    assert template["suspend"] is True and template["shutdownAfterJobFinishes"] is True
