"""Timelines: what a check saw over time, written into the run directory for the report's charts.

A check records a timeline when a number that changes over time is its evidence (how many
workers existed while load went up and down, how requests fared second by second during an
upgrade). The report draws one chart per timeline; summary.json keeps only the totals.

Format (version 1). One JSON object per file, `<run-dir>/timelines/<check-slug>-<n>.json`:

    {
      "schema": 1,
      "kind": "autoscaling" | "upgrade",
      "check": "<the check's id, as in summary.json>",
      "title": "<one line shown above the chart>",
      "events": [{"t": 12.0, "label": "load started"}],          # optional markers
      ...the fields of its kind...
    }

`t` is always seconds since the timeline started (a float, never decreasing).

kind "autoscaling": replica counts per worker group, sampled whenever they were observed.

    "series":  {"<group>": [[t, replicas], ...]},   # replicas that exist (pods running)
    "desired": {"<group>": [[t, replicas], ...]}    # optional: what the autoscaler asked for

kind "upgrade": one entry per second of traffic through the upgrade.

    "seconds": [{"t": 0, "requests": 50,
                 "errors": {"http_503": 2, "connection_refused": 1},   # by kind, snake_case
                 "p50_ms": 11.5, "p99_ms": 84.0,                       # successful requests; null if none
                 "traffic": {"old": 90, "new": 10}}]                   # optional: % routed per cluster

Suites record through the `timeline` fixture of the pytest plugin, which saves what was
recorded when the check ends, failed or not:

    def test_scales_up(timeline, ...):
        workers = timeline.autoscaling("workers under a queue of 20 tasks")
        workers.event("load started")
        workers.replicas("small-group", 3, desired=4)   # stamped with the time since start

    def test_upgrade_keeps_serving(timeline, ...):
        upgrade = timeline.upgrade("incremental upgrade, 50 req/s")
        upgrade.second(t=0, requests=50, errors={"http_503": 1}, p50_ms=12, p99_ms=90,
                       traffic={"old": 100, "new": 0})
        # or, from the load generator's analysis: upgrade.from_load(analysis.per_second(records))

`Recorder(run_dir, check_id)` does the same outside pytest. `load_all(run_dir)` reads the files
back for the report; a malformed file is reported as a problem, never a crash.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.report.files import write_atomically

SCHEMA = 1
KINDS = ("autoscaling", "upgrade")
DIRNAME = "timelines"


class TimelineError(ValueError):
    """A timeline file that does not follow the format; the message names the field."""


@dataclass
class Event:
    t: float
    label: str


@dataclass
class Second:
    t: float
    requests: int
    errors: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    traffic: dict[str, float] = field(default_factory=dict)

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())


@dataclass
class Timeline:
    kind: str
    check: str
    title: str
    events: list[Event] = field(default_factory=list)
    series: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    desired: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    seconds: list[Second] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "schema": SCHEMA,
            "kind": self.kind,
            "check": self.check,
            "title": self.title,
            "events": [{"t": e.t, "label": e.label} for e in self.events],
        }
        if self.kind == "autoscaling":
            data["series"] = {g: [list(p) for p in points] for g, points in self.series.items()}
            if self.desired:
                data["desired"] = {g: [list(p) for p in points] for g, points in self.desired.items()}
        else:
            data["seconds"] = [_second_json(s) for s in self.seconds]
        return data


def _second_json(second: Second) -> dict[str, object]:
    data: dict[str, object] = {
        "t": second.t,
        "requests": second.requests,
        "errors": second.errors,
        "p50_ms": second.p50_ms,
        "p99_ms": second.p99_ms,
    }
    if second.traffic:
        data["traffic"] = second.traffic
    return data


# -- recording ------------------------------------------------------------------------------


class _Recording:
    """Common to both kinds: the clock that stamps samples and the event markers."""

    def __init__(self, timeline: Timeline, clock: Callable[[], float]) -> None:
        self.timeline = timeline
        self._clock = clock
        self._start = clock()

    def now(self) -> float:
        return round(self._clock() - self._start, 3)

    def event(self, label: str, t: float | None = None) -> None:
        self.timeline.events.append(Event(self.now() if t is None else t, label))


class AutoscalingRecording(_Recording):
    def replicas(self, group: str, count: int, desired: int | None = None, t: float | None = None) -> None:
        """Replicas of `group` observed now (or at `t`); `desired` is what the autoscaler asked for."""
        at = self.now() if t is None else t
        self.timeline.series.setdefault(group, []).append((at, int(count)))
        if desired is not None:
            self.timeline.desired.setdefault(group, []).append((at, int(desired)))


class UpgradeRecording(_Recording):
    def second(
        self,
        t: float,
        requests: int,
        errors: Mapping[str, int] | None = None,
        p50_ms: float | None = None,
        p99_ms: float | None = None,
        traffic: Mapping[str, float] | None = None,
    ) -> None:
        """One second of traffic, `t` seconds after the timeline started."""
        self.timeline.seconds.append(
            Second(t, int(requests), dict(errors or {}), p50_ms, p99_ms, dict(traffic or {}))
        )

    def from_load(self, seconds: Iterable[Any]) -> None:
        """Per-second figures of the load analysis (`conformance.load.analysis.Second`, or any
        object with t, requests, errors, p50_ms, p99_ms and optional `backends`, the answers
        per backend, which become the traffic split in percent)."""
        for s in seconds:
            backends = dict(getattr(s, "backends", {}) or {})
            answered = sum(backends.values())
            traffic = {k: round(100 * v / answered, 1) for k, v in backends.items()} if answered else {}
            self.second(s.t, s.requests, s.errors, s.p50_ms, s.p99_ms, traffic)


class Recorder:
    """The timelines of one check; `save()` writes each to `<run-dir>/timelines/`."""

    def __init__(self, run_dir: Path, check: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = run_dir
        self.check = check
        self._clock = clock
        self._recordings: list[_Recording] = []

    def autoscaling(self, title: str) -> AutoscalingRecording:
        recording = AutoscalingRecording(Timeline("autoscaling", self.check, title), self._clock)
        self._recordings.append(recording)
        return recording

    def upgrade(self, title: str) -> UpgradeRecording:
        recording = UpgradeRecording(Timeline("upgrade", self.check, title), self._clock)
        self._recordings.append(recording)
        return recording

    def save(self) -> list[Path]:
        written = []
        for index, recording in enumerate(self._recordings, start=1):
            timeline = recording.timeline
            if timeline.series or timeline.seconds:  # a check that ended before its first sample
                written.append(write(self.run_dir, timeline, index))
        return written


def write(run_dir: Path, timeline: Timeline, index: int = 1) -> Path:
    parse(timeline.to_json())  # refuse to write what the report could not read
    folder = run_dir / DIRNAME
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug(timeline.check)[:120]}-{index}.json"
    return write_atomically(path, json.dumps(timeline.to_json(), indent=1) + "\n")


def slug(text: str) -> str:
    """A check id as a file name; the plugin names diagnostics folders the same way."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# -- reading --------------------------------------------------------------------------------


