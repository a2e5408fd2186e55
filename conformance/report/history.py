"""History across runs: each area's trend, and which checks regressed, were fixed or flip-flop.

Earlier runs come from any mix of:
- a folder of runs (`reports/`: every sub-folder with a summary.json), or one run's folder;
- an Allure history file (`history.jsonl`, one JSON object per generated report, as Allure
  Report 3 appends them): what CI jobs usually carry from one run to the next.

Checks are matched across runs by their file and name (`test_rayjob.py::test_x[ray2.58.0]`),
so a run made from another checkout or rootdir still matches. Allure statuses map to ours:
broken -> error (the environment or the harness), skipped with a "not applicable" message ->
not_applicable.
"""

from __future__ import annotations

import datetime
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.report.summary import AREAS, Summary, load

WINDOW = 20  # earlier runs shown; older ones add little to a trend and cost reading time
BAD = ("failed", "error")
_ALLURE_STATUS = {"passed": "passed", "failed": "failed", "broken": "error", "unknown": "error"}


@dataclass
class RunPoint:
    """One earlier (or the current) run, reduced to what history needs."""

    run_id: str
    started: str  # ISO-8601, used to order runs
    outcomes: dict[str, str]  # check key -> outcome
    areas: dict[str, str] = field(default_factory=dict)  # check key -> area
    source: str = ""
    merged_from: tuple[str, ...] = ()  # a report merged from shards: their run ids


@dataclass
class Changes:
    """This run against the latest earlier run in which each check ran."""

    regressions: list[str] = field(default_factory=list)  # passed before, failed now
    new_errors: list[str] = field(default_factory=list)  # passed before, harness error now
    fixed: list[str] = field(default_factory=list)  # failed or error before, passed now
    flips: dict[str, int] = field(default_factory=dict)  # pass <-> fail changes in the window
    previous: dict[str, str] = field(default_factory=dict)  # check key -> outcome last time


def check_key(test_id: str) -> str:
    """`conformance/suites/test_rayjob.py::test_x[p]` -> `test_rayjob.py::test_x[p]`."""
    path, _, name = test_id.partition("::")
    return f"{path.rsplit('/', 1)[-1]}::{name}" if name else test_id


def from_summary(summary: Summary, source: str = "") -> RunPoint:
    return RunPoint(
        run_id=summary.run_id,
        started=summary.started,
        outcomes={check_key(t.id): t.outcome for t in summary.tests},
        areas={check_key(t.id): t.area for t in summary.tests},
        source=source,
        merged_from=_merged_from(summary),
    )


def _merged_from(summary: Summary) -> tuple[str, ...]:
    runs = summary.merged.get("runs")
    return (
        tuple(str(run.get("run_id")) for run in runs if isinstance(run, dict))
        if isinstance(runs, list)
        else ()
    )


def collect(
    sources: Sequence[Path], exclude_run: str = "", before: str = ""
) -> tuple[list[RunPoint], list[str]]:
    """Earlier runs from folders and Allure history files, oldest first, at most WINDOW of them.

    `exclude_run` drops the current run if a folder holds it; `before` (ISO-8601) drops runs
    that started later than the current one (times have whole seconds: the same second counts
    as earlier), so rebuilding an old report shows its own past.
    """
    points: dict[str, RunPoint] = {}
    problems: list[str] = []
    for source in sources:
        for path in _summary_files(source) if source.is_dir() else []:
            try:
                point = from_summary(load(path), str(path.parent))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{path}: not a readable summary.json ({exc})")
                continue
            points[point.run_id] = point
        if source.is_file():
            try:
                points.update((p.run_id, p) for p in from_allure_history(source))
            except (OSError, ValueError) as exc:
                problems.append(f"{source}: not a readable Allure history file ({exc})")
        if not source.exists():
            problems.append(f"{source}: no such file or folder")
    # A shard is part of the run merged from it: the merged report stands for it in history.
    covered = {run_id for p in points.values() for run_id in p.merged_from}
    kept = [
        p
        for p in points.values()
        if p.run_id != exclude_run
        and p.run_id not in covered
        and (not before or instant(p.started) <= instant(before))
    ]
    kept.sort(key=lambda p: instant(p.started))
    return kept[-WINDOW:], problems


