"""What a check reads from the RayJobs a RayCronJob made (pure: no cluster access).

KubeRay labels each RayJob with its RayCronJob's name and annotates it with the schedule
time it was made for (`controllers/ray/utils/constant.go`, 1.6.0 and later). Its operator's log
says which reconcile created each RayJob, which tells who made a duplicate.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

CRON_LABEL = "ray.io/cronjob-name"
SCHEDULED_ANNOTATION = "ray.io/cronjob-scheduled-timestamp"


def seconds_to_next_minute(now: datetime) -> float:
    """Until the next tick of `* * * * *`."""
    return 60.0 - now.second - now.microsecond / 1e6


def daily_tick_in_zone(now: datetime, zone: str, lead_s: float) -> tuple[str, datetime]:
    """A daily schedule (`M H * * *`) whose next tick, read in `zone`, is the first whole minute at
    least `lead_s` after `now` (aware, UTC); and that tick in UTC. Read in UTC instead, the same
    schedule fires hours away for a zone whose offset is hours: what tells the two apart."""
    tick = (now + timedelta(seconds=lead_s + 60)).replace(second=0, microsecond=0)
    local = tick.astimezone(ZoneInfo(zone))
    return f"{local.minute} {local.hour} * * *", tick


def scheduled_times(rayjobs: Iterable[dict[str, Any]]) -> list[str]:
    """The schedule time of each RayJob ("" for one without the annotation), sorted."""
    return sorted(
        (job.get("metadata", {}).get("annotations") or {}).get(SCHEDULED_ANNOTATION, "") for job in rayjobs
    )


def duplicated_ticks(times: Iterable[str]) -> dict[str, int]:
    """Schedule times with more than one RayJob."""
    return {tick: count for tick, count in Counter(times).items() if count > 1}


def parsed(times: Iterable[str]) -> list[datetime]:
    """Schedule times (RFC 3339, UTC) as aware datetimes, sorted; ones without a time left out."""
    return sorted(datetime.fromisoformat(t.replace("Z", "+00:00")) for t in times if t)


def tick_gaps_s(times: Iterable[str]) -> list[float]:
    """Seconds between consecutive distinct schedule times (RFC 3339, UTC)."""
    return [(b - a).total_seconds() for a, b in itertools.pairwise(sorted(set(parsed(times))))]


def minutes_name(cron: str, scheduled: str) -> str:
    """`<cron>-<minutes since the epoch>` for a schedule time, as a Kubernetes CronJob names its Jobs."""
    when = datetime.fromisoformat(scheduled.replace("Z", "+00:00"))
    return f"{cron}-{int(when.timestamp()) // 60}"


# What KubeRay's RayCronJob controller logs (JSON, the chart's encoder) for each RayJob it creates
# and when its status write loses to a newer version (`controllers/ray/raycronjob_controller.go`).
CREATED_MESSAGE = "Successfully created RayJob"
STATUS_FAILED_MESSAGE = "Failed to update RayCronJob status"


def log_entries(log: str) -> list[dict[str, Any]]:
    """The operator's JSON log lines as objects; lines of other shapes are left out."""
    entries = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def creations(log: str) -> dict[str, str]:
    """RayJob name -> the reconcileID of the reconcile whose log line says it created it."""
    return {
        str(e["rayJobName"]): str(e.get("reconcileID", ""))
        for e in log_entries(log)
        if e.get("msg") == CREATED_MESSAGE and "rayJobName" in e
    }


def unclaimed(rayjobs: Iterable[dict[str, Any]], log: str) -> list[str]:
    """Names of RayJobs whose creation `log` does not claim: another operator made them."""
    claimed = creations(log)
    return sorted(name for job in rayjobs if (name := job["metadata"]["name"]) not in claimed)


def describe_duplicates(rayjobs: Iterable[dict[str, Any]], log: str) -> str:
    """Per duplicated tick: its RayJobs, when each was created, who owns it and which reconcile
    of the operator (from `log`) created it; then how often the operator's status write failed."""
    jobs = list(rayjobs)
    claimed = creations(log)
    parts = []
    for tick in sorted(duplicated_ticks(scheduled_times(jobs))):
        same = [j for j in jobs if (j["metadata"].get("annotations") or {}).get(SCHEDULED_ANNOTATION) == tick]
        described = ", ".join(
            f"{j['metadata']['name']} (created {j['metadata'].get('creationTimestamp')}, owner uid "
            f"{','.join(o.get('uid', '') for o in j['metadata'].get('ownerReferences', []))}, "
            f"reconcile {claimed.get(j['metadata']['name'], 'unknown')[:8]})"
            for j in same
        )
        parts.append(f"{tick}: {described}")
    failed = sum(1 for e in log_entries(log) if e.get("msg") == STATUS_FAILED_MESSAGE)
    return "; ".join(parts) + f"; {failed} failed status writes ({STATUS_FAILED_MESSAGE!r}) in its log"