def load_all(run_dir: Path) -> tuple[list[Timeline], list[str]]:
    """Every timeline of a run, and a line per file that could not be read."""
    timelines: list[Timeline] = []
    problems: list[str] = []
    for path in sorted((run_dir / DIRNAME).glob("*.json")):
        try:
            timelines.append(parse(json.loads(path.read_text())))
        except (OSError, ValueError) as exc:  # JSONDecodeError and TimelineError are ValueErrors
            problems.append(f"{path.name}: {exc}")
    return timelines, problems


def parse(data: object) -> Timeline:
    if not isinstance(data, dict):
        raise TimelineError("a timeline is a JSON object")
    if data.get("schema") != SCHEMA:
        raise TimelineError(f"schema must be {SCHEMA}, not {data.get('schema')!r}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise TimelineError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    timeline = Timeline(
        kind=kind,
        check=_text(data, "check"),
        title=str(data.get("title") or ""),
        events=[_event(e) for e in _list(data, "events", required=False)],
    )
    if kind == "autoscaling":
        timeline.series = _series(data, "series", required=True)
        timeline.desired = _series(data, "desired", required=False)
    else:
        timeline.seconds = [_second(s, i) for i, s in enumerate(_list(data, "seconds", required=True))]
        _non_decreasing("seconds", [s.t for s in timeline.seconds])
    return timeline


def _text(data: dict, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise TimelineError(f"{key} must be a non-empty string")
    return value


def _list(data: dict, key: str, required: bool) -> list:
    value = data.get(key, None if required else [])
    if not isinstance(value, list):
        raise TimelineError(f"{key} must be a list")
    return value


def _number(value: object, where: str) -> float:
    # bool is an int in Python, but true/false in a timeline is a mistake, not a count.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TimelineError(f"{where} must be a number, not {value!r}")
    return float(value)


def _event(value: object) -> Event:
    if not isinstance(value, dict) or not isinstance(value.get("label"), str):
        raise TimelineError("each event is {t, label}")
    return Event(_number(value.get("t"), "events[].t"), value["label"])


def _series(data: dict, key: str, required: bool) -> dict[str, list[tuple[float, int]]]:
    value = data.get(key, None if required else {})
    if not isinstance(value, dict):
        raise TimelineError(f"{key} must be an object of group -> [[t, replicas], ...]")
    series: dict[str, list[tuple[float, int]]] = {}
    for group, points in value.items():
        if not isinstance(points, list):
            raise TimelineError(f"{key}.{group} must be a list of [t, replicas]")
        parsed = []
        for point in points:
            if not isinstance(point, list) or len(point) != 2:
                raise TimelineError(f"{key}.{group}: each point is [t, replicas], not {point!r}")
            replicas = _number(point[1], f"{key}.{group} replicas")
            if replicas < 0 or replicas != int(replicas):
                raise TimelineError(f"{key}.{group}: replicas must be a whole number >= 0, not {point[1]!r}")
            parsed.append((_number(point[0], f"{key}.{group} t"), int(replicas)))
        _non_decreasing(f"{key}.{group}", [t for t, _ in parsed])
        series[str(group)] = parsed
    return series


def _second(value: object, index: int) -> Second:
    where = f"seconds[{index}]"
    if not isinstance(value, dict):
        raise TimelineError(f"{where} must be an object")
    errors = value.get("errors") or {}
    traffic = value.get("traffic") or {}
    if not isinstance(errors, dict) or not isinstance(traffic, dict):
        raise TimelineError(f"{where}: errors and traffic are objects of name -> number")
    return Second(
        t=_number(value.get("t"), f"{where}.t"),
        requests=int(_number(value.get("requests"), f"{where}.requests")),
        errors={str(k): int(_number(v, f"{where}.errors.{k}")) for k, v in errors.items()},
        p50_ms=_optional(value.get("p50_ms"), f"{where}.p50_ms"),
        p99_ms=_optional(value.get("p99_ms"), f"{where}.p99_ms"),
        traffic={str(k): _number(v, f"{where}.traffic.{k}") for k, v in traffic.items()},
    )


def _optional(value: object, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _non_decreasing(where: str, times: list[float]) -> None:
    for before, after in itertools.pairwise(times):
        if after < before:
            raise TimelineError(f"{where}: t goes back from {before} to {after}")
