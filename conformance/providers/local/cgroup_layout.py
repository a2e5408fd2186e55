"""Which cgroup layout the host has: v1, hybrid, or the unified (v2) hierarchy alone.

Read from /proc/self/mountinfo (what is mounted where) and /proc/self/cgroup (where this
process sits). The parsing is pure, so every layout is tested on sample texts; only
`host_layout` reads the host.

- v1: only v1 hierarchies (cpu, memory, pids, ...); no cgroup2 mount.
- hybrid: v1 hierarchies hold the controllers, and a cgroup2 hierarchy is mounted too
  (systemd's /sys/fs/cgroup/unified), usually with no controllers. This machine's layout.
  Controllers live in v1, so the provider treats it exactly as v1.
- unified: cgroup2 alone holds the controllers (most current distributions, GitHub's runners).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class CgroupMode(StrEnum):
    V1 = "v1"
    HYBRID = "hybrid"
    UNIFIED = "unified"
    NONE = "none"


@dataclass(frozen=True)
class Mount:
    root: str  # the part of the filesystem seen at the mount point ("/" unless a subtree)
    mount_point: Path
    fstype: str
    mount_options: tuple[str, ...]
    super_options: tuple[str, ...]

    @property
    def read_only(self) -> bool:
        return "ro" in self.mount_options


@dataclass(frozen=True)
class CgroupLayout:
    mode: CgroupMode
    # The cgroup2 mount the provider uses (None when there is none).
    unified_mount: Path | None = None
    unified_read_only: bool = False
    # v1 controller -> mount point of its hierarchy.
    v1_controllers: dict[str, Path] = field(default_factory=dict)
    # This process's cgroup in the unified hierarchy, relative to its root ("/" at the top).
    own_unified_path: str | None = None


def parse_mountinfo(text: str) -> list[Mount]:
    """`ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS` per line."""
    mounts = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        before, after = line.split(" - ", 1)
        fields, tail = before.split(), after.split()
        if len(fields) < 6 or len(tail) < 3:
            continue
        mounts.append(
            Mount(
                root=_unescape(fields[3]),
                mount_point=Path(_unescape(fields[4])),
                fstype=tail[0],
                mount_options=tuple(fields[5].split(",")),
                super_options=tuple(tail[2].split(",")),
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """`ID:CONTROLLERS:PATH` per line -> {controllers: path}; the unified entry is keyed ""."""
    entries = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) == 3:
            entries[parts[1]] = parts[2]
    return entries


def detect_layout(mountinfo: str, proc_cgroup: str = "") -> CgroupLayout:
    mounts = parse_mountinfo(mountinfo)
    v1 = _v1_controllers(mounts)
    unified = _preferred_unified_mount([m for m in mounts if m.fstype == "cgroup2"])
    if unified is None:
        mode = CgroupMode.V1 if v1 else CgroupMode.NONE
    else:
        mode = CgroupMode.HYBRID if v1 else CgroupMode.UNIFIED
    return CgroupLayout(
        mode=mode,
        unified_mount=unified.mount_point if unified else None,
        unified_read_only=bool(unified and unified.read_only),
        v1_controllers=v1,
        own_unified_path=parse_proc_cgroup(proc_cgroup).get(""),
    )


def host_layout() -> CgroupLayout:
    return detect_layout(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())


def unified_root(layout: CgroupLayout) -> Path | None:
    """Where the provider's own cgroups go: the cgroup2 mount, on a unified host only."""
    return layout.unified_mount if layout.mode is CgroupMode.UNIFIED else None


def supports_cgroup_kill(kernel_release: str) -> bool:
    """`cgroup.kill` appeared in Linux 5.14; before it, processes are stopped by PID."""
    match = re.match(r"(\d+)\.(\d+)", kernel_release)
    return bool(match) and (int(match[1]), int(match[2])) >= (5, 14)


def _v1_controllers(mounts: list[Mount]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for mount in mounts:
        if mount.fstype != "cgroup":
            continue
        # Options besides controllers are flags (rw, xattr, name=systemd, ...): a hierarchy
        # with none of the controllers, like systemd's named one, does not make a host v1.
        for option in mount.super_options:
            if option in _V1_CONTROLLER_NAMES:
                found.setdefault(option, mount.mount_point)
    return found


def _preferred_unified_mount(candidates: list[Mount]) -> Mount | None:
    # A second mount of the same hierarchy (e.g. a test's private one) must not win over the host's.
    for wanted in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        for mount in candidates:
            if mount.mount_point == wanted:
                return mount
    return candidates[0] if candidates else None


def _unescape(text: str) -> str:
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), text)


# The kernel's v1 controllers (Documentation/admin-guide/cgroup-v1); mount options that are
# not among them (xattr, noprefix, clone_children, ...) are flags, not controllers.
_V1_CONTROLLER_NAMES = frozenset(
    {
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "blkio",
        "perf_event",
        "hugetlb",
        "pids",
        "rdma",
        "misc",
    }
)
