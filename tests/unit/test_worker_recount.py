"""`--workers auto` on a cluster the run makes itself (kind, eks): counted once it is up.

Before, the count was taken before the cluster existed and fell back to one worker: some 240
checks one at a time on the nightly kind job. The xdist mechanics are exercised for real, in a
pytest session of its own; the cluster's room is a fake only where it stands for the API's figures.
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance import capacity, cli, parallel, profiles

GIB = Decimal(2**30)


def _environment(provider: str) -> SimpleNamespace:
    return SimpleNamespace(options=SimpleNamespace(provider=provider, profile=profiles.load("kind")))


@pytest.mark.parametrize("provider", ["kind", "eks"])
def test_auto_waits_for_a_cluster_the_run_makes(provider: str) -> None:
    assert cli._worker_count("auto", _environment(provider), api=None) is None


def test_a_number_is_taken_as_it_is() -> None:
    assert cli._worker_count("3", _environment("kind"), api=None) == 3


def _three_nodes_of_this_machine(_api: object) -> capacity.Room:
    machine = capacity.room_on_this_machine()
    return capacity.Room(machine.cpu * 3, machine.memory * 3, machine.cores * 3, "3 node(s)")


def test_kind_nodes_share_the_runner_so_its_cores_count_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity, "room_in_cluster", _three_nodes_of_this_machine)
    machine = capacity.room_on_this_machine()
    room = capacity.room_for("kind", api=None)  # type: ignore[arg-type]
    assert room.cores == machine.cores and "within this machine" in room.source


def test_eks_nodes_are_machines_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity, "room_in_cluster", _three_nodes_of_this_machine)
    room = capacity.room_for("eks", api=None)  # type: ignore[arg-type]
    assert room.cores == capacity.room_on_this_machine().cores * 3


def test_the_printed_line_shows_the_figures_behind_the_count() -> None:
    room = capacity.Room(Decimal("3.5"), 12 * GIB, Decimal(4), "2 node(s) of the cluster")
    line = capacity.describe(room, 3, profiles.load("kind"))
    assert line.startswith("workers: 3 (auto: 3.5 CPU and 12.0 GiB free, 4.0 cores, on 2 node(s)")


RECOUNTING_CONFTEST = """
import os
import pytest
from conformance import parallel

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        parallel.set_worker_count(session.config, 3)

@pytest.fixture
def worker_file(tmp_path_factory):
    return os.environ.get("PYTEST_XDIST_WORKER", "controller")
"""

RECORDING_TESTS = """
import os
import pytest

@pytest.mark.parametrize("n", range(6))
def test_record(n, worker_file):
    with open(os.environ["RECORD"], "a") as out:
        out.write(worker_file + "\\n")
"""


def test_xdist_starts_the_count_set_at_session_start(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(RECOUNTING_CONFTEST)
    (tmp_path / "test_record.py").write_text(RECORDING_TESTS)
    record = tmp_path / "record.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", *parallel.DISTRIBUTION],
        cwd=tmp_path,
        env={"RECORD": str(record), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(record.read_text().split()) == {"gw0", "gw1", "gw2"}
