"""A report file that cannot be written is named, with the fix, and leaves nothing half-written.

The full disk is real: a 64 KiB tmpfs (root only; skipped without the mount privilege).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.errors import EXIT_ENVIRONMENT
from conformance.report.files import ReportWriteError, write_atomically


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        (mount / "timelines").mkdir()
        with (mount / "filler").open("wb") as filler, pytest.raises(OSError):
            filler.write(b"\0" * 1024 * 1024)
            filler.flush()
            os.fsync(filler.fileno())
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_names_the_file_and_the_fix_and_leaves_no_partial_file(full_disk: Path) -> None:
    target = full_disk / "index.html"
    with pytest.raises(ReportWriteError) as failed:
        write_atomically(target, "x" * 200_000)
    line = failed.value.one_line()
    assert f"could not write {target}: No space left on device" in line
    assert f"kuberay-conformance report {full_disk}" in line
    assert failed.value.exit_code == EXIT_ENVIRONMENT
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "timelines"]


def test_a_timeline_s_fix_names_its_run_folder(full_disk: Path) -> None:
    with pytest.raises(ReportWriteError) as failed:
        write_atomically(full_disk / "timelines" / "check-1.json", "{}" * 100_000)
    assert f"kuberay-conformance report {full_disk}`" in failed.value.one_line()


def test_a_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("old")
    write_atomically(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]
