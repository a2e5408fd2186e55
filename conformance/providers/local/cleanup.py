"""Sweeps that `down` runs after the node's programs have stopped.

Pods run in cgroups below our own cgroup root and mount below our state directory, so
every sweep here is confined to what this provider made: PIDs found in our cgroups,
mount points below our directory, cgroup directories under our names.

The pod cgroup root is one directory per v1 hierarchy on v1 and hybrid hosts, and one
subtree of the unified hierarchy on cgroup v2 hosts. Each function takes `cgroup_root`,
a cgroup v2 directory to use instead of the host's (tests point it at a private mount).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .cgroup2 import KUBELET_CONTROLLERS, UnifiedCgroup
from .cgroup_layout import host_layout, unified_root

CGROUP_MOUNT = Path("/sys/fs/cgroup")
POD_CGROUP_ROOT = "kuberay-conformance-pods"


def v1_hierarchies() -> list[Path]:
    """Mounted cgroup v1 hierarchies (cpu, memory, name=systemd, ...), not the unified one."""
    return [
        p
        for p in sorted(CGROUP_MOUNT.iterdir())
        if p.is_dir() and not p.is_symlink() and p.name != "unified" and (p / "cgroup.procs").exists()
    ]


def unified_pod_root(cgroup_root: Path | None = None) -> UnifiedCgroup | None:
    """kubelet's cgroupRoot as a v2 cgroup; None on v1 and hybrid hosts."""
    root = cgroup_root or unified_root(host_layout())
    return UnifiedCgroup(root / POD_CGROUP_ROOT) if root else None


def ensure_pod_cgroup_root(cgroup_root: Path | None = None, node: str = "") -> None:
    """kubelet's cgroupRoot must exist in every hierarchy before it starts. A worker node's kubelet
    gets one of its own (`node`) below ours: two kubelets on one root would each remove the other's
    pod cgroups as orphans."""
    levels = [POD_CGROUP_ROOT, *([f"{POD_CGROUP_ROOT}/{node}"] if node else [])]
    pods = unified_pod_root(cgroup_root)
    if pods:
        for level in levels:
            cgroup = UnifiedCgroup(pods.path.parent / level)
            cgroup.create()
            # kubelet refuses a cgroupRoot whose children lack a controller it uses (kubepods is one).
            cgroup.enable_for_children(KUBELET_CONTROLLERS)
        return
    for hierarchy in v1_hierarchies():
        for level in levels:
            root = hierarchy / level
            root.mkdir(exist_ok=True)
            # A new cpuset cgroup starts with no CPUs and no memory nodes; give it its parent's.
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (root.parent / name).exists() and not (root / name).read_text().strip():
                    (root / name).write_text((root.parent / name).read_text())


def _pod_cgroup_dirs() -> list[Path]:
    dirs: list[Path] = []
    for hierarchy in v1_hierarchies():
        root = hierarchy / POD_CGROUP_ROOT
        if root.exists():
            dirs += [Path(d) for d, _, _ in os.walk(root)]
    return dirs


def kill_node_pod_processes(node: str, grace: float = 5.0) -> list[str]:
    """Stop every container process of one worker node: those in its kubelet's cgroup root."""

    def listed() -> list[int]:
        pods = unified_pod_root()
        if pods is not None:
            return UnifiedCgroup(pods.path / node).pids()
        dirs = [Path(d) for h in v1_hierarchies() for d, _, _ in os.walk(h / POD_CGROUP_ROOT / node)]
        return _pids_in(dirs)

    return _signal_until_gone(listed, grace)


def pod_pids(cgroup_root: Path | None = None) -> list[int]:
    """Every process of every pod of every node: those below our pod cgroup root."""
    pods = unified_pod_root(cgroup_root)
    return pods.pids() if pods is not None else _pids_in(_pod_cgroup_dirs())


def kill_pod_processes(grace: float = 5.0, cgroup_root: Path | None = None) -> list[str]:
    pods = unified_pod_root(cgroup_root)
    if pods is None:
        return _signal_until_gone(pod_pids, grace)
    if not pods.pids() or pods.kill(grace):
        return []
    # No cgroup.kill (a kernel before 5.14), or something outlived it: by PID, as on v1.
    return _signal_until_gone(pods.pids, grace)


def _signal_until_gone(list_pids: Callable[[], list[int]], grace: float) -> list[str]:
    pids = list_pids()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and list_pids():
            time.sleep(0.1)  # poll-interval: waiting for killed PIDs to leave the cgroup
        pids = list_pids()
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


def remove_kubelet_cgroups(cgroup_root: Path | None = None) -> list[str]:
    pods = unified_pod_root(cgroup_root)
    if pods:
        return pods.remove()
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
