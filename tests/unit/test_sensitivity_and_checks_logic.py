"""Pure logic behind the sensitivity suite and the checks' evidence: fault selections and seeded
profiles, deletion times from metadata, a shared object made in a check, the harness pseudo-area."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conformance import profiles
from conformance.kube.deletions import marked_at, parse_time
from conformance.report.summary import HARNESS, Summary
from conformance.report.summary import TestResult as Result
from conformance.suites.shared import Shared

TESTS = Path(__file__).resolve().parents[1]


def _sensitivity():
    sys.path.insert(0, str(TESTS))
    try:
        from sensitivity import behind_the_back, faults, runner  # noqa: PLC0415

        return faults, runner, behind_the_back
    finally:
        sys.path.remove(str(TESTS))


def test_a_field_dropped_from_a_crd_is_no_longer_required_by_its_parent() -> None:
    """A stale schema never requires a field it lacks; one still required would refuse every create."""
    *_, btb = _sensitivity()
    group = {"required": ["groupName", "maxReplicas", "template"], "properties": {"maxReplicas": {}}}
    only = {"required": ["template"], "properties": {"template": {}, "rayStartParams": {}}}
    schema = {"properties": {"spec": {"properties": {
        "workerGroupSpecs": {"items": group}, "headGroupSpec": only, "suspend": {},
    }}}}  # fmt: skip
    base = "/spec/versions/1/schema/openAPIV3Schema/properties/spec"
    assert btb._unrequire(1, schema, ["workerGroupSpecs", "*", "maxReplicas"]) == [
        {"op": "replace", "path": f"{base}/properties/workerGroupSpecs/items/required",
         "value": ["groupName", "template"]},
    ]  # fmt: skip
    assert btb._unrequire(1, schema, ["headGroupSpec", "rayStartParams"]) == []  # never required
    assert btb._unrequire(1, schema, ["headGroupSpec", "template"]) == [
        {"op": "remove", "path": f"{base}/properties/headGroupSpec/required"},  # no empty list left
    ]
    assert btb._unrequire(1, schema, ["suspend"]) == []  # spec itself requires nothing here


def test_a_check_selects_and_matches_its_parametrizations() -> None:
    faults, *_ = _sensitivity()
    check = faults.Check.parse("test_rayjob_lifecycle.py::test_job_moves[K8sJobMode]")
    assert check.keyword() == "(test_job_moves and K8sJobMode)"
    assert check.matches("conformance/suites/test_rayjob_lifecycle.py::test_job_moves[K8sJobMode-ray2.58.0]")
    assert not check.matches(
        "conformance/suites/test_rayjob_lifecycle.py::test_job_moves[HTTPMode-ray2.58.0]"
    )
    assert not check.matches("conformance/suites/test_rayjob.py::test_job_moves[K8sJobMode-ray2.58.0]")
    plain = faults.Check.parse("test_raycluster.py::test_head_only_cluster_becomes_ready")
    assert plain.matches(
        "conformance/suites/test_raycluster.py::test_head_only_cluster_becomes_ready[ray2.58.0]"
    )


def test_every_fault_names_existing_checks_and_loads_as_a_profile(tmp_path: Path) -> None:
    faults, runner, _ = _sensitivity()
    suites = Path(__file__).resolve().parents[2] / "conformance" / "suites"
    found = faults.all_faults()
    assert {f.area for f in found} >= {"raycluster", "rayjob", "fault-recovery", "security"}
    for fault in found:
        assert fault.catches and fault.expect in ("failed", "not_applicable")
        for check in [*fault.catching, *fault.others]:
            assert f"def {check.name}(" in (suites / check.module).read_text(), f"{fault.name}: {check}"
        seeded = profiles.load(str(runner.seeded_profile(fault, tmp_path)))
        assert seeded.kuberay.env == fault.env
        assert seeded.kuberay.extra_args == fault.extra_args
        assert fault.feature_gates.items() <= seeded.kuberay.feature_gates.items()
        assert fault.seed(), f"{fault.name} seeds nothing"


def test_deletion_time_is_the_request_not_the_end_of_the_grace_period() -> None:
    pod = {"metadata": {"deletionTimestamp": "2026-12-01T18:00:30Z", "deletionGracePeriodSeconds": 30}}
    assert marked_at(pod) == parse_time("2026-12-01T18:00:00Z")
    assert marked_at({"metadata": {"name": "x"}}) is None
    assert parse_time("2026-12-01T18:00:10Z") - parse_time("2026-12-01T18:00:00Z") == 10


def test_a_shared_object_fails_every_check_that_needs_it_the_same_way() -> None:
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        raise AssertionError("RayCluster hw becomes ready: timed out")

    shared = Shared(make)
    for _ in range(2):
        with pytest.raises(AssertionError, match="becomes ready"):
            shared.get()
    assert len(calls) == 1
    broken = Shared(lambda: {}["missing"])
    with pytest.raises(KeyError):
        broken.get()
    with pytest.raises(RuntimeError, match="earlier check"):  # a harness error stays an error
        broken.get()
    assert Shared(lambda: 7).get() == 7


def test_harness_checks_are_reported_apart_and_never_make_a_run_not_conformant() -> None:
    summary = Summary(run_id="r", started="s", provider="local", profile="default", versions={})
    summary.add(Result(id="a", area="rayjob", outcome="passed", duration_s=1))
    summary.add(Result(id="h", area=HARNESS, outcome="passed", duration_s=1))
    assert (summary.verdict(), set(summary.areas())) == ("conformant", {"rayjob"})
    assert summary.to_json()[HARNESS]["passed"] == 1
    summary.tests[1].outcome = "failed"
    assert (summary.verdict(), summary.exit_code()) == ("incomplete", 2)


def test_the_benchmark_table_counts_only_the_catching_parametrization() -> None:
    spec = importlib.util.spec_from_file_location(
        "sensitivity_table", TESTS.parent / "benchmarks/sensitivity.py"
    )
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    invalid = "test_autoscaling.py::test_invalid_autoscaling_spec_is_rejected"
    group_idle = "[ray2.58.0-group idle timeout with autoscaler v1-autoscaler v2 is not enabled]"
    record = {
        "catches": [invalid + "[v1-autoscaler]"],
        "outcomes": {
            invalid + group_idle: "failed",
            invalid + "[ray2.58.0-minReplicas above maxReplicas-greater than maxReplicas]": "passed",
        },
    }
    assert table.caught(record) == "failed"
    assert table.others_green(record) == "1/1"
    gate_off = {**record, "expect": "not_applicable", "outcomes": {invalid + group_idle: "not_applicable"}}
    checks = [
        ("autoscaling", invalid + group_idle, "Catches: an invalid spec | accepted."),
        ("harness", "test_security.py::test_token_never", "Catches: a leak."),
    ]
    proving = {**record, "expect": "failed", "fault": "stale-crd"}
    assert table.coverage([proving, gate_off], checks)[1].endswith(": 1 of 1.")
    assert "Not yet proven" in table.coverage([gate_off], checks)[-1]  # not applicable proves no failing
    doc = table.checks_doc([proving, {**gate_off, "fault": "gate-off"}], checks)
    row = next(line for line in doc.splitlines() if "test_invalid_autoscaling_spec_is_rejected" in line)
    assert "an invalid spec \\| accepted." in row and "`stale-crd`" in row and "gate-off" not in row
    assert "| `test_token_never` | a leak. | none yet |" in doc
