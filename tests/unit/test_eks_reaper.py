"""The EKS reaper: which runs are past their deadline (pure selection over the tagging API's answer),
and destroying one of them from remote state on a machine that never ran it.

Only the `aws` CLI boundary (eks_preflight.run_aws) and the terraform binary (a recording stand-in)
are faked; whether AWS's tagging API lists every resource the module makes is not checked here.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import standins as standin_tools

from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE
from conformance.providers import eks_preflight, eks_reaper
from conformance.providers.eks import cluster_name
from conformance.providers.eks_preflight import AwsError
from conformance.providers.eks_reaper import GRACE_S, STUCK_AFTER_S, TaggedRun, runs_from_tags, select
from conformance.providers.terraform import RunWorkspace

NOW = datetime.datetime(2026, 12, 7, 12, 0, tzinfo=datetime.UTC).timestamp()


def stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource(
    arn: str, run_id: str | None, expires: str | None, managed_by: str = "kuberay-conformance"
) -> dict:
    tags = [{"Key": "kuberay-conformance/managed-by", "Value": managed_by}, {"Key": "owner", "Value": "ci"}]
    if run_id is not None:
        tags.append({"Key": "kuberay-conformance/run-id", "Value": run_id})
    if expires is not None:
        tags.append({"Key": "kuberay-conformance/expires-at", "Value": expires})
    return {"ResourceARN": arn, "Tags": tags}


def run(run_id: str, minutes_ago: float | None) -> TaggedRun:
    expires = None if minutes_ago is None else NOW - minutes_ago * 60
    return TaggedRun("us-west-2", run_id, expires, 3)


# --- selection -----------------------------------------------------------------------------------


def test_resources_are_grouped_by_run_and_foreign_ones_ignored() -> None:
    runs = runs_from_tags(
        "us-west-2",
        [
            resource("arn:aws:eks:us-west-2:1:cluster/krc-a", "eks-1-1", stamp(NOW - 3600)),
            resource("arn:aws:ec2:us-west-2:1:natgateway/nat-1", "eks-1-1", stamp(NOW - 3600)),
            resource("arn:aws:ec2:us-west-2:1:vpc/vpc-2", "eks-2-1", stamp(NOW + 3600)),
            resource("arn:aws:ec2:us-west-2:1:vpc/vpc-3", "eks-3-1", stamp(NOW), managed_by="someone-else"),
        ],
    )
    assert runs == [
        TaggedRun("us-west-2", "eks-1-1", NOW - 3600, 2),
        TaggedRun("us-west-2", "eks-2-1", NOW + 3600, 1),
    ]


def test_a_run_is_reaped_only_after_its_deadline_and_the_guards_grace() -> None:
    grace_min = GRACE_S / 60
    chosen = select(
        [run("running", -30), run("guard-at-work", grace_min - 1), run("left", grace_min + 1)], NOW
    )
    assert [r.run_id for r in chosen.destroy] == ["left"]
    assert chosen.stuck == [] and chosen.undecidable == []


def test_oldest_first_and_runs_earlier_reapers_missed_are_flagged() -> None:
    old = run("old", STUCK_AFTER_S / 60 + 5)
    chosen = select([run("recent", GRACE_S / 60 + 5), old], NOW)
    assert [r.run_id for r in chosen.destroy] == ["old", "recent"]
    assert chosen.stuck == [old]


def test_runs_without_a_readable_deadline_or_run_id_are_never_destroyed_automatically() -> None:
    runs = runs_from_tags(
        "us-west-2",
        [
            resource("arn:1", "eks-5-1", "tomorrow"),
            resource("arn:2", None, stamp(NOW - 86400)),
            resource("arn:3", "../../etc", stamp(NOW - 86400)),
        ],
    )
    chosen = select(runs, NOW)
    assert chosen.destroy == []
    assert sorted(r.run_id for r in chosen.undecidable) == ["", "../../etc", "eks-5-1"]


def test_a_run_with_one_readable_deadline_uses_it() -> None:
    (tagged,) = runs_from_tags(
        "us-west-2",
        [resource("arn:1", "eks-6-1", "garbled"), resource("arn:2", "eks-6-1", stamp(NOW - 7200))],
    )
    assert tagged.expires_at == NOW - 7200
    assert select([tagged], NOW).destroy == [tagged]


# --- `expired` over regions, through the aws boundary ---------------------------------------------


def test_expired_prints_what_to_destroy_and_fails_on_a_region_it_could_not_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = {
        "us-west-2": [
            resource("arn:1", "eks-7-1", stamp(NOW - 7200)),
            resource("arn:2", "eks-8-1", stamp(NOW)),
        ],
        "eu-west-1": [resource("arn:3", "eks-9-2", stamp(NOW - 4 * 3600))],
    }

    def boundary(region: str) -> Any:
        def call(args: Sequence[str]) -> Any:
            assert args[:2] == ["resourcegroupstaggingapi", "get-resources"]
            assert "Key=kuberay-conformance/managed-by,Values=kuberay-conformance" in args
            if region == "ap-south-1":
                raise AwsError("`aws resourcegroupstaggingapi get-resources` failed: (AccessDeniedException)")
            return {"ResourceTagMappingList": answers.get(region, [])}

        return call

    monkeypatch.setattr(eks_preflight, "run_aws", boundary)
    code = eks_reaper.expired(["us-west-2", "eu-west-1", "ap-south-1"], most=5, now=NOW)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["eu-west-1 eks-9-2", "us-west-2 eks-7-1"]
    assert "ap-south-1" in err and "AccessDeniedException" in err
    assert "eks-9-2" in err, "4 h past its deadline: flagged as stuck"
    assert code == EXIT_ENVIRONMENT


def test_expired_leaves_the_rest_for_the_next_round(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tagged = [resource(f"arn:{i}", f"eks-{i}-1", stamp(NOW - 3600 - i)) for i in range(4)]
    monkeypatch.setattr(
        eks_preflight, "run_aws", lambda region: lambda args: {"ResourceTagMappingList": tagged}
    )
    assert eks_reaper.expired(["us-west-2"], most=2, now=NOW) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["us-west-2 eks-3-1", "us-west-2 eks-2-1"]
    assert err.count("left for the next round") == 2


# --- `destroy`: a run this machine never saw, from remote state --------------------------------------

STANDIN_TERRAFORM = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
if args and args[0].startswith("-chdir="):
    args = args[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"args": args}}) + "\\n")
if args[:2] == ["workspace", "list"]:
    print("* default")
    for name in os.environ.get("STANDIN_WORKSPACES", "").split():
        print("  " + name)
"""


