"""The Terraform kind provider's (KRC_KIND_VIA=terraform) and the eks provider's command sequence,
against a stand-in `terraform` that records its argv.

This checks the orchestration only (which commands run, in which order, in which directory, with
which variables, and that destroy follows failures and interrupts). Nothing here creates a cluster:
no Terraform provider, kind, Docker or AWS account is involved.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.errors import ProvisioningError, UsageError
from conformance.providers import get_provider
from conformance.providers.eks import EksProvider
from conformance.providers.kind_terraform import KindTerraformProvider as KindProvider
from conformance.providers.terraform import RunWorkspace, Terraform, start_guard

KUBECONFIG_TEXT = "apiVersion: v1\nkind: Config\nclusters: []\n"

# The stand-in: records argv and the directory -chdir names, answers `output -json`, and fails
# or hangs in the sub-command the test names.
STANDIN_TERRAFORM = f"""#!{sys.executable}
import json, os, signal, sys, time
args = sys.argv[1:]
chdir = args.pop(0).split("=", 1)[1] if args and args[0].startswith("-chdir=") else os.getcwd()
def record(**extra):
    with open(os.environ["STANDIN_LOG"], "a") as log:
        log.write(json.dumps({{"args": args, "chdir": chdir, **extra}}) + "\\n")
record()
command = args[0] if args else ""
if os.environ.get("STANDIN_FAIL") == command:
    print("Error: simulated failure of " + command, file=sys.stderr)
    sys.exit(1)
if os.environ.get("STANDIN_HANG") == command:
    def stop(signum, frame):
        record(signal=signal.Signals(signum).name)
        sys.exit(1)
    signal.signal(signal.SIGINT, stop)
    open(os.environ["STANDIN_LOG"] + ".hanging", "w").close()
    time.sleep(60)
    sys.exit(0)
if command == "output":
    print(json.dumps({{
        "kubeconfig": {{"value": {KUBECONFIG_TEXT!r}, "sensitive": True}},
        "cluster_name": {{"value": "the-cluster"}},
        "region": {{"value": "eu-west-1"}},
        "gpu_taint": {{"value": "nvidia.com/gpu=present:NoSchedule"}},
    }}))
"""

# Answers the read-only calls the eks provider makes before anything is created: who am I, and
# the preflight's zones, offerings, instance types and quotas (eks_preflight.py), all generous.
STANDIN_AWS = f"""#!{sys.executable}
import json, os, sys
if os.environ.get("STANDIN_AWS_FAIL"):
    print("Unable to locate credentials.", file=sys.stderr)
    sys.exit(255)
args = sys.argv[1:]
verb = " ".join(args[:2])
region = args[args.index("--region") + 1]
zones = [region + z for z in "abc"]
if verb == "ec2 describe-availability-zones":
    print(json.dumps({{"AvailabilityZones": [{{"ZoneName": z}} for z in zones]}}))
elif verb == "ec2 describe-instance-type-offerings":
    wanted = [a for a in args if a.startswith("Name=instance-type")][0].split("Values=")[1].split(",")
    offers = [{{"InstanceType": t, "Location": z}} for t in wanted for z in zones]
    print(json.dumps({{"InstanceTypeOfferings": offers}}))
elif verb == "ec2 describe-instance-types":
    types = args[args.index("--instance-types") + 1 : args.index("--region")]
    facts = [{{"InstanceType": t, "VCpuInfo": {{"DefaultVCpus": 4}}}} for t in types]
    print(json.dumps({{"InstanceTypes": facts}}))
elif verb == "service-quotas get-service-quota":
    print(json.dumps({{"Quota": {{"Value": 1000.0}}}}))
else:
    print(json.dumps({{"Account": "123456789012", "Arn": "arn:aws:sts::123456789012:assumed-role/ci/run"}}))
