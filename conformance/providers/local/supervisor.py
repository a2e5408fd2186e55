"""Start the node's programs as daemons, know whether they live, and stop them by PID.

Every program is started into one cgroup of ours (in the `pids` and `memory` v1
hierarchies, or one cgroup of the unified hierarchy on a cgroup v2 host), so that the
processes it forks (containerd's shims) are known too: `down` stops exactly the PIDs
listed there, and never anything found by name. A record per program keeps its PID
together with its kernel start time, so a recycled PID is never mistaken for it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .cgroup2 import UnifiedCgroup
from .cgroup_layout import host_layout, unified_root

CGROUP_CONTROLLERS = ("pids", "memory")


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_time: int
    argv: list[str]
    log: str


def process_start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime); the command name in field 2 may contain spaces, so split after ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_running(record: ProcessRecord) -> bool:
    return process_start_time(record.pid) == record.start_time and not _is_zombie(record.pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Supervisor:
    def __init__(
        self,
        pid_dir: Path,
        cgroup_name: str,
        cgroup_root: Path | None = None,
        use_cgroup_kill: bool = True,
    ) -> None:
        """`cgroup_root`: a cgroup v2 directory to make our cgroup in (tests use a private mount);
        None means the host's own: its unified hierarchy on a v2 host, else the v1 hierarchies."""
        self.pid_dir = pid_dir
        self.cgroup_name = cgroup_name
        self._cgroup_root = cgroup_root
        self._use_cgroup_kill = use_cgroup_kill

    @functools.cached_property
    def unified(self) -> UnifiedCgroup | None:
        """Our cgroup when it is a v2 one; None on v1 and hybrid hosts (their controllers are v1)."""
        root = self._cgroup_root or unified_root(host_layout())
        return UnifiedCgroup(root / self.cgroup_name, self._use_cgroup_kill) if root else None

    def cgroup_dirs(self) -> list[Path]:
        if self.unified:
            return [self.unified.path]
        return [Path("/sys/fs/cgroup", c, self.cgroup_name) for c in CGROUP_CONTROLLERS]

    def _ensure_cgroups(self) -> None:
        for directory in self.cgroup_dirs():
            directory.mkdir(exist_ok=True)

    def record(self, name: str) -> ProcessRecord | None:
        path = self.pid_dir / f"{name}.json"
        if not path.exists():
            return None
        return ProcessRecord(**json.loads(path.read_text()))

    def records(self) -> list[ProcessRecord]:
        if not self.pid_dir.exists():
            return []
        return [ProcessRecord(**json.loads(p.read_text())) for p in sorted(self.pid_dir.glob("*.json"))]

    def running(self, name: str) -> bool:
        record = self.record(name)
        return record is not None and is_running(record)

    def start(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
    ) -> ProcessRecord:
        self._ensure_cgroups()
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        procs_files = [d / "cgroup.procs" for d in self.cgroup_dirs()]

        def join_cgroups() -> None:
            for procs in procs_files:
                procs.write_text(str(os.getpid()))

        with log.open("ab") as sink:
            sink.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            sink.flush()
            # A new session, so that the program outlives this CLI and ignores its terminal's Ctrl-C.
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=join_cgroups,  # noqa: PLW1509 - only writes a file, safe after fork
            )
        start_time = process_start_time(child.pid)
        record = ProcessRecord(name, child.pid, start_time or 0, argv, str(log))
        (self.pid_dir / f"{name}.json").write_text(json.dumps(asdict(record)))
        return record

    def exited_early(self, record: ProcessRecord, within: float = 0.5) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if not is_running(record):
                return True
            time.sleep(0.05)  # poll-interval: did the program exit right after start?
        return False

    def stop(self, name: str, grace: float = 10.0) -> None:
        record = self.record(name)
        if record and is_running(record):
            _terminate([record.pid], grace)
        (self.pid_dir / f"{name}.json").unlink(missing_ok=True)

    def cgroup_pids(self) -> list[int]:
        if self.unified:
            return self.unified.pids()
        pids: set[int] = set()
        for directory in self.cgroup_dirs():
            procs = directory / "cgroup.procs"
            if procs.exists():
                pids.update(int(p) for p in procs.read_text().split())
        return sorted(pids)

    def stop_forked(self, mentioning: str, grace: float = 10.0) -> list[int]:
        """Stop the processes of our cgroup whose command line mentions `mentioning` (a worker
        node's containerd shims name its socket); returns those that survived."""
        mine = [pid for pid in self.cgroup_pids() if mentioning in _cmdline(pid)]
        _terminate(mine, grace)
        return [pid for pid in mine if _alive(pid)]

    def stop_all(self, order: list[str], grace: float = 10.0) -> list[int]:
        """Stop the named programs in order, then whatever they forked; returns PIDs that survived."""
        for name in order:
            self.stop(name, grace)
        for record in self.records():
            self.stop(record.name, grace)
        leftovers = self.cgroup_pids()
        # cgroup.kill also takes what is forked meanwhile; without it (v1, or a kernel before
        # 5.14) the PIDs read are signalled.
        if leftovers and not (self.unified and self.unified.kill(grace)):
            _terminate(leftovers, grace)
        survivors = self.cgroup_pids()
        if not survivors:
            self._remove_cgroups()
        return survivors

    def _remove_cgroups(self) -> None:
        if self.unified:
            # With no process left, only a cgroup made meanwhile could stay; the next `up` reuses it.
            self.unified.remove()
            return
        for directory in self.cgroup_dirs():
            if directory.exists():
                directory.rmdir()


def _terminate(pids: list[int], grace: float) -> None:
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)  # poll-interval: waiting for SIGTERMed PIDs to exit
    for pid in pids:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)  # poll-interval: waiting for SIGKILLed PIDs to exit


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    return process_start_time(pid) is not None and not _is_zombie(pid)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
