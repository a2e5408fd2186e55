"""summary.json: the machine-readable result of a run (contract in shared/design.md).

Outcomes keep the two kinds of failure apart: `failed` is the system under test
misbehaving, `error` is the environment or the harness. The run's exit code follows:
any failure -> 1, else any error (or an incomplete run) -> 2, else 0.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from conformance.errors import EXIT_CONFORMANT, EXIT_ENVIRONMENT, EXIT_NOT_CONFORMANT
from conformance.report.files import write_atomically

AREAS = (
    "operator",
    "raycluster",
    "autoscaling",
    "gpu",
    "rayjob",
    "fault-recovery",
    "rayservice",
    "upgrade",
    "security",
    "samples",
)
# Checks of the harness's own hygiene (a secret kept out of the run's files, the documented RBAC):
# they run and are reported with the run, but are no AREA of the verdict. One that fails or errs
# is a harness problem, so the run is "incomplete" (exit 2), never "not conformant".
HARNESS = "harness"
OUTCOMES = ("passed", "failed", "error", "not_applicable", "skipped")
_COUNT_KEY = {
    "passed": "passed",
    "failed": "failed",
    "error": "errors",
    "not_applicable": "not_applicable",
    "skipped": "skipped",
}


@dataclass
class TestResult:
    id: str
    area: str
    outcome: str
    duration_s: float
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    issues: list[str] = field(default_factory=list)  # kuberay issues the check encodes
    # Optional, added after the first contract (older summary.json files load without them):
    # the full assertion message for a failure, and how many times the check ran
    # (more than 1 only with a rerun plugin; a pass after a failed attempt is "flaky").
    details: str = ""
    attempts: int = 1
    # The CPU of the nodes while the check ran, where the provider can read it (node_pressure.py):
    # pressure_mean_percent, pressure_max_percent, admission_wait_s. About the machine, not KubeRay.
    node_cpu: dict[str, float] = field(default_factory=dict)
    # Where the check's time went (conformance/stopwatch.py): admission_wait_s, turn_wait_s,
    # settle_wait_s (outside duration_s), setup_s, ready_wait_s, behaviour_s (of it hold_s and
    # kuberay_wait_s), teardown_s. Keys present only where time was spent.
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def flaky(self) -> bool:
        return self.outcome == "passed" and self.attempts > 1


@dataclass
class Summary:
    run_id: str
    started: str
    provider: str
    profile: str
    versions: dict[str, str]
    finished: str = ""
    complete: bool = True
    tests: list[TestResult] = field(default_factory=list)
    environment: dict[str, object] = field(default_factory=dict)
    # Added after the first contract (older files load without them). Which checks the run was
    # asked to make: tier, areas, keyword (-k), shard "K/N" and the counts (conformance/selection.py).
    selection: dict[str, object] = field(default_factory=dict)
    # Only in a report merged from shards (`report merge`): the shards it was made of.
    merged: dict[str, object] = field(default_factory=dict)

    def add(self, result: TestResult) -> None:
        if result.area not in (*AREAS, HARNESS):
            raise ValueError(f"unknown area {result.area!r}")
        if result.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {result.outcome!r}")
        self.tests.append(result)

    def areas(self, harness: bool = False) -> dict[str, dict[str, int]]:
        """Counts per area of the verdict (with `harness`, the harness's own checks too)."""
        counts: dict[str, dict[str, int]] = {}
        for test in self.tests:
            if test.area == HARNESS and not harness:
                continue
            area = counts.setdefault(test.area, dict.fromkeys(_COUNT_KEY.values(), 0))
            area[_COUNT_KEY[test.outcome]] += 1
        return counts

    def verdict(self) -> str:
        outcomes = {t.outcome for t in self.tests if t.area != HARNESS}
        harness = {t.outcome for t in self.tests if t.area == HARNESS}
        if "failed" in outcomes:
            return "not conformant"
        bad_harness = harness & {"failed", "error"}
        if "error" in outcomes or bad_harness or not self.complete or not outcomes:
            return "incomplete"
        return "conformant"

    def exit_code(self) -> int:
        return {
            "conformant": EXIT_CONFORMANT,
            "not conformant": EXIT_NOT_CONFORMANT,
            "incomplete": EXIT_ENVIRONMENT,
        }[self.verdict()]

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "started": self.started,
            "finished": self.finished,
            "provider": self.provider,
            "profile": self.profile,
            "versions": self.versions,
            "verdict": self.verdict(),
            "complete": self.complete,
            "environment": self.environment,
            "selection": self.selection,
            **({"merged": self.merged} if self.merged else {}),
            "areas": self.areas(),
            HARNESS: self.areas(harness=True).get(HARNESS, {}),
            "tests": [asdict(t) for t in self.tests],
        }

    def write(self, run_dir: Path, latest: bool = True) -> Path:
        """summary.json into `run_dir`; `latest` beside it points at it (a run's, not a merge's)."""
        if not self.finished:
            self.finished = now()
        run_dir.mkdir(parents=True, exist_ok=True)
        path = write_atomically(run_dir / "summary.json", json.dumps(self.to_json(), indent=2) + "\n")
        if latest:
            point_latest(run_dir)
        return path


def point_latest(run_dir: Path) -> None:
    """reports/latest -> the newest run, replaced atomically."""
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(latest)


def load(path: Path) -> Summary:
    data = json.loads(path.read_text())
    summary = Summary(
        run_id=data["run_id"],
        started=data["started"],
        provider=data["provider"],
        profile=data["profile"],
        versions=data["versions"],
        finished=data.get("finished", ""),
        complete=data.get("complete", True),
        environment=data.get("environment", {}),
        selection=data.get("selection", {}),
        merged=data.get("merged", {}),
    )
    for test in data["tests"]:
        summary.add(TestResult(**test))
    return summary


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{os.urandom(2).hex()}"
