"""Remote state is required for EKS: refused in one line before anything is created or asked of AWS,
on a laptop as in CI (the reaper can only destroy what a backend holds)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import standins as standin_tools

from conformance.errors import EXIT_USAGE, UsageError
from conformance.providers import eks_preflight
from conformance.providers.eks import EksProvider

RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"tool": os.path.basename(sys.argv[0]), "args": sys.argv[1:]}}) + "\\n")
"""


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    recorded = standin_tools.install(tmp_path, monkeypatch, RECORDER, "terraform", "aws", "helm")
    monkeypatch.setenv("KRC_TERRAFORM", str(tmp_path / "bin" / "terraform"))
    monkeypatch.setenv("KRC_TF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KRC_EKS_REGION", "us-west-2")
    monkeypatch.setenv("KRC_EKS_MAX_RUN_MINUTES", "90")
    for name in ("KRC_TF_BACKEND", "KRC_TF_BACKEND_CONFIG"):
        monkeypatch.delenv(name, raising=False)

    def no_aws(region: str) -> object:
        raise AssertionError("AWS must not be asked before the state question is settled")

    monkeypatch.setattr(eks_preflight, "run_aws", no_aws)
    return recorded


def test_eks_without_a_backend_is_refused_before_anything(log: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as error:
        EksProvider(run_id="eks-1-1").up()
    line = error.value.one_line()
    assert error.value.exit_code == EXIT_USAGE and "\n" not in line
    assert "no backend is configured" in line
    assert "KRC_TF_BACKEND=s3" in line and "KRC_TF_BACKEND_CONFIG" in line and "docs/eks.md" in line
    assert standin_tools.calls(log) == []
    assert not (tmp_path / "state").exists()


def test_half_a_backend_is_refused_too(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRC_TF_BACKEND", "s3")
    with pytest.raises(UsageError, match="go together"):
        EksProvider(run_id="eks-1-1").up()
    assert standin_tools.calls(log) == []


def test_a_backend_lets_the_run_go_on_to_ask_aws(
    log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "backend.hcl"
    config.write_text('bucket = "krc-state"\n')
    monkeypatch.setenv("KRC_TF_BACKEND", "s3")
    monkeypatch.setenv("KRC_TF_BACKEND_CONFIG", str(config))
    with pytest.raises(AssertionError, match="must not be asked"):
        EksProvider(run_id="eks-1-1").up()  # past the state check: the next step asks AWS
