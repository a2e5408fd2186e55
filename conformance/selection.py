"""Which checks a run makes beyond --area and -k: the tier (smoke or full) and the shard (K of N).

Tiers. `full` is every check. `smoke` is the checks marked `@pytest.mark.smoke`: with no argument
every parametrization of the check, with arguments only the parametrizations whose id holds one of
them as whole dash-separated parts (`smoke("step100-interval1-surge100")` takes
`[ray2.58.0-step100-interval1-surge100]`, not `[ray2.58.0-step5-interval10-surge25]`).

Shards. `--shard K/N` keeps the K-th of N parts of what the area, -k and tier selected, so N
independent runs (each its own cluster) make every check once, and `report merge` makes one report
of them. The parts are balanced by the recorded duration of each check
(benchmarks/results/conformance_run.json, the last whole main job with per-check figures):
longest-processing-time first, each unit onto the part that is lightest so far. The split depends
only on the collection and that file, never on the machine, so every shard's process (and every
xdist worker in it) computes the same one; `split` in summary.json's selection fingerprints it, and
a merge refuses shards split differently.

- A unit is a check, or the checks that share a module-scoped fixture (one cluster made for the
  module) or an `xdist_group`: splitting those would make each shard build the shared cluster again.
- A check without a recorded duration is charged the median of the recorded checks of its area in
  the selection, or of all of them, or 1 s when none is recorded (an installed wheel has no file).
- An exclusive check runs alone, so it weighs its whole duration; the others run beside
  PARALLEL_WORKERS - 1 more and weigh their share. Balancing wall time, not check time, keeps one
  shard from getting every upgrade under load.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance import exclusive
from conformance.report.shards import Shard, parse_shard

__all__ = ["Shard", "parse_shard"]  # re-exported: the CLI and the plugin parse --shard through here

TIERS = ("full", "smoke")
DEFAULT_TIER = "full"
SMOKE_MARKER = "smoke"
SMOKE_HELP = (
    "smoke(*ids): the check is in the smoke tier (`run --tier smoke`); with ids, only its "
    "parametrizations whose id holds one of them as whole dash-separated parts"
)
RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "conformance_run.json"
# Checks that are not exclusive share the run with others: the recorded run had 2 workers, as
# `--workers auto` gives on a 2-core machine. A constant, not this machine's count, so that the
# split is the same everywhere.
PARALLEL_WORKERS = 2
UNRECORDED_S = 1.0


# -- tiers --------------------------------------------------------------------------------------


def in_smoke(item: pytest.Item) -> bool:
    marker = item.get_closest_marker(SMOKE_MARKER)
    if marker is None:
        return False
    if not marker.args:
        return True
    callspec = getattr(item, "callspec", None)
    return any(has_part(callspec.id if callspec else "", str(part)) for part in marker.args)


def has_part(ident: str, part: str) -> bool:
    """`part` is a run of whole dash-separated parts of a parametrization id."""
    return f"-{part}-" in f"-{ident}-"


def tier_of(items: Sequence[pytest.Item], tier: str) -> list[pytest.Item]:
    return list(items) if tier == "full" else [item for item in items if in_smoke(item)]


# -- shards -------------------------------------------------------------------------------------


def recorded_durations(path: Path = RECORDED) -> dict[str, float]:
    """Seconds per check name (`test_x[params]`, without its file); empty without the file."""
    try:
        checks = json.loads(path.read_text())["checks"]
    except (OSError, ValueError, KeyError):
        return {}
    return {name: float(entry["duration_s"]) for name, entry in checks.items()}


def check_name(nodeid: str) -> str:
    """`conformance/suites/test_x.py::test_y[p]` -> `test_y[p]`, as the recorded file names checks."""
    return nodeid.split("::", 1)[-1].split("@", 1)[0]  # xdist's loadgroup adds `@group`


def charged_seconds(checks: Sequence[tuple[str, str]], recorded: Mapping[str, float]) -> dict[str, float]:
    """Seconds per (name, area): the recorded ones, else the median of the area's, else of all."""
    known = [(name, area) for name, area in checks if name in recorded]
    by_area: dict[str, list[float]] = {}
    for name, area in known:
        by_area.setdefault(area, []).append(recorded[name])
    overall = statistics.median([recorded[n] for n, _ in known]) if known else UNRECORDED_S
    return {
        name: recorded.get(name, statistics.median(by_area[area]) if area in by_area else overall)
        for name, area in checks
    }


def longest_first(weights: Mapping[str, float], count: int) -> list[list[str]]:
    """Longest-processing-time first: each unit, heaviest first (ties by name), onto the part with
    the least weight so far (ties: the lowest index). Deterministic for the same weights."""
    parts: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for unit in sorted(weights, key=lambda u: (-weights[u], u)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        parts[lightest].append(unit)
        loads[lightest] += weights[unit]
    return parts


def fingerprint(weights: Mapping[str, float]) -> str:
    """What a split was made from: the units and their weights."""
    text = json.dumps(sorted((unit, round(w, 3)) for unit, w in weights.items()))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def unit_of(item: pytest.Item) -> str:
    """The checks that must run in one shard share this key (see the module's docstring)."""
    group = item.get_closest_marker("xdist_group")
    if group is not None:
        return f"group:{group.args[0] if group.args else group.kwargs.get('name', 'default')}"
    info = getattr(item, "_fixtureinfo", None)
    defs: Iterable[Sequence[object]] = info.name2fixturedefs.values() if info is not None else ()
    if any(getattr(d, "scope", "") in ("module", "class") for fixturedefs in defs for d in fixturedefs):
        return f"module:{item.nodeid.split('::', 1)[0]}"
    return check_name(item.nodeid)


@dataclass(frozen=True)
class Row:
    """What the split needs to know of a check."""

    name: str  # as the recorded file names it: test_x[params]
    area: str
    unit: str  # unit_of: the checks that go to one shard together
    exclusive: bool


def row_of(item: pytest.Item, area: str) -> Row:
    return Row(check_name(item.nodeid), area, unit_of(item), exclusive.is_exclusive(item))


def unit_weights(rows: Sequence[Row], recorded: Mapping[str, float]) -> dict[str, float]:
    """Each unit's weight: its checks' charged seconds, an exclusive one whole, others shared."""
    seconds = charged_seconds([(r.name, r.area) for r in rows], recorded)
    weights: dict[str, float] = {}
    for row in rows:
        share = 1 if row.exclusive else PARALLEL_WORKERS
        weights[row.unit] = weights.get(row.unit, 0.0) + seconds[row.name] / share
    return weights


@dataclass(frozen=True)
class Split:
    kept: list[pytest.Item]
    split: str  # the fingerprint


def shard_of(
    items: Sequence[pytest.Item], shard: Shard, area: Mapping[str, str], recorded: Mapping[str, float]
) -> Split:
    """The items of `shard`, in their collected order."""
    weights = unit_weights([row_of(item, area[item.nodeid]) for item in items], recorded)
    mine = set(longest_first(weights, shard.count)[shard.index - 1])
    return Split([item for item in items if unit_of(item) in mine], fingerprint(weights))
