"""One cgroup subtree of the unified (v2) hierarchy: make it, list and stop its processes, remove it.

On a unified host the supervisor's programs and kubelet's pods each live in a subtree
of ours. `cgroup.kill` (Linux 5.14+) stops a whole subtree at once, including processes
forked while it runs; where it is absent the callers fall back to signalling PIDs.
What a host must offer (`host_problems`) is decided here too, from facts read by preflight.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# kubelet's own list (pkg/kubelet/cm/cgroup_v2_manager_linux.go): it refuses a cgroupRoot
# lacking any of these that the host's root cgroup offers.
KUBELET_CONTROLLERS = ("cpu", "cpuset", "memory", "hugetlb", "pids")
# Without these kubelet cannot enforce pod limits at all.
REQUIRED_CONTROLLERS = ("cpu", "memory", "pids")
# kubelet and runc look for the unified hierarchy here and nowhere else.
KUBELET_CGROUP_MOUNT = Path("/sys/fs/cgroup")


def read_set(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


@dataclass(frozen=True)
class UnifiedCgroup:
    path: Path
    # False only to exercise the by-PID path that kernels before 5.14 take.
    use_cgroup_kill: bool = True

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def enable_for_children(self, controllers: tuple[str, ...]) -> None:
        """Turn on, for the cgroups below this one, those of `controllers` that this one has."""
        offered = read_set(self.path / "cgroup.controllers")
        wanted = [c for c in controllers if c in offered]
        if wanted:
            (self.path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))

    def tree(self) -> list[Path]:
        """This cgroup and every one below it, deepest first (the order they can be removed in)."""
        if not self.path.is_dir():
            return []
        dirs = [Path(d) for d, _, _ in os.walk(self.path)]
        return sorted(dirs, key=lambda d: len(d.parts), reverse=True)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for directory in self.tree():
            try:
                found.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
            except OSError:
                continue  # removed while we walked
        return sorted(found)

    def populated(self) -> bool:
        """Whether any process is left in the subtree (the kernel's own count, in cgroup.events)."""
        try:
            events = dict(line.split() for line in (self.path / "cgroup.events").read_text().splitlines())
        except OSError:
            return bool(self.pids())
        return events.get("populated") == "1"

    def kill(self, timeout: float) -> bool:
        """SIGKILL the whole subtree through cgroup.kill; True once it is empty within `timeout`.

        False when the kernel has no cgroup.kill (before 5.14): the caller then stops PIDs."""
        kill_file = self.path / "cgroup.kill"
        if not self.use_cgroup_kill or not kill_file.exists():
            return False
        kill_file.write_text("1")
        deadline = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)  # poll-interval: killed processes leave the cgroup as they exit
        return True

    def remove(self) -> list[str]:
        problems = []
        for directory in self.tree():
            try:
                directory.rmdir()
            except OSError as exc:
                problems.append(f"cgroup {directory}: {exc.strerror}")
        return problems


def host_problems(
    mount: Path, writable: bool, controllers: set[str], subtree_control: set[str]
) -> list[tuple[str, str]]:
    """What a unified host lacks for the local cluster, as (cause, fix) pairs; empty when nothing.

    `controllers` and `subtree_control` are those of the hierarchy's root cgroup."""
    problems = []
    if mount != KUBELET_CGROUP_MOUNT:
        problems.append(
            (
                f"the cgroup v2 hierarchy is mounted at {mount}, not {KUBELET_CGROUP_MOUNT}",
                f"mount it at {KUBELET_CGROUP_MOUNT} (kubelet and runc look for it there)",
            )
        )
    if not writable:
        problems.append(
            (
                f"{mount} is not writable",
                "run on the host as root, or give the container a read-write cgroup mount"
                " (e.g. --privileged --cgroupns=host)",
            )
        )
    absent = [c for c in REQUIRED_CONTROLLERS if c not in controllers]
    if absent:
        problems.append(
            (
                f"the kernel offers no {', '.join(absent)} controller in {mount}/cgroup.controllers",
                "boot a kernel with these controllers and no cgroup_disable= for them",
            )
        )
    # kubelet demands of its cgroupRoot every controller of its list that the root offers.
    disabled = [c for c in KUBELET_CONTROLLERS if c in controllers and c not in subtree_control]
    if disabled:
        problems.append(
            (
                f"controllers {', '.join(disabled)} are not enabled in {mount}/cgroup.subtree_control",
                f"echo '{' '.join('+' + c for c in disabled)}' > {mount}/cgroup.subtree_control",
            )
        )
    return problems
