"""The rehearsal's reading of a workflow (tests/workflow_rehearsal.py): pure logic, no runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_rehearsal import Contexts, Job

ROOT = Path(__file__).resolve().parents[2]


def test_the_nightly_job_is_read_with_its_run_steps_in_order() -> None:
    job = Job.read(ROOT / ".github/workflows/nightly-kind.yml", "conformance")
    names = [step.name for step in job.steps]
    assert names.index("Install the harness") < names.index("Conformance run on kind")
    assert {"PROVIDER", "PROFILE", "KEYWORD", "RUN_ID"} <= set(job.env)
    run = next(step for step in job.steps if step.step_id == "run")
    assert '"$PROVIDER"' in run.run and '"$KEYWORD"' in run.run


def test_expressions_read_their_contexts() -> None:
    contexts = Contexts({"github": {"run_id": "42"}, "matrix": {"profile": "kind"}})
    assert contexts.substitute("r-${{ matrix.profile }}-${{ github.run_id }}") == "r-kind-42"
    with pytest.raises(ValueError, match="cannot evaluate"):
        contexts.substitute("${{ toJSON(github) }}")


@pytest.mark.parametrize(
    ("condition", "failed", "code", "expected"),
    [
        ("always()", True, "2", True),
        ("success()", True, "0", False),
        ("steps.run.outputs.exit_code == '1'", False, "1", True),
        ("steps.run.outputs.exit_code != '0' && steps.run.outputs.exit_code != '1'", False, "2", True),
        ("steps.run.outputs.exit_code != '0' && steps.run.outputs.exit_code != '1'", False, "0", False),
        ("always() && github.ref == 'refs/heads/main'", False, "0", False),
        ("!cancelled()", False, "0", True),
    ],
)
def test_if_conditions(condition: str, failed: bool, code: str, expected: bool) -> None:
    contexts = Contexts(
        {"steps": {"run": {"outputs": {"exit_code": code}}}, "github": {"ref": "refs/pull/1"}}
    )
    assert contexts.condition(condition, failed) is expected


def test_an_unknown_function_in_a_condition_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot evaluate"):
        Contexts().condition("contains(github.ref, 'main')", False)
