"""The local provider's cgroup v2 code on a real cgroup2 hierarchy, mounted at a private mount point.

This machine is cgroup v1 hybrid, so the v2 paths cannot run through a whole cluster here;
these tests run them against the kernel instead. cgroup2 is one hierarchy per kernel: the
private mount shows the same tree as /sys/fs/cgroup/unified, so every test works only below
a directory of its own (krc-test-<random>), removed with the mount at the end. The running
cluster's cgroups (v1, under other names) and /sys/fs/cgroup are never touched.
Needs root (mount, cgroup writes); no cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.errors import ProvisioningError
from conformance.kube.wait import poll_until
from conformance.providers.local import cleanup, preflight
from conformance.providers.local.cgroup2 import UnifiedCgroup
from conformance.providers.local.cgroup_layout import (
    CgroupMode,
    detect_layout,
    parse_mountinfo,
    parse_proc_cgroup,
)
from conformance.providers.local.supervisor import Supervisor

pytestmark = pytest.mark.cgroup2_mount

# A process family like containerd and its shims: the parent forks children that outlive it
# and answer SIGTERM only by leaving a marker, so a marker shows a child was asked by PID.
FAMILY = r"""
import os, signal, sys
markers, children = sys.argv[1], int(sys.argv[2])
def child():
    signal.signal(signal.SIGTERM, lambda *_: open(os.path.join(markers, f"term-{os.getpid()}"), "w").close())
    open(os.path.join(markers, f"child-{os.getpid()}"), "w").close()
    while True:
        signal.pause()
for _ in range(children):
    if os.fork() == 0:
        child()
signal.pause()
"""


@pytest.fixture
def private_root(tmp_path: Path) -> Iterator[Path]:
    """A cgroup of our own in a private mount of cgroup2; unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the cgroup v2 tests need root: they mount cgroup2 and write cgroup files")
    mount_point = tmp_path / "cgroup2"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mount_point)], check=True)
    root = mount_point / f"krc-test-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir()
        yield root
    finally:
        # Whatever a failed test left: stopped and removed, then the mount goes.
        leftover = UnifiedCgroup(root)
        leftover.kill(timeout=10)
        problems = leftover.remove()
        subprocess.run(["umount", str(mount_point)], check=True)
    assert not cleanup.mounts_below(mount_point), "the private cgroup2 mount is still mounted"
    assert problems == [], problems


def _unified_path_of(pid: int) -> str:
    return parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())[""]


def _in_tree(root: Path, cgroup: Path) -> str:
    """A cgroup's path as /proc/PID/cgroup shows it: relative to the hierarchy's root."""
    return "/" + str(cgroup.relative_to(root.parent))


def _wait_children(markers: Path, count: int) -> list[int]:
    def started() -> list[int] | None:
        pids = [int(p.name.split("-")[1]) for p in markers.glob("child-*")]
        return pids if len(pids) >= count else None

    return poll_until(started, what=f"{count} child processes to start", timeout=30, every=0.05)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_family(supervisor: Supervisor, tmp_path: Path, children: int = 3) -> tuple[int, list[int], Path]:
    markers = tmp_path / "markers"
    markers.mkdir()
    record = supervisor.start(
        "family", [sys.executable, "-c", FAMILY, str(markers), str(children)], tmp_path / "family.log"
    )
    return record.pid, _wait_children(markers, children), markers


def test_the_supervisor_groups_its_programs_and_cgroup_kill_stops_what_they_left(
    private_root: Path, tmp_path: Path
) -> None:
    supervisor = Supervisor(tmp_path / "pids", "krc-supervised", cgroup_root=private_root)
    parent, children, markers = _start_family(supervisor, tmp_path)
    ours = private_root / "krc-supervised"
    assert supervisor.cgroup_dirs() == [ours]
    for pid in [parent, *children]:
        assert _unified_path_of(pid) == _in_tree(private_root, ours)
    assert set(supervisor.cgroup_pids()) == {parent, *children}

    survivors = supervisor.stop_all(["family"], grace=30)

    assert survivors == []
    assert not any(_alive(pid) for pid in [parent, *children])
    # The parent was asked by PID (SIGTERM); its orphans went by cgroup.kill, never asked.
    assert list(markers.glob("term-*")) == []
    assert not ours.exists()
    assert supervisor.records() == []