@pytest.fixture
def terraform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = standin_tools.install(tmp_path, monkeypatch, STANDIN_TERRAFORM, "terraform")
    monkeypatch.setenv("KRC_TERRAFORM", str(tmp_path / "bin" / "terraform"))
    monkeypatch.setenv("KRC_TF_STATE_DIR", str(tmp_path / "state"))
    backend = tmp_path / "backend.hcl"
    backend.write_text('bucket = "krc-state"\nkey = "eks/terraform.tfstate"\nregion = "us-west-2"\n')
    monkeypatch.setenv("KRC_TF_BACKEND", "s3")
    monkeypatch.setenv("KRC_TF_BACKEND_CONFIG", str(backend))
    monkeypatch.delenv("KRC_EKS_REGION", raising=False)
    return log


def verbs(log: Path) -> list[str]:
    return [" ".join(a for a in c["args"] if not a.startswith("-")) for c in standin_tools.calls(log)]


def test_destroy_adopts_the_runs_remote_state_and_destroys_that_workspace(
    terraform: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_WORKSPACES", "krc-eks-41-1 krc-eks-42-1")
    assert eks_reaper.destroy("eu-west-1", "eks-42-1") == 0
    assert verbs(terraform) == [
        "init",
        "workspace list",
        "workspace select krc-eks-42-1",
        "destroy",
        "workspace select default",
        "workspace delete krc-eks-42-1",
    ]
    init = standin_tools.calls(terraform)[0]["args"]
    assert any(a.startswith("-backend-config=") and a.endswith("backend.hcl") for a in init)
    workspace = RunWorkspace.for_run("eks", "eks-42-1")
    variables = json.loads(workspace.var_file.read_text())
    assert variables["region"] == "eu-west-1" and variables["run_id"] == "eks-42-1"
    assert variables["cluster_name"] == cluster_name("eks-42-1")
    assert (workspace.module_dir / "krc_backend.tf").read_text().count('backend "s3"') == 1
    assert workspace.state == "destroyed"


def test_destroy_of_a_run_the_backend_does_not_hold_destroys_nothing(
    terraform: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STANDIN_WORKSPACES", "krc-eks-41-1")
    assert eks_reaper.destroy("eu-west-1", "eks-42-1") == 0
    assert verbs(terraform) == ["init", "workspace list"]
    assert "holds no workspace of this run" in capsys.readouterr().err
    assert RunWorkspace.for_run("eks", "eks-42-1").state == "absent"


def test_destroy_without_remote_state_is_refused_in_one_line(
    terraform: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KRC_TF_BACKEND")
    monkeypatch.delenv("KRC_TF_BACKEND_CONFIG")
    assert eks_reaper.destroy("eu-west-1", "eks-42-1") == EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "KRC_TF_BACKEND" in err
    assert standin_tools.calls(terraform) == []


def test_destroy_refuses_a_run_id_that_is_not_one(terraform: Path) -> None:
    assert eks_reaper.destroy("eu-west-1", "../../etc") == EXIT_ENVIRONMENT
    assert standin_tools.calls(terraform) == []
