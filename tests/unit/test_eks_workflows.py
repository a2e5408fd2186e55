"""What eks-gpu.yml and eks-reaper.yml promise, read from their text (they only run on GitHub), and that
the eks-gpu profile installs a Gateway implementation the eks provider accepts.

actionlint and shellcheck run over both in test_provider_workflows.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import standins as standin_tools
from test_provider_workflows import steps, workflow

from conformance import profiles
from conformance.environment import Environment, RunOptions
from conformance.install import gateway_charts
from conformance.providers.eks import EksProvider
from conformance.providers.eks_credentials import AUDIENCE

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def index_of(job: dict[str, Any], text: str) -> int:
    (found,) = [i for i, s in enumerate(steps(job)) if text in s.get("run", "") or text in s.get("uses", "")]
    return found


EKS = workflow("eks-gpu.yml")
EKS_JOB = EKS["jobs"]["conformance"]
REAPER = workflow("eks-reaper.yml")
REAPER_JOB = REAPER["jobs"]["reap"]


# --- role sessions -------------------------------------------------------------------------------


def test_a_role_session_is_one_hour_unless_the_repository_says_more() -> None:
    (assume,) = [
        s for s in steps(EKS_JOB) if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@")
    ]
    assert assume["with"]["role-duration-seconds"] == "${{ vars.KRC_EKS_ROLE_SESSION_SECONDS || 3600 }}"
    assert "18000" not in (WORKFLOWS / "eks-gpu.yml").read_text()


def test_the_destroy_step_assumes_the_role_afresh_whatever_happened() -> None:
    assume = index_of(EKS_JOB, "aws-actions/configure-aws-credentials")
    destroy = index_of(EKS_JOB, "cluster down --provider eks")
    run = next(i for i, s in enumerate(steps(EKS_JOB)) if s.get("id") == "run")
    assert run < assume < destroy
    assert steps(EKS_JOB)[assume]["if"] == "always()" and steps(EKS_JOB)[destroy]["if"] == "always()"


@pytest.mark.parametrize(("name", "job"), [("eks-gpu", EKS_JOB), ("eks-reaper", REAPER_JOB)])
def test_long_steps_renew_their_credentials_from_the_oidc_token(name: str, job: dict[str, Any]) -> None:
    renew = index_of(job, "eks_credentials")
    script = steps(job)[renew]["run"]
    # Once in the foreground (a failure stops the job), then kept fresh in the background.
    assert re.search(
        r"^\.venv/bin/python -m conformance\.providers\.eks_credentials \"\$token\"$", script, re.M
    )
    assert re.search(r"^nohup .*eks_credentials \"\$token\" --keep", script, re.M) and "&\n" in script
    for variable in ("AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME"):
        assert f'echo "{variable}=' in script, variable
    assert "AWS_ACCESS_KEY_ID" not in script and "AWS_SECRET_ACCESS_KEY" not in script
    callers = (".venv/bin/kuberay-conformance ", "eks_reaper ", "aws sts ")
    first_aws_use = min(i for i, s in enumerate(steps(job)) if any(c in s.get("run", "") for c in callers))
    assert renew < first_aws_use, f"{name}: credentials before the first AWS call"
    assert AUDIENCE == "sts.amazonaws.com"


# --- run ids and reports --------------------------------------------------------------------------


def test_each_run_and_attempt_has_its_own_run_id_and_report() -> None:
    assert EKS_JOB["env"]["RUN_ID"] == "eks-${{ github.run_id }}-${{ github.run_attempt }}"
    run = next(s for s in steps(EKS_JOB) if s.get("id") == "run")
    assert '--run-dir "reports/$RUN_ID"' in run["run"] and "reports/eks-gpu" not in run["run"]
    (upload,) = [s for s in steps(EKS_JOB) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert "reports/${{ env.RUN_ID }}/" in upload["with"]["path"]
    assert upload["with"]["name"] == "reports-${{ env.RUN_ID }}"


def test_the_run_id_is_one_the_harness_and_the_module_accept() -> None:
    example = (
        EKS_JOB["env"]["RUN_ID"]
        .replace("${{ github.run_id }}", "12345678901")
        .replace("${{ github.run_attempt }}", "3")
    )
    assert re.fullmatch(r"[A-Za-z0-9][-_.A-Za-z0-9]{0,61}[A-Za-z0-9]", example)


# --- remote state and the reaper -------------------------------------------------------------------


@pytest.mark.parametrize("job", [EKS_JOB, REAPER_JOB], ids=["eks-gpu", "eks-reaper"])
def test_both_jobs_refuse_to_start_without_remote_state(job: dict[str, Any]) -> None:
    assert job["env"]["KRC_TF_BACKEND"] == "${{ vars.KRC_TF_BACKEND }}"
    refusing = [s for s in steps(job) if "KRC_TF_BACKEND_CONFIG are not set" in s.get("run", "")]
    assert refusing and "exit 3" in refusing[0]["run"]


def test_the_reaper_runs_hourly_with_its_own_role_and_destroys_through_remote_state() -> None:
    cron = REAPER["on"]["schedule"][0]["cron"]
    assert re.fullmatch(r"\d{1,2} \* \* \* \*", cron), "hourly"
    assert "workflow_dispatch" in REAPER["on"]
    assert REAPER["permissions"] == {"contents": "read", "id-token": "write"}
    assert REAPER_JOB["if"] == "vars.KRC_EKS_ROLE_ARN != ''"
    assert REAPER_JOB["environment"] == "eks-reaper", "no reviewers can hold up an hourly job"
    find = next(s for s in steps(REAPER_JOB) if s.get("id") == "find")
    assert "-m conformance.providers.eks_reaper expired" in find["run"]
    destroy = steps(REAPER_JOB)[index_of(REAPER_JOB, "eks_reaper destroy")]["run"]
    assert 'eks_reaper destroy "$region" "$run_id"' in destroy and "while read -r region run_id" in destroy
    flagged = [s for s in steps(REAPER_JOB) if s.get("if") == "steps.find.outputs.exit_code != '0'"]
    assert flagged and "exit 1" in flagged[0]["run"]


def test_the_eks_job_refuses_a_budget_its_timeout_cannot_hold() -> None:
    check = steps(EKS_JOB)[0]["run"]
    assert '[ "$KRC_EKS_MAX_RUN_MINUTES" -gt "$MAX_BUDGET_MINUTES" ]' in check
    assert int(EKS["on"]["workflow_dispatch"]["inputs"]["max_run_minutes"]["default"]) <= int(
        EKS_JOB["env"]["MAX_BUDGET_MINUTES"]
    )


# --- the Gateway implementation on EKS ---------------------------------------------------------------

RECORDER = f"#!{sys.executable}\n"


def test_the_eks_gpu_profile_installs_a_gateway_the_eks_provider_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = profiles.load("eks-gpu")
    assert profile.gateway_install in gateway_charts.IMPLEMENTATIONS, "installed by the run, not assumed"
    assert (
        profile.gateway_class
        == gateway_charts.plan(profile.gateway_install, profile.gateway_class).gateway_class["metadata"][
            "name"
        ]
    )
    standin_tools.install(tmp_path, monkeypatch, RECORDER, "helm", "go")  # what check_usable looks for
    monkeypatch.setattr(EksProvider, "preflight", lambda self: None)  # AWS: tests of their own
    options = RunOptions(provider="eks", profile=profile, run_dir=tmp_path / "run", run_id="eks-1-1")
    Environment(options).check_input()


def test_the_eks_job_has_what_the_gateway_install_needs() -> None:
    uses = [s.get("uses", "") for s in steps(EKS_JOB)]
    assert any(u.startswith("actions/setup-go@") for u in uses), "Gateway API CRDs and vegeta: Go modules"
    assert any(u.startswith("azure/setup-helm@") for u in uses), "Istio: Helm charts"
