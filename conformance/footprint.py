"""The harness's own footprint over a run: memory, open files and TCP connections of its processes.

A run of an hour or more on a shared CI machine must not grow with the number of checks it makes:
a watch never closed, a client per check kept, a thread per sampler left running would each show
here first. The controller samples itself and its xdist workers every `EVERY_S` seconds from
/proc (Linux; elsewhere nothing is recorded) and writes the samples to `footprint.jsonl` in the run
folder and the figures (peaks, and the growth between the first and the last quarter of the run)
to summary.json's `environment.harness_footprint`.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

EVERY_S = 10.0
FILE = "footprint.jsonl"
_ESTABLISHED = "01"  # the state column of /proc/net/tcp{,6}


@dataclass(frozen=True)
class Reading:
    at: float  # seconds since the sampler started
    pid: int
    role: str  # controller | worker
    rss_mib: float
    fds: int
    tcp_connections: int  # established TCP sockets the process holds (API server, exec streams)
    threads: int


def read(pid: int, role: str, at: float) -> Reading | None:
    """One process's figures, or None when it is gone (or /proc does not exist here)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        links = list(filter(None, (_link(pid, fd) for fd in os.listdir(f"/proc/{pid}/fd"))))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields.get("VmRSS", "0 kB").split()[0])
    sockets = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    return Reading(
        at=round(at, 1),
        pid=pid,
        role=role,
        rss_mib=round(rss_kib / 1024, 1),
        fds=len(links),
        tcp_connections=len(sockets & _established_inodes(pid)),
        threads=int(fields.get("Threads", "0").strip()),
    )


def _link(pid: int, fd: str) -> str:
    """What a descriptor points at; "" for one closed since the listing (the listing's own, say)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""


def _established_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            columns = line.split()
            if len(columns) > 9 and columns[3] == _ESTABLISHED:
                inodes.add(columns[9])
    return inodes


class Sampler:
    """Samples the controller (this process) and the workers `workers()` names, in a daemon thread."""

    def __init__(self, run_dir: Path, workers: Callable[[], list[int]], every_s: float = EVERY_S) -> None:
        self._out = run_dir / FILE
        self._workers = workers
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="footprint", daemon=True)
        self._started = time.monotonic()
        self.readings: list[Reading] = []

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, object]:
        self._stop.set()
        self._thread.join(timeout=self._every_s + 5)
        self._sample()  # the state at the end, after the last check
        return figures(self.readings)

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self._sample()

    def _sample(self) -> None:
        at = time.monotonic() - self._started
        pids = [(os.getpid(), "controller"), *((pid, "worker") for pid in list(self._workers()))]
        found = [r for r in (read(pid, role, at) for pid, role in pids) if r is not None]
        self.readings.extend(found)
        try:
            with self._out.open("a") as out:
                out.writelines(json.dumps(asdict(r)) + "\n" for r in found)
        except OSError:
            pass  # the figures still reach summary.json; a full disk is reported where it matters


def figures(readings: list[Reading]) -> dict[str, object]:
    """Peaks per role, and growth: the median of the last quarter of the run less that of the first
    (per process, the largest), which stays near 0 when nothing accumulates."""
    if not readings:
        return {}
    result: dict[str, object] = {"samples": len(readings), "every_s": EVERY_S}
    for role in ("controller", "worker"):
        mine = [r for r in readings if r.role == role]
        if not mine:
            continue
        result[role] = {
            "peak_rss_mib": max(r.rss_mib for r in mine),
            "peak_fds": max(r.fds for r in mine),
            "peak_tcp_connections": max(r.tcp_connections for r in mine),
            "peak_threads": max(r.threads for r in mine),
            "growth": _growth(mine),
        }
    return result


def _growth(readings: list[Reading]) -> dict[str, float]:
    by_pid: dict[int, list[Reading]] = {}
    for reading in readings:
        by_pid.setdefault(reading.pid, []).append(reading)
    names = ("rss_mib", "fds", "tcp_connections", "threads")
    growth = dict.fromkeys(names, 0.0)
    for series in by_pid.values():
        if len(series) < 8:  # too short a life to tell growth from noise
            continue
        quarter = len(series) // 4
        first, last = series[:quarter], series[-quarter:]
        for name in names:
            change = statistics.median(getattr(r, name) for r in last) - statistics.median(
                getattr(r, name) for r in first
            )
            growth[name] = round(max(growth[name], change), 1)
    return growth
