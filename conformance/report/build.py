"""Build a run's reports from what the run left in its folder, without re-running anything.

Reads `summary.json` (or, for a run killed before it could write one, `allure-results/`),
`timelines/`, `diagnostics/` and earlier runs, and writes:
- `index.html`, the project's conformance report (always, even for an incomplete run);
- `allure-report/index.html`, Allure Report 3's single-file report (when node and the npm
  package can be had; otherwise the reason is shown in index.html and on the terminal).

Nothing here decides the verdict: that is summary.py's, so the report, summary.json and the
exit code always agree. A report that could not get its charting library or its Allure page
is still written; the problems are listed in it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import HarnessError, UsageError
from conformance.report import allure, history, html, npm, timelines
from conformance.report.files import write_atomically
from conformance.report.summary import Summary, load

INDEX = "index.html"


@dataclass
class Built:
    summary: Summary
    index: Path
    allure: Path | None = None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    earlier: list[history.RunPoint] = field(default_factory=list)


def build(
    run_dir: Path,
    history_sources: Sequence[Path] = (),
    with_allure: bool = True,
    cache: Path | None = None,
    exclude_runs: Sequence[str] = (),
) -> Built:
    """Write the reports of `run_dir`; earlier runs come from `history_sources` and the folders beside it
    (but for `exclude_runs`: the shards of a merged run are parts of it, not its past)."""
    started = time.monotonic()
    run_dir = run_dir.resolve()
    summary = load_results(run_dir)
    recorded, problems = timelines.load_all(run_dir)
    earlier, unreadable = history.collect(
        [run_dir.parent, *history_sources], exclude_run=summary.run_id, before=summary.started
    )
    earlier = [point for point in earlier if point.run_id not in exclude_runs]
    problems += unreadable
    page = (
        _allure(run_dir, summary, history_sources, cache, problems)
        if with_allure
        else _existing_allure(run_dir)
    )
    inputs = html.Inputs(
        summary=summary,
        run_dir=run_dir,
        timelines=recorded,
        earlier=earlier,
        allure_page=page,
        chart_js=_chart_js(cache, problems),
        problems=problems,
    )
    index = write_atomically(run_dir / INDEX, html.render(inputs))
    return Built(summary, index, page, problems, round(time.monotonic() - started, 3), earlier)


def load_results(run_dir: Path) -> Summary:
    if (run_dir / "summary.json").is_file():
        return load(run_dir / "summary.json")
    if any((run_dir / "allure-results").glob("*-result.json")):
        return allure.summary_from_results(run_dir)
    raise UsageError(
        f"{run_dir} holds no results (neither summary.json nor allure-results/)",
        "give the folder of a run, e.g. reports/latest",
    )


def _allure(
    run_dir: Path, summary: Summary, sources: Sequence[Path], cache: Path | None, problems: list[str]
) -> Path | None:
    explicit = [s for s in sources if s.is_file()]  # an Allure history file given by the caller
    seed = explicit[-1] if explicit else allure.earlier_history(run_dir, summary.started)
    try:
        return allure.build(run_dir, f"KubeRay conformance {summary.run_id}", seed, cache)
    except (HarnessError, OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"the Allure report was not built: {exc}")
        return None


def _existing_allure(run_dir: Path) -> Path | None:
    """The Allure page an earlier build left, still worth a link when only index.html is rebuilt."""
    page = run_dir / allure.OUTPUT / "index.html"
    return page if page.is_file() else None


def _chart_js(cache: Path | None, problems: list[str]) -> str | None:
    try:
        return npm.chart_js(cache)
    except (HarnessError, OSError, subprocess.TimeoutExpired) as exc:
        problems.append(f"charts are missing: Chart.js could not be had ({exc})")
        return None
