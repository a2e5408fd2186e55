"""The plugin's bookkeeping on a real cluster: outcomes, metrics, diagnostics, cleanup, interrupts.

Each test runs a small suite of its own (written to a temporary folder) through pytest with
the plugin, against the session's local cluster, and reads back what the run wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from plugin_runs import plugin_command, run_namespaces

from conformance.providers.base import Cluster

SUITE = """
import pytest
from kubernetes import client
from conformance.kube.wait import WaitTimeout, wait_for

pytestmark = pytest.mark.area("raycluster")


def test_passes(metrics):
    metrics["answer_s"] = 4.2


def test_fails(api, namespace):
    client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "evidence"}})
    assert 1 + 1 == 3, "the system under test misbehaved"


@pytest.mark.kuberay_issue(1141)
def test_errors(namespace):
    raise WaitTimeout("a precondition", 1, "never seen")


@pytest.mark.requires("gate:RayCronJob")
def test_not_applicable():
    raise AssertionError("must not run")
"""

# The wait outlives a passing API error (it counts as "not yet"): a check that ended by itself
# before the signal came would test nothing about the signal.
HANGS = """
import pytest
from kubernetes import client
from conformance.kube.wait import poll_until

pytestmark = pytest.mark.area("rayjob")


def test_waits_forever(api, namespace):
    core = client.CoreV1Api(api)
    names = lambda: [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items]
    poll_until(lambda: "never" in names() or None, what="a config map that never comes", timeout=600,
               retry_on=(Exception,))
"""


def _pytest(suite_dir: Path, run_dir: Path) -> list[str]:
    return plugin_command(suite_dir, run_dir, "--conformance-provider", "local")


def _write_suite(tmp_path: Path, text: str) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_selfcheck.py").write_text(text)
    return suite


def _run_suite(tmp_path: Path, text: str, run_dir: Path, *extra: str) -> tuple[Any, dict, dict]:
    """Run a suite through the plugin; its output, summary.json and the tests by function name."""
    done = subprocess.run(
        [*_pytest(_write_suite(tmp_path, text), run_dir), *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    return done, summary, {t["id"].rsplit("::", 1)[-1]: t for t in summary["tests"]}


def test_outcomes_metrics_and_diagnostics_are_recorded(local_cluster: Cluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done, summary, by_name = _run_suite(tmp_path, SUITE, run_dir, "--conformance-keep-failed")
    assert by_name["test_passes"]["outcome"] == "passed", done.stdout[-2000:]
    assert by_name["test_passes"]["metrics"] == {"answer_s": 4.2}
    assert by_name["test_fails"]["outcome"] == "failed"
    assert "the system under test misbehaved" in by_name["test_fails"]["reason"]
    assert by_name["test_errors"]["outcome"] == "error"
    assert by_name["test_errors"]["issues"] == ["kuberay#1141"]
    assert by_name["test_not_applicable"]["outcome"] == "not_applicable"
    assert by_name["test_not_applicable"]["reason"] == "feature gate RayCronJob is off in the operator"
    assert summary["verdict"] == "not conformant"
    bundle = next((run_dir / "diagnostics").glob("*test-fails*"))
    assert (bundle / "events.txt").exists()
    assert (bundle / "ray-resources.yaml").exists()
    operator_logs = list((bundle / "operator").glob("*.log"))
    assert operator_logs and operator_logs[0].stat().st_size > 0
    assert (next((run_dir / "diagnostics").glob("*test-errors*")) / "events.txt").exists()
    # --keep-failed: the namespaces of the failed and the errored check stay for inspection.
    kept = run_namespaces(local_cluster.kubeconfig, run_dir.name)
    assert sorted(name.rsplit("-", 1)[0] for name in kept) == ["krc-test-errors", "krc-test-fails"]
    core = client.CoreV1Api(config.new_client_from_config(str(local_cluster.kubeconfig)))
    assert core.read_namespaced_config_map("evidence", next(n for n in kept if "fails" in n))
    for name in kept:
        core.delete_namespace(name)


def test_sigterm_mid_check_still_writes_an_incomplete_summary_and_cleans_up(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run = subprocess.Popen(
        _pytest(_write_suite(tmp_path, HANGS), run_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert run.stdout is not None
    for line in run.stdout:
        if "waiting for a config map that never comes" in line:
            break
    else:
        pytest.fail("the check never started waiting")
    run.send_signal(signal.SIGTERM)
    output = run.stdout.read()
    assert run.wait(timeout=300) != 0, output
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = [(t["outcome"], t["reason"]) for t in summary["tests"]]
    assert summary["complete"] is False, f"{outcomes}\n{output[-3000:]}"
    assert summary["verdict"] == "incomplete"
    assert run_namespaces(local_cluster.kubeconfig, run_dir.name) == []
    assert os.path.islink(run_dir.parent / "latest")


STUCK = """
import time
import pytest
from kubernetes import client

pytestmark = pytest.mark.area("rayjob")


def test_hangs_outside_any_wait(api, namespace):
    client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "evidence"}})
    while True:  # a hang no typed wait bounds: only the hard cap per check ends it
        time.sleep(1)  # poll-interval: stands for code stuck in a call


def test_after_it_still_runs():
    pass
"""


def test_the_hard_cap_per_check_turns_a_hang_into_an_error_with_diagnostics(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    done, _, by_name = _run_suite(tmp_path, STUCK, run_dir, "--conformance-timeout", "check=20")
    hung = by_name["test_hangs_outside_any_wait"]
    assert hung["outcome"] == "error", done.stdout[-2000:]
    assert "Timeout" in hung["reason"] and "20" in hung["reason"]
    assert by_name["test_after_it_still_runs"]["outcome"] == "passed"
    bundle = next((run_dir / "diagnostics").glob("*hangs-outside*"))
    assert (bundle / "events.txt").exists()
    assert run_namespaces(local_cluster.kubeconfig, run_dir.name) == []
