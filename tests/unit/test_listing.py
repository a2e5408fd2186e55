"""`kuberay-conformance list` and `--collect-only`: the checks, and no cluster touched."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance import listing
from conformance.report.summary import AREAS, HARNESS


@pytest.fixture
def trap() -> Iterator[socket.socket]:
    """A loopback "API server" that only listens: a connection attempt shows a cluster was touched."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()


def _touched(listener: socket.socket) -> bool:
    readable, _, _ = select.select([listener], [], [], 0.5)
    return bool(readable)


def _kubeconfig(tmp_path: Path, listener: socket.socket) -> Path:
    port = listener.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: trap\n"
        f"clusters: [{{name: trap, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: trap, context: {cluster: trap, user: trap}}]\n"
        "users: [{name: trap, user: {token: x}}]\n"
    )
    return path


def test_list_prints_every_area_with_preconditions_and_touches_nothing(tmp_path: Path, trap) -> None:
    program = Path(sys.executable).with_name("kuberay-conformance")
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(_kubeconfig(tmp_path, trap))}
    result = subprocess.run(
        [str(program), "list"], capture_output=True, text=True, check=False, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    *checks, total = rows
    assert {row.split()[0] for row in checks} <= {*AREAS, HARNESS}
    assert total.startswith(f"{len(checks)} checks in ")
    assert any("requires gpu" in row for row in checks)
    assert any("kuberay#" in row for row in checks)
    assert not _touched(trap)
    assert list(tmp_path.iterdir()) == [tmp_path / "kubeconfig"]  # no reports/ folder


def test_list_selects_by_area() -> None:
    checks = listing.collect("default", ("gpu",), (), None)
    assert checks and {c.area for c in checks} == {"gpu"}
    assert all(c.id.startswith("conformance/suites/test_gpu.py::") for c in checks)


def test_collect_only_prepares_nothing_and_writes_nothing(tmp_path: Path, trap) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "conformance.suites", "--collect-only", "-q",
         "-p", "no:cacheprovider", "--conformance-provider", "existing",
         "--conformance-kubeconfig", str(_kubeconfig(tmp_path, trap)),
         "--conformance-profile", "attach", "--conformance-run-dir", str(run_dir)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "test_operator.py" in result.stdout
    assert not _touched(trap)
    assert not run_dir.exists()
