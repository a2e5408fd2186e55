"""Arithmetic over request records: the achieved rate and its self-check, error kinds, latency
percentiles, a per-second timeline and which backend answered. Pure: no cluster, no clock."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from conformance.errors import HarnessError

from .records import Record

# The generator must send at least this share of its target rate, or what it measured says
# more about this machine than about the system under test.
RATE_TOLERANCE = 0.05
# Nor may it fall further behind its schedule than this (seconds): an open-model generator only
# lags when it cannot run, and a starved generator catches up in bursts that no server saw coming.
MAX_LAG_S = 1.0


class LoadShortfall(HarnessError):
    """The generator did not keep its rate: the run measured the harness, not KubeRay."""


@dataclass(frozen=True)
class Second:
    t: int  # seconds since the first request
    requests: int
    errors: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    backends: dict[str, int] = field(default_factory=dict)


def achieved_rate(records: Sequence[Record]) -> float:
    """Requests per second between the first and the last send (0 with fewer than two)."""
    if len(records) < 2:
        return 0.0
    span = records[-1].sent - records[0].sent
    return (len(records) - 1) / span if span > 0 else 0.0


def schedule_lag(records: Sequence[Record], rate: float) -> float:
    """How far (seconds) the latest send fell behind the schedule of a constant `rate`."""
    scheduled = [r for r in records if r.seq >= 0]
    if not scheduled or rate <= 0:
        return 0.0
    first = min(scheduled, key=lambda r: r.seq)
    lags = [r.sent - (first.sent + (r.seq - first.seq) / rate) for r in scheduled]
    return max(0.0, *lags)


def check_rate(
    records: Sequence[Record], target: float, tolerance: float = RATE_TOLERANCE, max_lag_s: float = MAX_LAG_S
) -> float:
    """The achieved rate; raises LoadShortfall when it is short of `target` by more than `tolerance`
    or the generator fell more than `max_lag_s` behind its schedule at any point."""
    rate = achieved_rate(records)
    if rate < target * (1 - tolerance):
        raise LoadShortfall(
            f"the load generator sent {rate:.1f} req/s of the {target:.1f} asked for "
            f"({len(records)} requests): more than {tolerance:.0%} short",
            "the machine is too busy for this rate; lower it in the check or free CPU",
        )
    lag = schedule_lag(records, target)
    if lag > max_lag_s:
        raise LoadShortfall(
            f"the load generator fell {lag:.1f}s behind its schedule of {target:.0f} req/s "
            f"(at most {max_lag_s:.0f}s allowed): it could not run, so the load was not constant",
            "the machine is too busy (other runs on the same cluster?); free CPU and run again",
        )
    return rate


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of unsorted values; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def error_counts(records: Sequence[Record]) -> dict[str, int]:
    return dict(Counter(r.error for r in records if r.error))


def error_details(records: Sequence[Record], most: int = 3) -> list[tuple[str, int]]:
    """The commonest failure details ("503: no available server"), most frequent first."""
    counted = Counter(f"{r.error}: {r.detail}" for r in records if r.error)
    return counted.most_common(most)


def failed(records: Sequence[Record]) -> int:
    return sum(1 for r in records if r.error)


def error_rate(records: Sequence[Record]) -> float:
    return failed(records) / len(records) if records else 0.0


def latency_ms(records: Sequence[Record], q: float) -> float | None:
    """Percentile of the latency of successful requests, in milliseconds."""
    value = percentile([r.latency_s for r in records if r.ok], q)
    return None if value is None else round(value * 1000, 3)


def per_second(records: Sequence[Record], start: float | None = None) -> list[Second]:
    """One entry per whole second from `start` (default: the first send) to the last send,
    seconds without requests included, so a stall shows as a gap and not as nothing."""
    if not records:
        return []
    origin = records[0].sent if start is None else start
    buckets: dict[int, list[Record]] = {}
    for record in records:
        buckets.setdefault(math.floor(record.sent - origin), []).append(record)
    first, last = min(0, *buckets), max(buckets)
    return [_second(t, buckets.get(t, [])) for t in range(first, last + 1)]


def _second(t: int, records: list[Record]) -> Second:
    return Second(
        t=t,
        requests=len(records),
        errors=error_counts(records),
        p50_ms=latency_ms(records, 50),
        p99_ms=latency_ms(records, 99),
        backends=dict(Counter(r.backend for r in records if r.ok and r.backend)),
    )


def backend_share(records: Sequence[Record], backend: str) -> float | None:
    """The share of successful answers that came from `backend`; None when none succeeded."""
    answered = [r for r in records if r.ok and r.backend]
    if not answered:
        return None
    return sum(1 for r in answered if r.backend == backend) / len(answered)


def between(records: Sequence[Record], start: float, end: float) -> list[Record]:
    """Records sent in [start, end) (epoch seconds)."""
    return [r for r in records if start <= r.sent < end]


@dataclass(frozen=True)
class LoadSummary:
    requests: int
    failed: int
    error_rate: float
    achieved_rate: float
    errors: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None
    details: list[tuple[str, int]] = field(default_factory=list)

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """As summary.json metrics: snake_case names with their unit."""
        values: dict[str, float] = {
            f"{prefix}requests_total": self.requests,
            f"{prefix}failed_requests": self.failed,
            f"{prefix}error_rate": round(self.error_rate, 6),
            f"{prefix}achieved_rate_rps": round(self.achieved_rate, 2),
        }
        if self.p50_ms is not None and self.p99_ms is not None:
            values[f"{prefix}latency_p50_ms"] = self.p50_ms
            values[f"{prefix}latency_p99_ms"] = self.p99_ms
        return values

    def describe(self) -> str:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())) or "none"
        text = (
            f"{self.failed} of {self.requests} requests failed ({kinds}); "
            f"{self.achieved_rate:.1f} req/s; p50 {self.p50_ms} ms, p99 {self.p99_ms} ms"
        )
        if self.details:
            text += "; most said " + "; ".join(f"{detail!r} x{n}" for detail, n in self.details)
        return text


def summarize(records: Sequence[Record]) -> LoadSummary:
    return LoadSummary(
        requests=len(records),
        failed=failed(records),
        error_rate=error_rate(records),
        achieved_rate=achieved_rate(records),
        errors=error_counts(records),
        p50_ms=latency_ms(records, 50),
        p99_ms=latency_ms(records, 99),
        details=error_details(records),
    )
