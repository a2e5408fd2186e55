"""Each CI job's timeout-minutes holds what the recorded check durations and the current check count
require (conformance/workflow_budget.py, whose docstring states the model and its assumptions)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import workflow_budget as budget
from conformance.workflow_budget import Check

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def _collected(profile: str) -> list[Check]:
    """`kuberay-conformance list` as data, in a process of its own (it is a pytest collection)."""
    script = (
        "import json, sys\nfrom conformance import workflow_budget as b\n"
        "print(json.dumps([c.__dict__ for c in b.collected(sys.argv[1])]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, profile], capture_output=True, text=True, check=True, timeout=120
    )
    return [Check(**entry) for entry in json.loads(done.stdout.strip().splitlines()[-1])]


@pytest.fixture(scope="module")
def figures() -> dict[str, int]:
    return budget.budgets(_collected("kind"), _collected("eks-gpu"), _kind_shards(_workflows()))


def _workflows() -> dict[str, dict[str, Any]]:
    return {path.name: yaml.safe_load(path.read_text()) for path in WORKFLOWS.glob("*.yml")}


def _kind_shards(workflows: dict[str, dict[str, Any]]) -> int:
    return int(workflows["nightly-kind.yml"]["jobs"]["conformance"]["env"]["SHARDS"])


def _run_step(job: dict[str, Any]) -> dict[str, Any]:
    return next(step for step in job["steps"] if step.get("id") == "run")


def shortfalls(workflows: dict[str, dict[str, Any]], figures: dict[str, int]) -> list[str]:
    """Every timeout or budget of the workflows below what the figures require."""
    found = []

    def at_least(what: str, have: int, need: int) -> None:
        if have < need:
            found.append(f"{what} is {have} minutes, needs {need}")

    nightly = workflows["nightly-kind.yml"]["jobs"]["conformance"]
    at_least("nightly-kind timeout-minutes", nightly["timeout-minutes"], figures["nightly-kind"])
    at_least("nightly-kind SHARDS", _kind_shards(workflows), figures["nightly-kind shards"])
    eks = workflows["eks-gpu.yml"]
    job = eks["jobs"]["conformance"]
    cap = int(job["env"]["MAX_BUDGET_MINUTES"])
    default = int(eks[True]["workflow_dispatch"]["inputs"]["max_run_minutes"]["default"])
    at_least("eks-gpu max_run_minutes default", default, figures["eks-gpu budget"])
    at_least("eks-gpu MAX_BUDGET_MINUTES", cap, default)
    run_step = _run_step(job)["timeout-minutes"]
    at_least("eks-gpu run step timeout-minutes", run_step, cap + budget.eks_after_deadline_min())
    at_least("eks-gpu timeout-minutes", job["timeout-minutes"], budget.eks_job_min(run_step))
    at_least(
        "eks-reaper timeout-minutes",
        workflows["eks-reaper.yml"]["jobs"]["reap"]["timeout-minutes"],
        figures["eks-reaper"],
    )
    return found


def test_every_job_timeout_holds_what_the_recorded_durations_require(figures: dict[str, int]) -> None:
    assert shortfalls(_workflows(), figures) == []


@pytest.mark.parametrize(
    ("workflow", "path", "expected"),
    [
        ("nightly-kind.yml", ("jobs", "conformance", "timeout-minutes"), "nightly-kind timeout-minutes"),
        ("eks-gpu.yml", ("jobs", "conformance", "timeout-minutes"), "eks-gpu timeout-minutes"),
        ("eks-gpu.yml", ("jobs", "conformance", "env", "MAX_BUDGET_MINUTES"), "eks-gpu MAX_BUDGET_MINUTES"),
        ("eks-reaper.yml", ("jobs", "reap", "timeout-minutes"), "eks-reaper timeout-minutes"),
    ],
)
def test_a_timeout_below_the_figures_is_caught(
    figures: dict[str, int], workflow: str, path: tuple[str, ...], expected: str
) -> None:
    workflows = copy.deepcopy(_workflows())
    where = workflows[workflow]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = 10
    assert any(line.startswith(expected) for line in shortfalls(workflows, figures))


def test_no_job_asks_for_more_than_github_allows() -> None:
    for name, workflow in _workflows().items():
        for job_name, job in workflow["jobs"].items():
            assert job.get("timeout-minutes", 0) <= budget.GITHUB_JOB_LIMIT_MIN, f"{name} {job_name}"


def test_the_reaper_destroys_at_most_what_its_budget_counts() -> None:
    step = next(s for s in _workflows()["eks-reaper.yml"]["jobs"]["reap"]["steps"] if s.get("id") == "find")
    assert re.search(rf"--most {budget.REAPER_MOST}\b", step["run"])


def test_more_checks_need_more_time(figures: dict[str, int]) -> None:
    kind = _collected("kind")
    more = kind + [Check(f"test_new_check[{i}]", "rayservice", False) for i in range(40)]
    workers = budget.shard_workers(budget.per_check_gib("kind"))
    shards = _kind_shards(_workflows())
    assert max(b.need_min for b in budget.kind_shard_budgets(more, shards, workers)) > figures["nightly-kind"]
    assert budget.shards_for(more, workers) > figures["nightly-kind shards"]


# --- the shards of nightly-kind ------------------------------------------------------------------


def test_nightly_kind_runs_the_fewest_shards_whose_every_job_fits_its_minutes(
    figures: dict[str, int],
) -> None:
    """Issue 44: each shard's job fits 45 minutes on a 4-core runner; more shards than that needs
    would each pay the fixed phases (runner, cluster, install) for nothing."""
    job = _workflows()["nightly-kind.yml"]["jobs"]["conformance"]
    shards = _kind_shards(_workflows())
    assert job["strategy"]["matrix"]["shard"] == list(range(1, shards + 1))
    assert job["env"]["SHARD"] == "${{ matrix.shard }}"
    assert shards == figures["nightly-kind shards"]
    assert figures["nightly-kind"] <= job["timeout-minutes"] <= budget.SHARD_JOB_MOST_MIN


def test_a_shard_count_the_model_does_not_fit_is_caught(figures: dict[str, int]) -> None:
    workflows = copy.deepcopy(_workflows())
    workflows["nightly-kind.yml"]["jobs"]["conformance"]["env"]["SHARDS"] = "2"
    assert any(line.startswith("nightly-kind SHARDS") for line in shortfalls(workflows, figures))


def test_the_modelled_shards_are_the_split_the_harness_makes() -> None:
    """Every check in one shard, shared clusters kept together, and no shard far above the mean."""
    kind = _collected("kind")
    parts = budget.shard_parts(kind, 4)
    names = [c.name for part in parts for c in part]
    assert len(names) == len(set(names)) and set(names) >= {
        c.name for c in kind if "[no-samples" not in c.name
    }
    units = [{c.unit for c in part if c.unit.startswith("module:")} for part in parts]
    assert all(not (a & b) for i, a in enumerate(units) for b in units[i + 1 :])
    workers = budget.shard_workers(budget.per_check_gib("kind"))
    minutes = [b.checks_min for b in budget.kind_shard_budgets(kind, 4, workers)]
    assert max(minutes) <= 1.25 * sum(minutes) / len(minutes), minutes


# --- the model's parts ---------------------------------------------------------------------------


def test_shared_checks_spread_over_workers_and_exclusive_ones_add_up() -> None:
    seconds = {"a": 10.0, "b": 10.0, "c": 10.0, "x": 7.0}
    assert budget.modelled_seconds(seconds, {"x"}, 1) == 37.0
    assert budget.modelled_seconds(seconds, {"x"}, 3) == pytest.approx(10 + 2 / 3 * 10 + 7)


def test_unrecorded_checks_are_charged_the_longest_of_their_area_and_samples_as_recorded() -> None:
    recorded = {"test_a[1]": 5.0, "test_a[2]": 50.0, "test_s[x.yaml-r]": 3.0, "test_s[y.yaml-r]": 4.0}
    checks = [
        Check("test_a[1]", "rayjob", False),
        Check("test_a[3]", "rayjob", True),
        Check("test_s[no-samples-r]", "samples", False),
    ]
    seconds, exclusive = budget.charged(checks, recorded)
    assert seconds == {"test_a[1]": 5.0, "test_a[3]": 5.0, "test_s[x.yaml-r]": 3.0, "test_s[y.yaml-r]": 4.0}
    assert exclusive == {"test_a[3]"}


def test_the_calibration_is_measured_and_only_adds_what_the_model_leaves_out() -> None:
    factor = budget.calibration(_collected("kind"))
    assert 1.0 <= factor <= 1.5, "between-check time makes a run longer than its checks, not shorter"


def test_the_margin_covers_the_spread_of_recorded_whole_job_runs() -> None:
    columns = json.loads(budget.WHOLE_JOB_RUNS.read_text()).values()
    walls = [c["wall_s"] for c in columns if c["selection"].startswith("all areas") and c["wall_s"] > 7000]
    assert len(walls) >= 3
    assert max(walls) / min(walls) < budget.MARGIN


def test_workers_are_counted_as_the_harness_counts_them() -> None:
    # kind profile: 2 GiB head + 2 x 1 GiB workers = 4 GiB per check; 7 GiB runner -> 1.
    assert budget.kind_workers(4.0) == 1 and budget.kind_workers(2.0) == 2 and budget.kind_workers(1.0) == 2
    # eks-gpu profile: 8 + 2 x 4 = 16 GiB per check on two nodes of 15 GiB -> 1.
    # A shard's runner, GitHub's for public repositories (4 cores, 16 GiB): 4 of the kind profile's.
    assert budget.shard_workers(4.0) == 4 and budget.shard_workers(8.0) == 2
    assert budget.per_check_gib("eks-gpu") == 16.0
    assert budget.eks_workers(16.0, 2) == 1 and budget.eks_workers(8.0, 2) == 3
