"""A record of every change `up` makes to the host, so that `down` can undo exactly those.

Each entry is written before the change is made (an undo of something that did not
happen is harmless), and `down` replays the entries newest first.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Change:
    kind: str  # netns | link | sysctl
    target: str
    previous: str = ""


class HostJournal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[Change]:
        if not self.path.exists():
            return []
        return [Change(**item) for item in json.loads(self.path.read_text())]

    def record(self, change: Change) -> None:
        entries = self.entries()
        # The first record of a target wins: a later `up` sees values the cluster itself set.
        if any(e.kind == change.kind and e.target == change.target for e in entries):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps([e.__dict__ for e in [*entries, change]], indent=1))

    def undo_all(self) -> list[str]:
        """Undo every recorded change, newest first; returns what could not be undone."""
        problems = []
        for change in reversed(self.entries()):
            problem = undo(change)
            if problem:
                problems.append(problem)
        if not problems:
            self.path.unlink(missing_ok=True)
        return problems


def undo(change: Change) -> str:
    if change.kind == "netns":
        if Path("/run/netns", change.target).exists():
            return _quiet(["ip", "netns", "delete", change.target])
        return ""
    if change.kind == "link":
        if Path("/sys/class/net", change.target).exists():
            return _quiet(["ip", "link", "delete", change.target])
        return ""
    if change.kind == "sysctl":
        return write_sysctl(change.target, change.previous)
    return f"unknown host change {change.kind}"


def sysctl_path(key: str) -> Path:
    return Path("/proc/sys", *key.split("."))


def read_sysctl(key: str) -> str:
    return sysctl_path(key).read_text().strip()


def write_sysctl(key: str, value: str) -> str:
    try:
        sysctl_path(key).write_text(value + "\n")
    except OSError as exc:
        return f"sysctl {key}={value}: {exc.strerror}"
    return ""


def _quiet(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else f"{' '.join(cmd)}: {done.stderr.strip()}"
