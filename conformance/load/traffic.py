"""How traffic moved during a RayService upgrade: checks over status samples and request records,
and the per-second timeline a report draws. Pure: samples and records in, findings out.

A `RayServiceReading` (conformance/kube/rayservice.py) is what the RayService status and its
HTTPRoute said at one moment (the sampler there takes one whenever something changed). Clusters are named, not
given roles, because the pending cluster becomes the active one at promotion.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from conformance.errors import HarnessError
from conformance.kube.rayservice import RayServiceReading

from . import analysis
from .records import Record


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    max_step: int = 0
    min_interval_s: float | None = None

    def add(self, text: str) -> None:
        self.violations.append(text)


def _changes(values: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    """The (time, value) pairs where the value differs from the one before."""
    out: list[tuple[float, int]] = []
    for at, value in values:
        if not out or out[-1][1] != value:
            out.append((at, value))
    return out


def percent_series(samples: Sequence[RayServiceReading], cluster: str) -> list[tuple[float, int]]:
    return _changes([(s.at, s.percent[cluster]) for s in samples if cluster in s.percent])


def weight_series(samples: Sequence[RayServiceReading], cluster: str) -> list[tuple[float, int]]:
    return _changes([(s.at, s.weights[cluster]) for s in samples if cluster in s.weights])


def check_steps(
    samples: Sequence[RayServiceReading], new: str, step: int, interval_s: int, what: str = "traffic"
) -> Findings:
    """The new cluster's share (status trafficRoutedPercent and HTTPRoute weight) only grows, by at
    most `step` at a time, and status steps are at least `interval_s` apart (one second of slack:
    lastTrafficMigratedTime has whole seconds).

    Nothing seen is not "no violation": each series must have been sampled, starting within one
    step of 0 (else the first step was missed), and a plan of several steps must show at least
    two migrations, or the interval could not be checked."""
    found = Findings()
    for source, series in (
        ("trafficRoutedPercent", percent_series(samples, new)),
        ("route weight", weight_series(samples, new)),
    ):
        if not series:
            found.add(f"{what}: no {source} of {new} was sampled")
            continue
        if series[0][1] > step:
            found.add(
                f"{what}: {source} of {new} was first seen at {series[0][1]}, more than one step {step}"
            )
        for (_, before), (_, after) in pairwise(series):
            found.max_step = max(found.max_step, after - before)
            if after < before:
                found.add(f"{what}: {source} of {new} went back from {before} to {after}")
            elif after - before > step:
                found.add(f"{what}: {source} of {new} jumped {before} -> {after}, more than the step {step}")
    stamps = _distinct([s.migrated_at[new] for s in samples if new in s.migrated_at and s.pending == new])
    times = [_epoch(text) for text in stamps]
    gaps = [b - a for a, b in pairwise(times)]
    if step < 100 and not gaps:
        found.add(
            f"{what}: fewer than two traffic migrations of {new} were sampled: intervalSeconds unchecked"
        )
    if gaps:
        found.min_interval_s = min(gaps)
        if found.min_interval_s < interval_s - 1:
            found.add(
                f"{what}: traffic moved after {found.min_interval_s:.0f}s,"
                f" sooner than intervalSeconds={interval_s}"
            )
    return found


def check_capacity(samples: Sequence[RayServiceReading], max_surge: int) -> Findings:
    """targetCapacity: the two clusters together never exceed 100 + maxSurgePercent, each moves by
    at most maxSurgePercent, and the pending cluster never gets more traffic than its capacity.
    Samples with no targetCapacity of a pending cluster are no evidence: at least one is needed."""
    found = Findings()
    last: dict[str, int] = {}
    if not any(s.pending and s.pending in s.capacity for s in samples):
        found.add("no targetCapacity of a pending cluster was sampled")
    for s in samples:
        total = sum(s.capacity.values())
        if total > 100 + max_surge:
            found.add(
                f"targetCapacity {s.capacity} adds up to {total}, over 100 + maxSurgePercent={max_surge}"
            )
        for cluster, value in s.capacity.items():
            if cluster in last and abs(value - last[cluster]) > max_surge:
                found.add(
                    f"targetCapacity of {cluster} moved {last[cluster]} -> {value}, more than {max_surge}"
                )
            last[cluster] = value
        pending = s.pending
        if pending in s.percent and pending in s.capacity and s.percent[pending] > s.capacity[pending]:
            found.add(f"pending {pending}: {s.percent[pending]}% of traffic, capacity {s.capacity[pending]}")
    return found


@dataclass(frozen=True)
class Promotion:
    at: float | None  # when the new cluster was first seen active
    before: RayServiceReading | None  # the last sample before that


def promotion(samples: Sequence[RayServiceReading], new: str) -> Promotion:
    for index, s in enumerate(samples):
        if s.active == new:
            return Promotion(s.at, samples[index - 1] if index else None)
    return Promotion(None, None)


def held_while_paused(
    samples: Sequence[RayServiceReading], active: str, pending: str, start: float, end: float
) -> Findings:
    """Between `start` and `end` (an upgrade held up on purpose): `active` stays the active
    cluster, no rollback begins, and `pending` gains neither trafficRoutedPercent nor route
    weight over what it had at `start`."""
    found = Findings()
    before = [s for s in samples if s.at <= start]
    during = [s for s in samples if start < s.at <= end]
    first = before[-1] if before else (during[0] if during else None)
    if first is None:
        found.add("no status was sampled while the upgrade was held up")
        return found
    percent, weight = first.percent.get(pending, 0), first.weights.get(pending, 0)
    for s in during:
        if s.active != active:
            found.add(f"the active cluster changed to {s.active or 'none'}")
        if s.conditions.get("RollbackInProgress") == "True":
            found.add("RollbackInProgress=True")
        if s.percent.get(pending, 0) > percent:
            found.add(f"trafficRoutedPercent of {pending} rose {percent} -> {s.percent[pending]}")
        if s.weights.get(pending, 0) > weight:
            found.add(f"route weight of {pending} rose {weight} -> {s.weights[pending]}")
    found.violations = list(dict.fromkeys(found.violations))  # one line per kind of change
    return found


@dataclass(frozen=True)
class Suspension:
    """When a suspend and resume happened (epoch seconds), and which cluster served after."""

    asked: float  # spec.suspend set true
    suspended: float  # Suspended=True seen
    resumed: float  # spec.suspend set false
    ready: float  # Ready again seen
    new: str  # the active cluster once resumed


def served_through_suspension(records: Sequence[Record], s: Suspension, allowance: float) -> Findings:
    """Every request before the suspend is answered; none from Suspended (plus the data plane's
    `allowance`) to the resume; every one from Ready (plus `allowance`) on, by `s.new` only."""
    found = Findings()
    baseline = analysis.between(records, 0, s.asked)
    if not baseline or not all(r.ok for r in baseline):
        found.add(f"before the suspend: {analysis.summarize(baseline).describe()}")
    dark = analysis.between(records, s.suspended + allowance, s.resumed)
    answered = [r for r in dark if r.ok]
    if not dark:
        found.add("no requests were sent while the RayService was Suspended")
    elif answered:
        by = sorted({r.backend or "?" for r in answered})
        found.add(f"{len(answered)} of {len(dark)} requests answered while Suspended, by {by}")
    serving = analysis.between(records, s.ready + allowance, float("inf"))
    others = sorted({r.backend for r in serving if r.ok} - {s.new})
    if not serving:
        found.add("no requests were sent after the resumed RayService was Ready")
    elif not all(r.ok for r in serving):
        found.add(f"after the resumed RayService was Ready: {analysis.summarize(serving).describe()}")
    elif others:
        found.add(f"after the resume, answers came from {others}, not only {s.new}")
    return found


def outage_s(records: Sequence[Record]) -> float:
    """From the first failed request to the last one (0 when none failed)."""
    times = [r.sent for r in records if not r.ok]
    return round(max(times) - min(times), 2) if times else 0.0


def longest_silence_s(records: Sequence[Record]) -> float:
    """The longest time, from the first answer on, between two answered requests in a row or from
    the last answer to the last request (by when they were sent): how long the app, as its clients
    see it, said nothing at all. Failures beside answers are not silence; no answer at all is."""
    if not records:
        return 0.0
    sent = sorted(r.sent for r in records)
    answered = sorted(r.sent for r in records if r.ok) or [sent[0]]
    return round(max((b - a for a, b in pairwise([*answered, sent[-1]])), default=0.0), 2)


def promoted_at_full_shift(p: Promotion, old: str, new: str) -> str:
    """ "" when the last state before promotion routed 100% of traffic to `new` and 0% to `old`
    (targetCapacity may reach 0 in the same status update as the promotion, so it is not
    required to have been seen)."""
    if p.before is None:
        return "no state before the promotion was observed"
    to_new, to_old = p.before.percent.get(new), p.before.percent.get(old, 0)
    if to_new != 100 or to_old != 0:
        return f"promoted with trafficRoutedPercent {to_old} on {old} and {to_new} on {new}, not 0/100"
    return ""


def weight_at(samples: Sequence[RayServiceReading], cluster: str, at: float) -> int | None:
    """The HTTPRoute weight of `cluster` in force at `at` (None before any sample names it)."""
    current = None
    for s in samples:
        if s.at > at:
            break
        if s.weights:
            current = s.weights.get(cluster, 0)
    return current


# Fewer answers than this in a stretch of constant weights say nothing about its share: one
# second at the upgrade checks' 20 req/s.
MIN_SHARE_ANSWERS = 20


class TooFewAnswers(HarnessError):
    """No stretch of constant route weights held enough answers to judge: a failure of evidence."""


def weight_shares(samples: Sequence[RayServiceReading], new: str) -> list[tuple[float, float]]:
    """(when first seen, percent of the route's total weight on `new`) at each change of that share.

    Samples whose weights did not change it (a status-only change, the route rewritten with the
    same split) continue the stretch before them, so a stretch lasts as long as its split held."""
    shares: list[tuple[float, float]] = []
    for s in samples:
        total = sum(s.weights.values())
        if not s.weights or total <= 0:
            continue
        share = 100 * s.weights.get(new, 0) / total
        if not shares or shares[-1][1] != share:
            shares.append((s.at, share))
    return shares


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    weight_percent: float
    served_percent: float | None  # None: no answers in the window
    requests: int

    def deviation(self) -> float | None:
        return None if self.served_percent is None else abs(self.served_percent - self.weight_percent)


def share_windows(
    records: Sequence[Record], samples: Sequence[RayServiceReading], new: str, allowance_s: float
) -> list[Window]:
    """For each stretch where `new`'s share of the route weights held still, the share of answers
    from `new`, counting only answers sent `allowance_s` or more after the change: a Gateway's
    data plane applies a route change some time after it is written, and until then the answers
    still follow the split before it. A stretch shorter than the allowance has no answers."""
    shares = weight_shares(samples, new)
    windows: list[Window] = []
    for index, (at, weight) in enumerate(shares):
        start = at + allowance_s
        end = shares[index + 1][0] if index + 1 < len(shares) else float("inf")
        answered = [r for r in analysis.between(records, start, end) if r.ok and r.backend]
        end = min(end, answered[-1].sent) if answered else start
        served = 100 * sum(1 for r in answered if r.backend == new) / len(answered) if answered else None
        windows.append(Window(start, end, weight, served, len(answered)))
    return windows


def judged(windows: Sequence[Window], min_answers: int = MIN_SHARE_ANSWERS) -> list[Window]:
    """The windows with answers enough to judge their share."""
    return [w for w in windows if w.requests >= min_answers]


def check_shares(
    windows: Sequence[Window], tolerance: float, allowance_s: float, min_answers: int = MIN_SHARE_ANSWERS
) -> Findings:
    """Each window with `min_answers` or more: the share served by `new` within `tolerance`
    percentage points of its weight. Raises TooFewAnswers when no window has that many."""
    enough = judged(windows, min_answers)
    if not enough:
        counts = ", ".join(f"{w.weight_percent:.0f}%: {w.requests}" for w in windows)
        raise TooFewAnswers(
            f"too few answers to tell whether they followed the route weights: no stretch of constant "
            f"weights had {min_answers} answers {allowance_s:g}s or more after its change"
            f" ({counts or 'no route weights seen'})",
            "check that the load ran the whole upgrade, or lower thresholds.route_propagation_allowance_s"
            " if this Gateway applies route changes sooner",
        )
    found = Findings()
    for w in enough:
        deviation = w.deviation()
        if deviation is not None and deviation > tolerance:
            found.add(
                f"{w.served_percent:.0f}% served at weight {w.weight_percent:.0f}% "
                f"({w.requests} answers from {allowance_s:g}s after the change)"
            )
    return found


def max_share_deviation(windows: Sequence[Window]) -> float | None:
    return max((d for w in windows if (d := w.deviation()) is not None), default=None)


def propagation_delays(
    records: Sequence[Record], samples: Sequence[RayServiceReading], new: str
) -> list[float]:
    """Seconds from each change of `new`'s route share to the answers following it, where one
    answer can tell: after a change to 0% or 100%, from the first answer of the run of answers
    from the right side that lasts to the end of the stretch; after a change away from 0%, from
    the first answer from `new`. Other changes, and stretches that ended before the answers
    followed, are not measured. Measured from when the sampler saw the change, so up to one
    sampling interval short of the time from the write."""
    shares = weight_shares(samples, new)
    delays: list[float] = []
    for index in range(1, len(shares)):
        (at, share), before = shares[index], shares[index - 1][1]
        end = shares[index + 1][0] if index + 1 < len(shares) else float("inf")
        answered = [r for r in analysis.between(records, at, end) if r.ok and r.backend]
        followed = _followed_at(answered, new, share, before)
        if followed is not None:
            delays.append(round(followed - at, 3))
    return delays


def _followed_at(answered: Sequence[Record], new: str, share: float, before: float) -> float | None:
    if share in (0.0, 100.0):
        right = [(r.backend == new) == (share == 100.0) for r in answered]
        if not right or not right[-1]:
            return None
        first = len(right)
        while first > 0 and right[first - 1]:
            first -= 1
        return answered[first].sent
    if before == 0.0:
        return next((r.sent for r in answered if r.backend == new), None)
    return None


# --- the timeline ------------------------------------------------------------------------------


def timeline(
    check: str,
    title: str,
    records: Sequence[Record],
    samples: Sequence[RayServiceReading],
    start: float,
    names: dict[str, str],
    marks: Sequence[tuple[float, str]] = (),
) -> dict[str, object]:
    """One entry per second: requests, errors by kind, p50/p99, the HTTPRoute's traffic percent
    per cluster (or, without a route, the share of answers), and the condition changes as events.

    `names` maps cluster names to the labels a reader sees ("old", "new"); `marks` are what the
    check itself did, (epoch seconds, label), shown among the events."""
    seconds = []
    for second in analysis.per_second(records, start):
        at = start + second.t
        entry: dict[str, object] = {
            "t": second.t,
            "requests": second.requests,
            "errors": second.errors,
            "p50_ms": second.p50_ms,
            "p99_ms": second.p99_ms,
        }
        routed = {label: weight_at(samples, cluster, at) for cluster, label in names.items()}
        if any(v is not None for v in routed.values()):
            entry["traffic"] = {label: v or 0 for label, v in routed.items()}
        answered = sum(second.backends.get(c, 0) for c in names)
        if answered:
            entry["served"] = {
                label: round(100 * second.backends.get(c, 0) / answered, 1) for c, label in names.items()
            }
        seconds.append(entry)
    return {
        "schema": 1,
        "kind": "upgrade",
        "check": check,
        "title": title,
        "events": sorted(
            condition_events(samples, start)
            + [{"t": round(max(0.0, at - start), 3), "label": label} for at, label in marks],
            key=lambda event: float(str(event["t"])),
        ),
        "seconds": seconds,
        # What the RayService status and the HTTPRoute said, whenever it changed.
        "status": [
            {
                "t": round(s.at - start, 3),
                "active": names.get(s.active, s.active),
                "pending": names.get(s.pending, s.pending),
                "traffic_routed_percent": _labelled(s.percent, names),
                "target_capacity": _labelled(s.capacity, names),
                "route_weights": _labelled(s.weights, names),
            }
            for s in samples
        ],
    }


def _labelled(values: dict[str, int], names: dict[str, str]) -> dict[str, int]:
    return {names.get(cluster, cluster): value for cluster, value in values.items()}


def condition_events(samples: Sequence[RayServiceReading], start: float) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    before: dict[str, str] = {}
    for s in samples:
        for kind, status in sorted(s.conditions.items()):
            if before.get(kind) != status:
                events.append({"t": round(max(0.0, s.at - start), 3), "label": f"{kind}={status}"})
        before = s.conditions
    return events


def write_timeline(run_dir: Path, slug: str, data: dict[str, object]) -> Path:
    target = run_dir / "timelines" / f"{slug}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1) + "\n")
    return target


def _distinct(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        if not out or out[-1] != value:
            out.append(value)
    return out


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def seconds_between(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 2)
