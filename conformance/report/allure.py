"""The Allure single-file report of a run, made by Allure Report 3 (npm `allure`) with node, no Java.

Writes `<run-dir>/allure-report/index.html` from `<run-dir>/allure-results/`. Allure keeps its
own history (trends, flaky and retried tests) in a JSON-lines file it appends one line to per
report. Each run keeps its own copy, `<run-dir>/allure-history.jsonl`, seeded from the newest
earlier run beside it (or from a file given explicitly), so rebuilding a report never counts a
run twice and a run's report shows only the runs before it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from conformance.errors import HarnessError
from conformance.report import history, npm
from conformance.report.summary import AREAS, HARNESS, Summary, TestResult

OUTPUT = "allure-report"
HISTORY = "allure-history.jsonl"
HISTORY_LINES = 20  # as many earlier reports as our own history window
NODE_MAJOR = 20  # Allure Report 3's dependencies need node 20 or newer
GENERATE_TIMEOUT_S = 600


def build(run_dir: Path, title: str, history_seed: Path | None = None, cache: Path | None = None) -> Path:
    """Generate the single-file report; returns its path. Raises HarnessError when it cannot."""
    results = run_dir / "allure-results"
    if not any(results.glob("*-result.json")):
        raise HarnessError(
            f"{results} holds no Allure results", "the run wrote none (it ended before any check)"
        )
    node = _node()
    cli = npm.ensure(npm.ALLURE, cache) / "cli.js"
    _seed_history(run_dir / HISTORY, history_seed)
    output = run_dir / OUTPUT
    shutil.rmtree(output, ignore_errors=True)
    done = subprocess.run(
        [
            "nice",
            "-n",
            "10",  # the cluster under test shares the machine's cores
            node,
            str(cli),
            "awesome",
            str(results),
            "--single-file",
            "--output",
            str(output),
            "--report-name",
            title,
            "--history-path",
            str(run_dir / HISTORY),
            "--group-by",
            "epic,feature",  # area, then suite module: the tree reads like the conformance matrix
        ],
        cwd=run_dir,  # so no allurerc of the caller's folder changes the report
        env={**os.environ, "ALLURE_NO_ANALYTICS": "true"},
        capture_output=True,
        text=True,
        check=False,
        timeout=GENERATE_TIMEOUT_S,
    )
    page = output / "index.html"
    if done.returncode != 0 or not page.exists():
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise HarnessError(f"Allure Report 3 failed (exit {done.returncode}): {' / '.join(last)}")
    page.write_text(without_analytics(page.read_text()))
    return page


# Allure's page loads Google's tag manager when opened (its "awesome" plugin does not honour
# ALLURE_NO_ANALYTICS). A report opened offline, or inside a company network, must call no one.
_ANALYTICS = re.compile(
    r'<script async src="https://www\.googletagmanager\.com/gtag/js\?id=[^"]*"></script>\s*'
    r"<script>\s*window\.dataLayer[^<]*</script>\s*"
)


def without_analytics(page: str) -> str:
    cleaned = _ANALYTICS.sub("", page)
    if "googletagmanager" in cleaned:
        raise HarnessError(
            "the Allure page calls an analytics service in a way this harness does not know how to remove",
            f"pin npm package allure back to {npm.ALLURE.version} or update conformance/report/allure.py",
        )
    return cleaned


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise HarnessError(
            "node is needed for the Allure report", "install node and npm (`make host-deps` does)"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.match(r"v(\d+)", version.strip())
    if not match or int(match.group(1)) < NODE_MAJOR:
        raise HarnessError(
            f"Allure Report 3 needs node {NODE_MAJOR} or newer; this machine has {version.strip() or 'none'}",
            "install a newer nodejs",
        )
    return node


def _seed_history(target: Path, seed: Path | None) -> None:
    """Start this run's history from the seed's last lines, or empty when there is none."""
    lines = seed.read_text().splitlines() if seed and seed.is_file() else []
    kept = [line for line in lines if line.strip()][-HISTORY_LINES:]
    target.write_text("".join(line + "\n" for line in kept))


def earlier_history(run_dir: Path, started: str) -> Path | None:
    """The Allure history file of the newest run beside this one that started before it."""
    points, _ = history.collect([run_dir.parent], exclude_run=run_dir.name, before=started)
    for point in reversed(points):
        candidate = Path(point.source) / HISTORY
        if candidate.is_file():
            return candidate
    return None


def summary_from_results(run_dir: Path) -> Summary:
    """The summary of a run killed before it wrote summary.json, rebuilt from its Allure results.

    Such a run is incomplete by definition: the check it was in has no result at all.
    """
    summary = Summary(
        run_id=run_dir.name, started="", provider="unknown", profile="unknown", versions={}, complete=False
    )
    summary.environment["notes"] = [
        "summary.json was missing (the run was killed before it could write it); "
        "these results were rebuilt from allure-results/ and lack versions and metrics"
    ]
    latest: dict[str, dict] = {}
    attempts: dict[str, int] = {}
    for path in sorted((run_dir / "allure-results").glob("*-result.json")):
        data = json.loads(path.read_text())
        test_id = _test_id(data)
        attempts[test_id] = attempts.get(test_id, 0) + 1
        if test_id not in latest or data.get("stop", 0) >= latest[test_id].get("stop", 0):
            latest[test_id] = data
    for test_id, data in latest.items():
        area = _label(data, "epic")
        if area not in (*AREAS, HARNESS):
            continue  # not a conformance check (no area): nothing to report it under
        summary.add(_result(test_id, area, data, attempts[test_id]))
    starts = [d["start"] for d in latest.values() if isinstance(d.get("start"), int)]
    if starts:
        summary.started = datetime.datetime.fromtimestamp(min(starts) / 1000, datetime.UTC).isoformat(
            timespec="seconds"
        )
    return summary


def _test_id(data: dict) -> str:
    module = str(data.get("fullName", "")).split("#", 1)[0]
    return f"{module.replace('.', '/')}.py::{data.get('name', '?')}"


def _label(data: dict, name: str) -> str:
    return next((str(x.get("value")) for x in data.get("labels", []) if x.get("name") == name), "")


def _result(test_id: str, area: str, data: dict, attempts: int) -> TestResult:
    message = str((data.get("statusDetails") or {}).get("message") or "").strip()
    status = data.get("status", "unknown")
    outcome = {"passed": "passed", "failed": "failed", "skipped": "skipped"}.get(status, "error")
    reason = message.removeprefix("Skipped: ")
    if outcome == "skipped" and reason.startswith("not applicable: "):
        outcome, reason = "not_applicable", reason.removeprefix("not applicable: ")
    issues = [
        str(link.get("name") or link.get("url"))
        for link in data.get("links", [])
        if link.get("type") == "issue"
    ]
    return TestResult(
        id=test_id,
        area=area,
        outcome=outcome,
        duration_s=round(max(0, data.get("stop", 0) - data.get("start", 0)) / 1000, 3),
        reason=reason.splitlines()[0][:500] if reason else "",
        details=message[:4000] if outcome in ("failed", "error") else "",
        issues=issues,
        attempts=attempts if outcome == "passed" else 1,
    )
