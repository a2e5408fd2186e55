"""The host's cgroup layout, read from sample /proc texts, and what follows from it (pure logic)."""

from pathlib import Path

import pytest
import yaml

from conformance.errors import ProvisioningError
from conformance.providers.local import cgroup2, components, preflight
from conformance.providers.local.cgroup_layout import (
    CgroupMode,
    detect_layout,
    parse_mountinfo,
    parse_proc_cgroup,
    supports_cgroup_kill,
    unified_root,
)
from conformance.providers.local.layout import Network, StateLayout

GOLDEN = Path(__file__).parent / "golden" / "local-v1"

# This machine (a VM with a cgroup v1 hybrid layout), as read on 2026-12-01.
HYBRID_MOUNTINFO = """\
22 1 253:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
4:memory:/process_api/c6710f94
1:cpu:/
0::/
"""
# A systemd distribution booted unified (Ubuntu 22.04+, Debian 12, GitHub's runners).
UNIFIED_MOUNTINFO = """\
24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/root rw,discard
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
"""
UNIFIED_CGROUP = "0::/user.slice/user-1001.slice/session-1.scope\n"
# A container given the host's hierarchy read-only, plus a test's private second mount of it.
READ_ONLY_MOUNTINFO = """\
700 650 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
701 650 0:30 / /tmp/private\\040cg rw,relatime - cgroup2 none rw
"""
# An older systemd layout: cpu and cpuacct share a hierarchy, no cgroup2 at all.
V1_MOUNTINFO = """\
25 24 0:22 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
26 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
27 24 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
"""


def test_this_machine_is_hybrid_and_keeps_its_v1_paths() -> None:
    layout = detect_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP)
    assert layout.mode is CgroupMode.HYBRID
    assert layout.unified_mount == Path("/sys/fs/cgroup/unified")
    assert layout.v1_controllers["pids"] == Path("/sys/fs/cgroup/pids")
    assert "systemd" not in layout.v1_controllers  # a named hierarchy holds no controller
    assert layout.own_unified_path == "/"
    assert unified_root(layout) is None  # the provider's cgroups stay in the v1 hierarchies


def test_a_unified_host_puts_our_cgroups_in_its_cgroup2_mount() -> None:
    layout = detect_layout(UNIFIED_MOUNTINFO, UNIFIED_CGROUP)
    assert layout.mode is CgroupMode.UNIFIED
    assert layout.v1_controllers == {}
    assert layout.own_unified_path == "/user.slice/user-1001.slice/session-1.scope"
    assert unified_root(layout) == Path("/sys/fs/cgroup")
    assert not layout.unified_read_only


def test_the_hosts_mount_wins_over_a_private_second_mount_and_read_only_is_seen() -> None:
    layout = detect_layout(READ_ONLY_MOUNTINFO)
    assert layout.mode is CgroupMode.UNIFIED
    assert layout.unified_mount == Path("/sys/fs/cgroup")
    assert layout.unified_read_only
    private = [m for m in parse_mountinfo(READ_ONLY_MOUNTINFO) if m.mount_point.name == "private cg"]
    assert len(private) == 1 and not private[0].read_only  # \040 is a space


def test_v1_only_and_no_cgroups_at_all() -> None:
    v1 = detect_layout(V1_MOUNTINFO)
    assert v1.mode is CgroupMode.V1 and v1.unified_mount is None
    assert v1.v1_controllers["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert "xattr" not in v1.v1_controllers
    assert detect_layout("22 1 253:0 / / rw - ext4 /dev/vda rw\n").mode is CgroupMode.NONE


def test_proc_cgroup_keys_the_unified_entry_by_an_empty_name() -> None:
    entries = parse_proc_cgroup(HYBRID_CGROUP)
    assert entries[""] == "/" and entries["memory"] == "/process_api/c6710f94"
    assert parse_proc_cgroup("garbage\n") == {}


@pytest.mark.parametrize(
    ("release", "has_kill"), [("6.18.44-fc-v669", True), ("5.14.0-284.el9", True), ("5.10.0-28-amd64", False)]
)
def test_cgroup_kill_arrived_in_5_14(release: str, has_kill: bool) -> None:
    assert supports_cgroup_kill(release) is has_kill


def test_a_good_unified_host_has_no_problems() -> None:
    offered = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}
    assert cgroup2.host_problems(Path("/sys/fs/cgroup"), True, offered, offered) == []


def test_every_gap_of_a_unified_host_is_named_with_its_fix() -> None:
    # A read-only mount elsewhere, no pids controller, cpuset offered but not enabled for children.
    problems = cgroup2.host_problems(Path("/mnt/cg"), False, {"cpu", "cpuset", "memory"}, {"cpu", "memory"})
    causes = [cause for cause, _ in problems]
    fixes = [fix for _, fix in problems]
    assert causes == [
        "the cgroup v2 hierarchy is mounted at /mnt/cg, not /sys/fs/cgroup",
        "/mnt/cg is not writable",
        "the kernel offers no pids controller in /mnt/cg/cgroup.controllers",
        "controllers cpuset are not enabled in /mnt/cg/cgroup.subtree_control",
    ]
    assert fixes[-1] == "echo '+cpuset' > /mnt/cg/cgroup.subtree_control"


def test_preflight_reports_all_gaps_in_one_line(tmp_path: Path) -> None:
    # A plain directory standing in for a root cgroup whose controllers are not enabled for children.
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("\n")
    with pytest.raises(ProvisioningError) as raised:
        preflight.check_unified_hierarchy(tmp_path)
    line = raised.value.one_line()
    assert "\n" not in line
    assert f"mounted at {tmp_path}, not /sys/fs/cgroup" in line
    assert "controllers cpu, memory, pids are not enabled" in line
    assert f"echo '+cpu +memory +pids' > {tmp_path}/cgroup.subtree_control" in line


def test_an_old_unified_kernel_is_noted_not_refused() -> None:
    assert preflight.unified_notes("6.18.44") == []
    assert preflight.unified_notes("5.10.0-28-amd64") == [
        "kernel 5.10.0-28-amd64 has no cgroup.kill (5.14+): `down` stops leftover processes by PID"
    ]


def _rendered(mode: CgroupMode) -> tuple[str, str]:
    state = StateLayout(Path("/var/lib/kuberay-conformance/local"))
    kubelet = yaml.safe_dump(components.kubelet_config(state, Network(), mode))
    return kubelet, components.containerd_config(state)


def test_this_hosts_configs_are_byte_identical_to_before_cgroup_v2_support() -> None:
    # The golden files were rendered by the provider before it knew cgroup v2.
    kubelet, containerd = _rendered(detect_layout(HYBRID_MOUNTINFO, HYBRID_CGROUP).mode)
    assert kubelet == (GOLDEN / "kubelet.yaml").read_text()
    assert containerd == (GOLDEN / "containerd.toml").read_text()
    assert _rendered(CgroupMode.V1) == (kubelet, containerd)


def test_a_unified_host_drops_only_the_v1_override() -> None:
    v1_kubelet, v1_containerd = _rendered(CgroupMode.HYBRID)
    v2_kubelet, v2_containerd = _rendered(CgroupMode.UNIFIED)
    before, after = yaml.safe_load(v1_kubelet), yaml.safe_load(v2_kubelet)
    assert before.pop("failCgroupV1") is False
    assert "failCgroupV1" not in after
    assert before == after  # cgroupfs driver, cgroupRoot and the rest are the same
    assert after["cgroupDriver"] == "cgroupfs" and after["cgroupRoot"] == "/kuberay-conformance-pods"
    assert v2_containerd == v1_containerd and "SystemdCgroup = false" in v2_containerd
