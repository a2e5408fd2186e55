"""Sweeps that `down` runs after the node's programs have stopped.

Pods run in cgroups below our own cgroup root and mount below our state directory, so
every sweep here is confined to what this provider made: PIDs found in our cgroups,
mount points below our directory, cgroup directories under our names.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
POD_CGROUP_ROOT = "kuberay-conformance-pods"


def v1_hierarchies() -> list[Path]:
    """Mounted cgroup v1 hierarchies (cpu, memory, name=systemd, ...), not the unified one."""
    return [
        p
        for p in sorted(CGROUP_MOUNT.iterdir())
        if p.is_dir() and not p.is_symlink() and p.name != "unified" and (p / "cgroup.procs").exists()
    ]


def ensure_pod_cgroup_root() -> None:
    """kubelet's cgroupRoot must exist in every hierarchy before it starts."""
    for hierarchy in v1_hierarchies():
        root = hierarchy / POD_CGROUP_ROOT
        root.mkdir(exist_ok=True)
        # A new cpuset cgroup starts with no CPUs and no memory nodes; give it its parent's.
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists() and not (root / name).read_text().strip():
                (root / name).write_text((hierarchy / name).read_text())


def _pod_cgroup_dirs() -> list[Path]:
    dirs: list[Path] = []
    for hierarchy in v1_hierarchies():
        root = hierarchy / POD_CGROUP_ROOT
        if root.exists():
            dirs += [Path(d) for d, _, _ in os.walk(root)]
    return dirs


def kill_pod_processes(grace: float = 5.0) -> list[str]:
    pids = _pids_in(_pod_cgroup_dirs())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _pids_in(_pod_cgroup_dirs()):
            time.sleep(0.1)  # poll-interval: waiting for killed PIDs to leave the cgroup
        pids = _pids_in(_pod_cgroup_dirs())
        if not pids:
            return []
    return [f"pod process {pid} did not stop" for pid in pids]


def _pids_in(dirs: list[Path]) -> list[int]:
    pids: set[int] = set()
    for directory in dirs:
        try:
            pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        except OSError:
            continue
    return sorted(pids)


def remove_kubelet_cgroups() -> list[str]:
    problems = []
    # Deepest first: a cgroup directory can only be removed once its children are gone.
    for directory in sorted(_pod_cgroup_dirs(), key=lambda d: len(d.parts), reverse=True):
        try:
            directory.rmdir()
        except OSError as exc:
            problems.append(f"cgroup {directory}: {exc.strerror}")
    return problems


def mounts_below(root: Path) -> list[Path]:
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point.startswith(prefix) or mount_point == str(root):
            found.append(Path(mount_point))
    return found


def unmount_below(root: Path) -> list[str]:
    for _ in range(3):  # stacked mounts on one point need one unmount each
        targets = sorted(set(mounts_below(root)), key=lambda p: len(p.parts), reverse=True)
        if not targets:
            return []
        for target in targets:
            done = subprocess.run(["umount", str(target)], capture_output=True, check=False)
            if done.returncode != 0:
                # Busy with a process that is already gone from our cgroups: detach it.
                subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
    return [f"mount {m} is still mounted" for m in mounts_below(root)]
