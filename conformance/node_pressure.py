"""CPU pressure of the machine the cluster's nodes run on, from the kernel's PSI (pressure stall information).

Two uses, both about keeping a starved machine from passing for a misbehaving KubeRay:

- Admission. In a parallel run a check starts only once the machine has room: CPU pressure
  (the share of the last 10 s in which some runnable task waited for a CPU) below
  ADMIT_BELOW_PERCENT. A Ray head that starts while the node is saturated can miss its own
  startup timeouts; KubeRay then correctly fails the RayJob whose dashboard never answered
  (seen 2026-12-03: "Job status checks have been failing ... exceeded timeout of 300s"), and the
  run reported a KubeRay failure that the harness had caused. Waiting is bounded: past
  ADMIT_WAIT_S the check starts anyway and its worker says so (a pacing, not a precondition).
- Evidence. While a check runs, its pressure is sampled (the mean and the highest 10 s figure),
  and a failed check's reason says when the node was starved meanwhile, so a reader can tell a
  slow machine from a slow operator. The figures go to the check's `node_cpu` in summary.json,
  not to its metrics, which are what KubeRay did.

Only where the provider names the file: PSI is per kernel, so it describes the nodes only when they
run on this machine (the local provider's host processes). Elsewhere nothing is read or waited for.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.progress import progress

FACT = "node_cpu_pressure"  # the Cluster fact naming the PSI file of the nodes' kernel
PSI_CPU = Path("/proc/pressure/cpu")
# A check that starts no pod (it reads the operator, or KubeRay refuses what it applies) has no Ray
# head to miss its startup timeouts: it is never held back. Measured 2026-12-07 (smoke tier): such
# checks waited up to the whole ADMIT_WAIT_S for a 0.1 s read.
NO_PODS_MARKER = "no_pods"
NO_PODS_HELP = (
    "no_pods: the check starts no pod (it reads what runs, or KubeRay refuses what it applies), so it "
    "starts without waiting for CPU room"
)
ADMIT_BELOW_PERCENT = 50.0  # a new check waits while the node's CPU pressure is at or above this
ADMIT_WAIT_S = 120.0  # ... for at most this long, then starts anyway (noted)
STARVED_PERCENT = 80.0  # a 10 s figure at or above this is a starved node, said in a failure's reason
SAMPLE_EVERY_S = 1.0

_SOME = re.compile(r"^some avg10=(?P<avg10>[\d.]+) avg60=[\d.]+ avg300=[\d.]+ total=(?P<total>\d+)$", re.M)


@dataclass(frozen=True)
class Reading:
    avg10: float  # percent of the last 10 s in which some runnable task waited for a CPU
    total_us: int  # microseconds of such waiting since boot
    at: float  # time.monotonic() of the reading


def parse(text: str, at: float) -> Reading:
    match = _SOME.search(text)
    if match is None:
        raise ValueError(f"not a PSI file: {text[:80]!r}")
    return Reading(float(match["avg10"]), int(match["total"]), at)


def read(path: Path) -> Reading:
    return parse(path.read_text(), time.monotonic())


def wait_for_room(
    path: Path, *, below: float = ADMIT_BELOW_PERCENT, timeout: float = ADMIT_WAIT_S
) -> tuple[float, float]:
    """Wait until the CPU pressure in `path` is below `below` percent, at most `timeout` seconds.

    Returns (seconds waited, the last figure read); the caller notes a wait that ran out."""
    started = time.monotonic()
    reading = read(path)
    if reading.avg10 < below:
        return 0.0, reading.avg10
    with progress(f"waiting for room on the node (CPU pressure below {below:.0f}%)") as line:
        while reading.avg10 >= below and time.monotonic() - started < timeout:
            line.update(f"CPU pressure {reading.avg10:.0f}%")
            time.sleep(SAMPLE_EVERY_S)  # poll-interval: PSI has no watch; its own average moves each 2 s
            reading = read(path)
    return round(time.monotonic() - started, 1), reading.avg10


@dataclass
class CheckPressure:
    """Samples the CPU pressure while one check runs, in a daemon thread (one small file read a second)."""

    path: Path
    every: float = SAMPLE_EVERY_S
    first: Reading | None = None
    last: Reading | None = None
    highest: float = 0.0
    starved_s: float = 0.0  # sampled seconds with a 10 s figure at or above STARVED_PERCENT
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> CheckPressure:
        self.first = read(self.path)
        self._take(self.first)
        self._thread = threading.Thread(target=self._run, name="node-pressure", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._take(read(self.path))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self._take(read(self.path))
            except (OSError, ValueError):
                return  # the figures stop here; the mean still comes from first and last totals

    def _take(self, reading: Reading) -> None:
        previous, self.last = self.last, reading
        self.highest = max(self.highest, reading.avg10)
        if reading.avg10 >= STARVED_PERCENT and previous is not None:
            self.starved_s += reading.at - previous.at

    def figures(self) -> dict[str, float]:
        """Mean pressure over the check (from PSI's own running total) and the highest 10 s figure."""
        if self.first is None or self.last is None or self.last.at <= self.first.at:
            return {}
        waited_us = self.last.total_us - self.first.total_us
        mean = 100.0 * waited_us / ((self.last.at - self.first.at) * 1e6)
        return {
            "pressure_mean_percent": round(min(mean, 100.0), 1),
            "pressure_max_percent": round(self.highest, 1),
        }

    def starvation_note(self) -> str:
        """A sentence for a failed check's reason when the node was starved while it ran, else ""."""
        if self.highest < STARVED_PERCENT:
            return ""
        return (
            f"the node was CPU-starved during this check: pressure up to {self.highest:.0f}% "
            f"(some task waiting for a CPU), at or above {STARVED_PERCENT:.0f}% for {self.starved_s:.0f} s"
        )


def needs_room(item: pytest.Item) -> bool:
    """Whether the check waits for CPU room before it starts (everything but `no_pods`)."""
    return item.get_closest_marker(NO_PODS_MARKER) is None