def test_without_cgroup_kill_the_supervisor_stops_them_by_pid(private_root: Path, tmp_path: Path) -> None:
    supervisor = Supervisor(
        tmp_path / "pids", "krc-supervised", cgroup_root=private_root, use_cgroup_kill=False
    )
    parent, children, markers = _start_family(supervisor, tmp_path)

    survivors = supervisor.stop_all(["family"], grace=1)

    assert survivors == []
    assert not any(_alive(pid) for pid in [parent, *children])
    # Each orphan got SIGTERM by PID (and ignored it), then SIGKILL after the grace.
    assert {int(p.name.split("-")[1]) for p in markers.glob("term-*")} == set(children)
    assert not (private_root / "krc-supervised").exists()


def _pod_tree(private_root: Path, tmp_path: Path) -> tuple[list[subprocess.Popen], list[int], Path]:
    """kubelet's shape below our pod root: QoS class, pod, container; a process family per container."""
    cleanup.ensure_pod_cgroup_root(private_root)
    pods = private_root / cleanup.POD_CGROUP_ROOT
    assert pods.is_dir()
    containers = [
        pods / "kubepods" / "burstable" / "pod-a" / "c1",
        pods / "kubepods" / "besteffort" / "pod-b" / "c2",
    ]
    markers = tmp_path / "markers"
    markers.mkdir()
    started = []
    for container in containers:
        container.mkdir(parents=True)
        procs = container / "cgroup.procs"
        started.append(
            subprocess.Popen(
                [sys.executable, "-c", FAMILY, str(markers), "2"],
                # Join before exec, as runc does: every child forked later is in the container's cgroup.
                preexec_fn=lambda procs=procs: procs.write_text(str(os.getpid())),  # noqa: PLW1509
            )
        )
    children = _wait_children(markers, 2 * len(containers))
    for child in children:
        assert _unified_path_of(child).startswith(_in_tree(private_root, pods) + "/kubepods/")
    return started, children, markers


def test_down_kills_every_pod_process_with_cgroup_kill_and_removes_the_pod_cgroups(
    private_root: Path, tmp_path: Path
) -> None:
    started, children, markers = _pod_tree(private_root, tmp_path)
    assert set(UnifiedCgroup(private_root / cleanup.POD_CGROUP_ROOT).pids()) == {
        *(p.pid for p in started),
        *children,
    }

    assert cleanup.kill_pod_processes(grace=30, cgroup_root=private_root) == []

    for process in started:
        assert process.wait(timeout=10) == -signal.SIGKILL
    assert not any(_alive(pid) for pid in children)
    assert list(markers.glob("term-*")) == []
    assert cleanup.remove_kubelet_cgroups(cgroup_root=private_root) == []
    assert not (private_root / cleanup.POD_CGROUP_ROOT).exists()


def test_the_by_pid_fallback_reads_the_whole_pod_subtree(private_root: Path, tmp_path: Path) -> None:
    started, children, markers = _pod_tree(private_root, tmp_path)
    pods = UnifiedCgroup(private_root / cleanup.POD_CGROUP_ROOT, use_cgroup_kill=False)
    assert not pods.kill(timeout=1)  # what a kernel before 5.14 answers

    assert cleanup._signal_until_gone(pods.pids, grace=1) == []

    for process in started:
        assert process.wait(timeout=10) == -signal.SIGTERM  # the parents die of SIGTERM
    assert {int(p.name.split("-")[1]) for p in markers.glob("term-*")} == set(children)
    assert not any(_alive(pid) for pid in children)
    assert cleanup.remove_kubelet_cgroups(cgroup_root=private_root) == []


def test_preflight_names_what_the_private_hierarchy_lacks(private_root: Path) -> None:
    mount_point = private_root.parent
    offered = set((mount_point / "cgroup.controllers").read_text().split())
    with pytest.raises(ProvisioningError) as raised:
        preflight.check_unified_hierarchy(mount_point)
    line = raised.value.one_line()
    assert "\n" not in line
    assert f"mounted at {mount_point}, not /sys/fs/cgroup" in line
    # On this host cgroup2 offers none of them (they are in v1); on a v2 host, all of them.
    absent = [c for c in ("cpu", "memory", "pids") if c not in offered]
    if absent:
        assert f"offers no {', '.join(absent)} controller" in line
    else:
        assert "offers no" not in line


def test_a_private_second_mount_never_becomes_the_hosts_hierarchy(private_root: Path) -> None:
    mountinfo = Path("/proc/self/mountinfo").read_text()
    ours = [m for m in parse_mountinfo(mountinfo) if m.mount_point == private_root.parent]
    assert [m.fstype for m in ours] == ["cgroup2"]
    layout = detect_layout(mountinfo, Path("/proc/self/cgroup").read_text())
    assert layout.mode in {CgroupMode.HYBRID, CgroupMode.UNIFIED}
    assert layout.unified_mount in {Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")}
