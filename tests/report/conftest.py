"""Real runs for the report's tests: small suites run through pytest with the conformance plugin.

Each run is a real pytest session with the plugin: it writes summary.json, junit.xml,
allure-results/, timelines/ and the reports, as a conformance run does. The checks of these
suites do not touch a cluster (they pass, fail, error, skip or hang by themselves), so the
run points the `existing` provider at a port where nothing listens: preparing the
environment fails at once, and no check here needs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_runs import plugin_command

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "reports" / "test-artifacts"  # screenshots; reports/ is git-ignored

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]
current-context: nowhere
users: [{name: nobody, user: {token: none}}]
"""

HEADER = """
import os
import threading
from pathlib import Path

import pytest

EARLIER = os.environ.get("KRC_REPORT_PHASE") == "earlier"
"""

# One snippet per outcome kind; a run's suite is made of the snippets it needs.
SNIPPETS = {
    "passed": """
@pytest.mark.area("raycluster")
def test_head_becomes_ready(metrics):
    metrics["head_ready_s"] = 3.2


@pytest.mark.area("autoscaling")
def test_workers_follow_the_load(timeline):
    workers = timeline.autoscaling("workers while 20 tasks are queued")
    workers.event("tasks queued", t=1)
    for t, observed, wanted in [(0, 1, 1), (4, 1, 3), (9, 3, 3), (70, 3, 1), (95, 1, 1)]:
        workers.replicas("small-group", observed, desired=wanted, t=t)


@pytest.mark.area("fault-recovery")
def test_deleted_worker_is_replaced(metrics):
    metrics["recovery_s"] = 22.7
    metrics["operator_recovery_s"] = 13.8


@pytest.mark.area("upgrade")
def test_upgrade_keeps_serving(timeline, metrics):
    upgrade = timeline.upgrade("incremental upgrade at 50 requests/s")
    upgrade.event("spec changed", t=2)
    for t in range(12):
        new = min(100, max(0, (t - 2) * 20))
        errors = {"http_503": 2} if t == 6 else {}
        upgrade.second(t, 50, errors, 11.0 + t % 3, 80.0 + 5 * (t == 6), {"old": 100 - new, "new": new})
    metrics["error_rate"] = 2 / 600
""",
    "failed": """
@pytest.mark.area("rayjob")
@pytest.mark.kuberay_issue(3714)
def test_ttl_deletes_the_cluster():
    clusters_left = 1
    assert clusters_left == 0, "the RayCluster was still there 30 s after the TTL"
""",
    "error": """
@pytest.mark.area("fault-recovery")
@pytest.mark.kuberay_issue(1141)
def test_head_is_restored():
    raise TimeoutError("no Ready head pod within 5 s: the environment never got that far")
""",
    "not_applicable": """
@pytest.mark.area("gpu")
def test_gpu_group_scales():
    pytest.skip("not applicable: the cluster has no allocatable GPUs")
""",
    "flaky": """
@pytest.mark.area("autoscaling")
@pytest.mark.flaky(reruns=1)
def test_scale_down_after_idle():
    marker = Path(os.environ["KRC_REPORT_FLAKY_MARKER"])
    if not marker.exists():
        marker.write_text("the first attempt failed")
        assert False, "3 workers left instead of 1"
""",
    "hangs": """
@pytest.mark.area("rayjob")
def test_waits_for_a_job_that_never_ends():
    Path(os.environ["KRC_REPORT_STARTED"]).write_text("waiting")
    threading.Event().wait(300)  # until the run is interrupted
""",
    "keeps_secret": """
from conformance.checks import RUN_KEY

CANARY = "krc-canary-" + "7f3a9c"  # never written out whole by this file's own text


@pytest.mark.area("security")
def test_sees_a_token(request):
    request.config.stash[RUN_KEY].keep_secret(request.node.nodeid, CANARY)
""",
    "leaks_secret": """
@pytest.mark.area("security")
def test_prints_the_token_later():
    assert CANARY == "", f"a message with the token {CANARY}"
""",
    "history": """
@pytest.mark.area("operator")
def test_regresses():
    assert EARLIER, "passed in the earlier run, fails now"


@pytest.mark.area("operator")
def test_gets_fixed():
    assert not EARLIER, "failed in the earlier run, passes now"
""",
}


def _pytest_command(suite: Path, run_dir: Path, kubeconfig: Path) -> list[str]:
    # --rootdir: check ids are the same in every run, as they are in real runs
    options = [f"--rootdir={suite}", "--conformance-provider", "existing"]
    options += ["--conformance-kubeconfig", str(kubeconfig)]
    return plugin_command(suite, run_dir, *options, result_files=True)


class Runs:
    """Makes run folders in one reports folder, as `kuberay-conformance run` lays them out."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.reports = base / "reports"
        self.kubeconfig = base / "kubeconfig"
        self.kubeconfig.write_text(KUBECONFIG)

    def suite(self, name: str, kinds: list[str]) -> Path:
        folder = self.base / f"suite-{name}"
        folder.mkdir()
        (folder / "test_checks.py").write_text(HEADER + "".join(SNIPPETS[k] for k in kinds))
        return folder

    def env(self, name: str, phase: str = "now") -> dict[str, str]:
        return {
            **os.environ,
            "KRC_REPORT_PHASE": phase,
            "KRC_REPORT_FLAKY_MARKER": str(self.base / f"{name}.flaky"),
            "KRC_REPORT_STARTED": str(self.base / f"{name}.started"),
        }

    def start(self, name: str, kinds: list[str], phase: str = "now") -> tuple[subprocess.Popen, Path]:
        run_dir = self.reports / name
        command = _pytest_command(self.suite(name, kinds), run_dir, self.kubeconfig)
        process = subprocess.Popen(
            command,
            env=self.env(name, phase),
            cwd=self.base,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return process, run_dir

    def run(self, name: str, kinds: list[str], phase: str = "now") -> tuple[Path, str]:
        process, run_dir = self.start(name, kinds, phase)
        output, _ = process.communicate(timeout=600)
        assert (run_dir / "summary.json").exists(), output[-3000:]
        return run_dir, output

    @staticmethod
    def report(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
        """`kuberay-conformance report RUN_DIR`, as CI would call it."""
        return subprocess.run(
            [sys.executable, "-m", "conformance.cli", "report", str(run_dir), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
            cwd=ROOT,
        )

    @staticmethod
    def summary(run_dir: Path) -> dict:
        return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path)


@pytest.fixture(scope="session")
def make_runs() -> type[Runs]:
    """For module-scoped fixtures, which cannot use tmp_path: Runs(folder)."""
    return Runs