def _summary_files(folder: Path) -> list[Path]:
    if (folder / "summary.json").is_file():
        return [folder / "summary.json"]
    return sorted(p for p in folder.glob("*/summary.json") if not p.parent.is_symlink())


def from_allure_history(path: Path) -> list[RunPoint]:
    points = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            points.append(_allure_point(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"line {number}: {exc}") from exc
    return points


def _allure_point(data: dict) -> RunPoint:
    stamp = datetime.datetime.fromtimestamp(data["timestamp"] / 1000, datetime.UTC)
    point = RunPoint(
        run_id=str(data.get("name") or "") + " " + stamp.strftime("%Y%m%dT%H%M%SZ"),
        started=stamp.isoformat(timespec="seconds"),
        outcomes={},
        source="allure history",
    )
    for item in data["testResults"].values():
        key = _allure_key(item)
        point.outcomes[key] = _allure_outcome(item)
        epic = next((label["value"] for label in item.get("labels", []) if label.get("name") == "epic"), "")
        if epic in AREAS:
            point.areas[key] = epic
    return point


def _allure_key(item: dict) -> str:
    # fullName is "package.module#function"; name carries the parameters: "test_x[ray2.58.0]".
    module = str(item.get("fullName", "")).split("#", 1)[0].rsplit(".", 1)[-1]
    return f"{module}.py::{item['name']}"


def _allure_outcome(item: dict) -> str:
    status = item.get("status", "unknown")
    if status == "skipped":
        return "not_applicable" if "not applicable" in str(item.get("message") or "") else "skipped"
    return _ALLURE_STATUS.get(status, "error")


def instant(iso: str) -> datetime.datetime:
    """An ISO-8601 time, naive ones as UTC; an unreadable one as the earliest time."""
    try:
        moment = datetime.datetime.fromisoformat(iso)
    except ValueError:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


# -- what changed -----------------------------------------------------------------------------


def compare(current: RunPoint, earlier: Sequence[RunPoint]) -> Changes:
    changes = Changes()
    for key, now in current.outcomes.items():
        past = [p.outcomes[key] for p in earlier if key in p.outcomes]
        ran = [o for o in past if o in ("passed", *BAD)]  # n/a and skipped say nothing either way
        if past:
            changes.previous[key] = past[-1]
        if ran and ran[-1] == "passed" and now == "failed":
            changes.regressions.append(key)
        elif ran and ran[-1] == "passed" and now == "error":
            changes.new_errors.append(key)
        elif ran and ran[-1] in BAD and now == "passed":
            changes.fixed.append(key)
        sequence = [*ran, now] if now in ("passed", *BAD) else ran
        flips = sum(1 for a, b in itertools.pairwise(sequence) if (a == "passed") != (b == "passed"))
        if flips:
            changes.flips[key] = flips
    return changes


def is_flaky(flips: int, outcome: str) -> bool:
    """Passed now, but went from pass to fail and back at least once in the window."""
    return outcome == "passed" and flips >= 2


def area_trend(points: Iterable[RunPoint]) -> list[dict[str, object]]:
    """Per run (oldest first): its id and, per area, passed / ran (checks that passed, failed or errored)."""
    trend = []
    for point in points:
        areas: dict[str, dict[str, int]] = {}
        for key, outcome in point.outcomes.items():
            area = point.areas.get(key)
            if area is None or outcome not in ("passed", *BAD):
                continue
            counts = areas.setdefault(area, {"passed": 0, "ran": 0})
            counts["ran"] += 1
            counts["passed"] += outcome == "passed"
        trend.append({"run_id": point.run_id, "started": point.started, "areas": areas})
    return trend