"""


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A PATH of stand-in tools and a state root in tmp_path; yields the terraform call log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"terraform": STANDIN_TERRAFORM, "aws": STANDIN_AWS}
    for tool in ("kind", "helm", "docker"):
        scripts[tool] = "#!/bin/sh\nexit 0\n"
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "terraform-calls.jsonl"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("KRC_TERRAFORM", str(bin_dir / "terraform"))
    monkeypatch.setenv("KRC_TF_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STANDIN_LOG", str(log))
    # The GPU workers' simulated GPUs are patched through the API of a real cluster; none here.
    monkeypatch.setenv("KRC_KIND_GPU_WORKERS", "0")
    monkeypatch.setenv("KRC_KIND_VIA", "terraform")  # the kind CLI provider has tests of its own
    for name in (
        "KRC_TF_BACKEND",
        "KRC_TF_BACKEND_CONFIG",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "KRC_EKS_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    yield log
    _stop_guards(tmp_path / "state")


def _stop_guards(state: Path) -> None:
    """Stop any budget guard a failed test left behind (only the PIDs recorded in tmp_path)."""
    for record in state.glob("*/*/record.json"):
        pid = json.loads(record.read_text()).get("guard_pid")
        cmdline = Path(f"/proc/{pid}/cmdline")
        if isinstance(pid, int) and cmdline.exists() and str(record.parent).encode() in cmdline.read_bytes():
            os.kill(pid, signal.SIGKILL)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def commands(log: Path) -> list[list[str]]:
    """Each call as its sub-command and the arguments that matter (paths shortened to names)."""
    return [[re.sub(r"/\S*/", "", a) for a in c["args"]] for c in calls(log)]


def verbs(log: Path) -> str:
    return " ".join(c["args"][0] for c in calls(log))


def _eks_env(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    monkeypatch.setenv("KRC_EKS_REGION", "eu-west-1")
    monkeypatch.setenv("KRC_EKS_MAX_RUN_MINUTES", "90")
    monkeypatch.setenv("KRC_OWNER", "ci-nightly")
    # The eks provider refuses to start without remote state (test_eks_remote_state.py).
    backend = Path(os.environ["STANDIN_LOG"]).with_name("backend.hcl")
    backend.write_text('bucket = "krc-state"\nkey = "eks/terraform.tfstate"\nregion = "eu-west-1"\n')
    monkeypatch.setenv("KRC_TF_BACKEND", "s3")
    monkeypatch.setenv("KRC_TF_BACKEND_CONFIG", str(backend))
    monkeypatch.delenv("KRC_EKS_KARPENTER", raising=False)
    for key, value in extra.items():
        monkeypatch.setenv(key, value)


# --- kind ----------------------------------------------------------------------------------------


def test_kind_up_runs_init_workspace_apply_output_in_the_runs_own_copy(standins: Path) -> None:
    cluster = KindProvider(run_id="20261129T100000Z-ab12").up()
    assert commands(standins) == [
        ["init", "-input=false", "-no-color"],
        ["workspace", "select", "-or-create=true", "krc-20261129t100000z-ab12"],
        ["apply", "-input=false", "-auto-approve", "-no-color", "-var-file=run.tfvars.json"],
        ["output", "-json"],
    ]
    workspace = RunWorkspace.for_run("kind", "20261129T100000Z-ab12")
    assert {c["chdir"] for c in calls(standins)} == {str(workspace.module_dir)}
    assert (workspace.module_dir / "main.tf").exists(), "the module is copied into the run's directory"
    variables = json.loads(workspace.var_file.read_text())
    assert variables["cluster_name"] == "krc-20261129t100000z-ab12"
    assert variables["kubeconfig_path"] == str(workspace.kubeconfig)
    assert variables["worker_count"] == 1  # the kind CLI provider's default, shared
    assert cluster.kubeconfig == workspace.kubeconfig
    assert cluster.kubeconfig.read_text() == KUBECONFIG_TEXT
    assert cluster.kubeconfig.stat().st_mode & 0o077 == 0, "the kubeconfig is private"
    assert workspace.state == "applied"


def test_kind_down_destroys_then_deletes_the_workspace(standins: Path) -> None:
    provider = KindProvider(run_id="run-a")
    provider.up()
    standins.unlink()
    assert provider.down() == []
    assert commands(standins) == [
        [
            "destroy",
            "-input=false",
            "-auto-approve",
            "-no-color",
            "-lock-timeout=0s",
            "-var-file=run.tfvars.json",
        ],
        ["workspace", "select", "default"],
        ["workspace", "delete", "krc-run-a"],
    ]
    assert RunWorkspace.for_run("kind", "run-a").state == "destroyed"
    assert provider.status().exists is False


def test_two_runs_have_separate_directories_and_workspaces(standins: Path) -> None:
    KindProvider(run_id="run-a").up()
    KindProvider(run_id="run-b").up()
    selected = [c for c in calls(standins) if c["args"][:2] == ["workspace", "select"]]
    assert [c["args"][-1] for c in selected] == ["krc-run-a", "krc-run-b"]
    assert selected[0]["chdir"] != selected[1]["chdir"]


def test_a_failed_apply_is_destroyed_and_reported(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "apply")
    with pytest.raises(ProvisioningError, match="simulated failure of apply"):
        KindProvider(run_id="run-f").up()
    assert verbs(standins) == "init workspace apply destroy workspace workspace"


def test_a_failed_apply_is_kept_with_keep_cluster(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "apply")
    with pytest.raises(ProvisioningError):
        KindProvider(run_id="run-k", keep_cluster=True).up()
    assert "destroy" not in verbs(standins)
    assert RunWorkspace.for_run("kind", "run-k").state == "applying", "left for `cluster down` to find"
    assert [w.run_id for w in RunWorkspace.live("kind")] == ["run-k"]


def test_a_failed_init_destroys_nothing(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "init")
    with pytest.raises(ProvisioningError, match="init"):
        KindProvider(run_id="run-i").up()
    assert verbs(standins) == "init"


def test_an_interrupted_apply_is_stopped_with_sigint_then_destroyed(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_HANG", "apply")
    hanging = Path(str(standins) + ".hanging")
    # Ctrl-C as a user's shell delivers it: Python's own handler, whatever an earlier test of the
    # session left installed (in the whole `make test` session this test once saw no KeyboardInterrupt).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_when_apply_hangs() -> None:
        deadline = time.monotonic() + 20
        while not hanging.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # poll-interval: until the stand-in apply is hanging
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # as Ctrl-C would

    threading.Thread(target=interrupt_when_apply_hangs, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            KindProvider(run_id="run-int").up()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert {"signal": "SIGINT"}.items() <= calls(standins)[3].items(), "apply was asked to stop gracefully"
    assert verbs(standins) == "init workspace apply apply destroy workspace workspace"


def test_cluster_down_without_a_run_destroys_every_run_left_behind(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    KindProvider(run_id="kept-1", keep_cluster=True).up()
    KindProvider(run_id="kept-2", keep_cluster=True).up()
    assert KindProvider().status().exists
    standins.unlink()
    assert get_provider("kind").down() == []
    assert [c["args"][-1] for c in calls(standins) if c["args"][:2] == ["workspace", "delete"]] == [
        "krc-kept-1",
        "krc-kept-2",
    ]
    assert RunWorkspace.live("kind") == []


def test_remote_backend_is_written_into_the_copy_and_passed_to_init(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "backend.hcl"
    config.write_text('bucket = "tf-state"\nkey = "krc/kind.tfstate"\nregion = "eu-west-1"\n')
    monkeypatch.setenv("KRC_TF_BACKEND", "s3")
    monkeypatch.setenv("KRC_TF_BACKEND_CONFIG", str(config))
    KindProvider(run_id="run-r").up()
    assert calls(standins)[0]["args"] == ["init", "-input=false", "-no-color", f"-backend-config={config}"]
    backend = RunWorkspace.for_run("kind", "run-r").module_dir / "krc_backend.tf"
    assert 'backend "s3" {}' in backend.read_text()


@pytest.mark.parametrize("missing", ["kind", "helm", "docker"])
def test_kind_missing_tool_is_a_one_line_usage_error_before_anything(
    standins: Path, tmp_path: Path, missing: str
) -> None:
    (tmp_path / "bin" / missing).unlink()
    with pytest.raises(UsageError) as error:
        KindProvider(run_id="run-m").up()
    assert missing in error.value.one_line() and "\n" not in error.value.one_line()
    assert calls(standins) == []
    assert not (tmp_path / "state" / "kind").exists(), "nothing was created"


def test_without_terraform_or_tofu_the_error_says_so(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KRC_TERRAFORM")
    (Path(os.environ["PATH"]) / "terraform").unlink()
    with pytest.raises(UsageError, match="terraform or tofu"):
        KindProvider(run_id="run-t").preflight()


# --- eks -----------------------------------------------------------------------------------------


def test_eks_refuses_to_start_without_a_budget_guard(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _eks_env(monkeypatch)
    monkeypatch.delenv("KRC_EKS_MAX_RUN_MINUTES")
    with pytest.raises(UsageError, match=r"budget guard.*KRC_EKS_MAX_RUN_MINUTES"):
        EksProvider(run_id="run-e").up()
    assert calls(standins) == []


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KRC_EKS_REGION", "mars-north-1", "region mars-north-1 is not supported"),
        ("KRC_EKS_MAX_RUN_MINUTES", "5", "out of range"),
        ("KRC_EKS_GPU_INSTANCE_TYPE", "m5.xlarge", "not an NVIDIA GPU instance type"),
        ("STANDIN_AWS_FAIL", "1", "no usable AWS credentials"),
    ],
)
def test_eks_bad_settings_are_usage_errors_before_anything(
    standins: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    _eks_env(monkeypatch, **{variable: value})
    with pytest.raises(UsageError, match=message) as error:
        EksProvider(run_id="run-e").up()
    assert "\n" not in error.value.one_line()
    assert calls(standins) == []


def test_eks_without_aws_cli_is_a_usage_error(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _eks_env(monkeypatch)
    (tmp_path / "bin" / "aws").unlink()
    with pytest.raises(UsageError, match="needs aws on PATH"):
        EksProvider(run_id="run-e").up()


def test_eks_up_tags_the_deadline_and_starts_a_guard_that_down_stops(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _eks_env(monkeypatch, KRC_EKS_GPU_INSTANCE_TYPE="g6.xlarge")
    started = time.time()
    provider = EksProvider(run_id="20261129T100000Z-cd34")
    cluster = provider.up()
    workspace = RunWorkspace.for_run("eks", "20261129T100000Z-cd34")
    variables = json.loads(workspace.var_file.read_text())
    assert variables["region"] == "eu-west-1" and variables["owner"] == "ci-nightly"
    assert variables["run_id"] == "20261129T100000Z-cd34"
    assert len(variables["cluster_name"]) <= 23
    assert variables["gpu_node_group"]["instance_types"] == ["g6.xlarge"]
    expires = time.mktime(time.strptime(variables["expires_at"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert abs(expires - (started + 90 * 60)) < 120
    assert cluster.facts["gpu_taint"] == "nvidia.com/gpu=present:NoSchedule"
    guard_pid = workspace.record()["guard_pid"]
    assert Path(f"/proc/{guard_pid}").exists(), "the budget guard runs while the cluster exists"
    assert provider.down() == []
    _wait_gone(guard_pid)


def _wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it: it is our child in this test process
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.05)  # poll-interval: until the guard process has exited
    pytest.fail(f"budget guard {pid} is still running after down")


def test_budget_guard_stops_the_run_and_destroys_at_the_deadline(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KRC_GUARD_GRACE_S", "3")
    workspace = RunWorkspace.for_run("eks", "run-g")
    workspace.module_dir.mkdir(parents=True)
    workspace.var_file.write_text("{}\n")
    workspace.update(state="applied")
    # Stands for the harness process: the guard must SIGTERM it, then destroy since it did not.
    harness = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    terraform = Terraform(Path(os.environ["KRC_TERRAFORM"]), workspace)
    start_guard(terraform, time.time() + 1, harness.pid)
    assert harness.wait(timeout=20) == -signal.SIGTERM
    deadline = time.monotonic() + 20
    while workspace.state != "destroyed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workspace.record().get("destroyed_by") == "budget guard"
    assert commands(standins)[-1][:1] == ["destroy"] and "-lock-timeout=10m" in commands(standins)[-1]


def test_kind_worker_count_out_of_range_is_a_usage_error(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KRC_KIND_WORKERS", "9")
    with pytest.raises(UsageError, match=r"KRC_KIND_WORKERS='9' is out of range"):
        KindProvider(run_id="run-w").up()
    assert calls(standins) == []
