"""Checks that run before the local provider changes anything on the host.

Each failed check raises one error naming the cause and the fix, so that a bad
environment is reported before a bridge, a process or a mount exists.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from conformance.errors import ProvisioningError

from . import cgroup2
from .cgroup_layout import CgroupLayout, CgroupMode, host_layout, supports_cgroup_kill
from .components import CNI_BIN_DIR, RUNC

REQUIRED_PROGRAMS = {
    "ip": "apt-get install iproute2",
    "nsenter": "apt-get install util-linux",
    "iptables": "apt-get install iptables",
    "sysctl": "apt-get install procps",
    "mount": "apt-get install mount",
}
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
CGROUP_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")


def check_root() -> None:
    if os.geteuid() != 0:
        raise ProvisioningError(
            "the local provider needs root (it creates a network namespace, mounts and cgroups)",
            "run it as root, e.g. `sudo -E kuberay-conformance cluster up`",
        )


def check_programs() -> None:
    for program, install in REQUIRED_PROGRAMS.items():
        if shutil.which(program) is None:
            raise ProvisioningError(f"`{program}` is not installed", install)
    if not Path(RUNC).exists():
        raise ProvisioningError(f"runc is not installed at {RUNC}", "apt-get install runc")
    missing = [p for p in CNI_PLUGINS if not Path(CNI_BIN_DIR, p).exists()]
    if missing:
        raise ProvisioningError(
            f"CNI plugins {', '.join(missing)} are missing from {CNI_BIN_DIR}",
            "apt-get install containernetworking-plugins",
        )


def check_kernel() -> list[str]:
    """Raises on what the cluster cannot run without; returns notes on what it works around."""
    filesystems = Path("/proc/filesystems").read_text()
    if "overlay" not in filesystems:
        raise ProvisioningError("the kernel has no overlay filesystem", "use a kernel with CONFIG_OVERLAY_FS")
    notes = check_cgroups(host_layout(), os.uname().release)
    if not Path("/proc/sys/net/ipv4/ip_forward").exists():
        raise ProvisioningError("the kernel has no IPv4 forwarding", "use a kernel with CONFIG_INET")
    if not Path("/proc/self/ns/net").exists():
        raise ProvisioningError("the kernel has no network namespaces", "use a kernel with CONFIG_NET_NS")
    return notes


def check_cgroups(layout: CgroupLayout, kernel_release: str) -> list[str]:
    if layout.mode is not CgroupMode.UNIFIED:
        # v1 and hybrid hosts: the controllers are in the v1 hierarchies.
        missing = [c for c in CGROUP_V1_CONTROLLERS if not Path("/sys/fs/cgroup", c, "cgroup.procs").exists()]
        if missing:
            raise ProvisioningError(
                f"cgroup controllers {', '.join(missing)} are not mounted",
                "mount the cgroup v1 hierarchies (or boot with a cgroup v2 unified hierarchy)",
            )
        return []
    check_unified_hierarchy(layout.unified_mount or cgroup2.KUBELET_CGROUP_MOUNT, layout.unified_read_only)
    return unified_notes(kernel_release)


def unified_notes(kernel_release: str) -> list[str]:
    if supports_cgroup_kill(kernel_release):
        return []
    return [f"kernel {kernel_release} has no cgroup.kill (5.14+): `down` stops leftover processes by PID"]


def check_unified_hierarchy(mount: Path, read_only: bool = False) -> None:
    """Every gap of a cgroup v2 host at once, in one line, with the fix for each."""
    problems = cgroup2.host_problems(
        mount,
        writable=not read_only and os.access(mount, os.W_OK),
        controllers=cgroup2.read_set(mount / "cgroup.controllers"),
        subtree_control=cgroup2.read_set(mount / "cgroup.subtree_control"),
    )
    if problems:
        raise ProvisioningError(
            "cgroup v2: " + "; ".join(cause for cause, _ in problems), "; ".join(fix for _, fix in problems)
        )


def check_port_free(component: str, host: str, port: int) -> None:
    """A port answering before we started its component belongs to someone else."""
    with socket.socket() as probe:
        probe.settimeout(0.5)
        if probe.connect_ex((host, port)) == 0:
            raise ProvisioningError(
                f"port {host}:{port} for {component} is in use by a process this provider did not start",
                "stop that process, or run `kuberay-conformance cluster down --provider local` first",
            )


def run_all() -> list[str]:
    """Raises on the first blocking gap; returns notes worth telling the user."""
    check_root()
    check_programs()
    return check_kernel()
