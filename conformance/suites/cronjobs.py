"""What a check reads from the RayJobs a RayCronJob made (pure: no cluster access).

KubeRay labels each RayJob with its RayCronJob's name and annotates it with the schedule
time it was made for (`controllers/ray/utils/constant.go`, 1.6.0 and later).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

CRON_LABEL = "ray.io/cronjob-name"
SCHEDULED_ANNOTATION = "ray.io/cronjob-scheduled-timestamp"


def seconds_to_next_minute(now: datetime) -> float:
    """Until the next tick of `* * * * *`."""
    return 60.0 - now.second - now.microsecond / 1e6


def scheduled_times(rayjobs: Iterable[dict[str, Any]]) -> list[str]:
    """The schedule time of each RayJob ("" for one without the annotation), sorted."""
    return sorted(
        (job.get("metadata", {}).get("annotations") or {}).get(SCHEDULED_ANNOTATION, "") for job in rayjobs
    )


def duplicated_ticks(times: Iterable[str]) -> dict[str, int]:
    """Schedule times with more than one RayJob."""
    return {tick: count for tick, count in Counter(times).items() if count > 1}


def tick_gaps_s(times: Iterable[str]) -> list[float]:
    """Seconds between consecutive distinct schedule times (RFC 3339, UTC)."""
    parsed = sorted({datetime.fromisoformat(t.replace("Z", "+00:00")) for t in times if t})
    return [(b - a).total_seconds() for a, b in itertools.pairwise(parsed)]


def minutes_name(cron: str, scheduled: str) -> str:
    """`<cron>-<minutes since the epoch>` for a schedule time, as a Kubernetes CronJob names its Jobs."""
    when = datetime.fromisoformat(scheduled.replace("Z", "+00:00"))
    return f"{cron}-{int(when.timestamp()) // 60}"
