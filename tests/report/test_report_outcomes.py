"""Each outcome kind, from a real run: its verdict in summary.json and index.html, and the exit code CI sees.

`kuberay-conformance report RUN_DIR` rebuilds the reports and exits with the run's verdict:
0 conformant, 1 conformance failures, 2 harness or environment errors (an incomplete run).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

STARTED_WITHIN_S = 120
BODY = re.compile(r'<body data-verdict="([^"]*)" data-complete="(\w+)" data-exit-code="(\d)">')
ROW = re.compile(r'<tr class="check" data-id="[^"]*::([^"]+)" data-area="[^"]*" data-status="([^"]+)"')


def _body(run_dir: Path) -> tuple[str, str, str]:
    """The verdict, completeness and exit code index.html states."""
    match = BODY.search((run_dir / "index.html").read_text())
    assert match, "index.html has no verdict"
    return match.group(1), match.group(2), match.group(3)


def _statuses(run_dir: Path) -> dict[str, str]:
    return dict(ROW.findall((run_dir / "index.html").read_text()))


@pytest.mark.parametrize(
    ("kind", "status", "verdict", "exit_code"),
    [
        ("passed", "passed", "conformant", 0),
        ("failed", "failed", "not conformant", 1),
        ("error", "error", "incomplete", 2),
        ("not_applicable", "not_applicable", "conformant", 0),
        ("flaky", "flaky", "conformant", 0),
    ],
)
def test_each_outcome_kind_gives_its_verdict_and_exit_code(
    runs, kind: str, status: str, verdict: str, exit_code: int
) -> None:
    kinds = ["passed"] if kind == "passed" else ["passed", kind]
    run_dir, output = runs.run(kind, kinds)
    assert runs.summary(run_dir)["verdict"] == verdict, output[-3000:]
    assert f"KubeRay conformance: {verdict.upper()} (exit {exit_code})" in output  # the run's own summary
    (run_dir / "index.html").unlink()
    done = runs.report(run_dir, "--no-allure")
    assert done.returncode == exit_code, done.stdout + done.stderr
    assert _body(run_dir) == (verdict, "true", str(exit_code))
    statuses = _statuses(run_dir)
    assert status in statuses.values()
    assert set(statuses.values()) <= {"passed", status}


def test_a_flaky_check_records_its_failed_attempt(runs) -> None:
    run_dir, _ = runs.run("flaky", ["flaky"])
    [test] = runs.summary(run_dir)["tests"]
    assert (test["outcome"], test["attempts"]) == ("passed", 2)
    assert test["reason"] == "attempt 1: AssertionError: 3 workers left instead of 1"


def _interrupt(runs, name: str, signum: int) -> tuple[Path, str]:
    process, run_dir = runs.start(name, ["passed", "hangs"])
    started = Path(runs.env(name)["KRC_REPORT_STARTED"])
    deadline = time.monotonic() + STARTED_WITHIN_S
    while not started.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # polls for the hanging check to begin; the signal is what is tested
    assert started.exists(), "the hanging check never started"
    os.kill(process.pid, signum)
    output, _ = process.communicate(timeout=300)
    return run_dir, output


def test_an_interrupted_run_still_writes_a_report_marked_incomplete(runs) -> None:
    run_dir, output = _interrupt(runs, "sigterm", signal.SIGTERM)
    summary = runs.summary(run_dir)
    assert (summary["complete"], summary["verdict"]) == (False, "incomplete"), output[-3000:]
    assert "KubeRay conformance: INCOMPLETE (exit 2) · the run did not finish" in output
    assert _body(run_dir) == ("incomplete", "false", "2")
    assert 'id="incomplete"' in (run_dir / "index.html").read_text()
    # The check the signal stopped observed nothing: an error of the run, never a pass.
    assert _statuses(run_dir)["test_waits_for_a_job_that_never_ends"] == "error"
    [stopped] = [t for t in summary["tests"] if t["id"].endswith("test_waits_for_a_job_that_never_ends")]
    assert stopped["reason"] == "interrupted: the run stopped while this check ran"
    done = runs.report(run_dir, "--no-allure")
    assert done.returncode == 2, done.stdout + done.stderr


def test_a_killed_run_is_rebuilt_from_its_allure_results_as_incomplete(runs) -> None:
    run_dir, _ = _interrupt(runs, "sigkill", signal.SIGKILL)
    assert not (run_dir / "summary.json").exists()  # nothing ran after the kill
    done = runs.report(run_dir, "--no-allure")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "INCOMPLETE (exit 2)" in done.stdout
    assert _body(run_dir) == ("incomplete", "false", "2")
    assert set(_statuses(run_dir)) == {
        "test_head_becomes_ready",
        "test_workers_follow_the_load",
        "test_deleted_worker_is_replaced",
        "test_upgrade_keeps_serving",
    }


def test_a_folder_without_results_is_a_usage_error(runs, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = runs.report(empty)
    assert done.returncode == 3
    assert "holds no results" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_allure_results_carry_area_test_issue_links_and_parameters(runs) -> None:
    run_dir, _ = runs.run("allure", ["failed", "passed"])
    results = [json.loads(p.read_text()) for p in (run_dir / "allure-results").glob("*-result.json")]
    ttl = next(r for r in results if r["name"] == "test_ttl_deletes_the_cluster")
    labels = {label["name"]: label["value"] for label in ttl["labels"]}
    assert (labels["epic"], labels["feature"], labels["story"]) == (
        "rayjob",
        "test_checks",
        "test_ttl_deletes_the_cluster",
    )
    assert {
        "type": "issue",
        "url": "https://github.com/ray-project/kuberay/issues/3714",
        "name": "kuberay#3714",
    } in ttl["links"]
    page = run_dir / "allure-report" / "index.html"
    assert page.stat().st_size > 100_000, "Allure Report 3 made no single-file report"
    assert not list((run_dir / "allure-report").glob("*.js"))  # one file: its scripts are inside


def test_a_secret_in_any_file_of_the_finished_run_fails_the_check_that_kept_it(runs) -> None:
    """The token reaches summary.json, index.html and junit.xml only through another check's
    message, after the check that saw it passed: only the final search can catch it."""
    run_dir, output = runs.run("leak", ["keeps_secret", "leaks_secret"])
    tests = {t["id"].rsplit("::", 1)[-1]: t for t in runs.summary(run_dir)["tests"]}
    kept = tests["test_sees_a_token"]
    assert kept["outcome"] == "failed", output[-3000:]
    for name in ("summary.json", "junit.xml", "index.html"):
        assert name in kept["reason"], kept["reason"]
    assert "krc-canary-7f3a9c" not in kept["reason"]
    assert _statuses(run_dir)["test_sees_a_token"] == "failed"


def test_a_kept_secret_that_never_leaks_changes_nothing(runs) -> None:
    run_dir, output = runs.run("no-leak", ["keeps_secret"])
    [test] = runs.summary(run_dir)["tests"]
    assert test["outcome"] == "passed", output[-3000:]
    assert not any(b"krc-canary-7f3a9c" in p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
