"""The worker half of a conformance run: one of the processes pytest-xdist starts (`-n N`).

A worker attaches to the environment the controller prepared (or fails every check with the
controller's cause), runs the checks it is given, beside other workers' checks, under the run's
exclusive lock (exclusive.py) and within the node's CPU room (node_pressure.py), and sends each
result and the secrets its checks saw with its report (parallel.py). It writes no file of the run
but its notes and what it selected, which the controller reads at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance import exclusive, node_pressure, parallel
from conformance.checks import check_name
from conformance.errors import HarnessError
from conformance.report.summary import TestResult
from conformance.session.base import NOTES_PREFIX, SELECTION_FILE, TURNS, ConformanceRun
from conformance.session.setup import RunSetup


class WorkerRun(ConformanceRun):
    worker = True
    controller = False

    def __init__(self, config: pytest.Config, state: dict[str, Any]) -> None:
        # One of several processes of one run: the controller made the run's id and folder, prepared
        # the environment and sends its state.
        super().__init__(config, RunSetup.for_worker(state), started=state.get("started"))
        self._unsent_secrets: dict[str, str] = {}  # until a report carries them
        self.turn = exclusive.ClusterTurn(self.options.run_dir / TURNS)
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        parallel.stop_once_on_signal()
        self._attach(state)

    def _attach(self, state: dict[str, Any]) -> None:
        """Use the environment the controller prepared, or fail every check with its cause."""
        if state.get("prepare_error") is not None:
            self._prepared, self._prepare_error = False, HarnessError(state["prepare_error"])
        elif state.get("environment") is not None:
            self.environment.attach(state["environment"])
            self._prepared = True

    def _prepare(self) -> None:
        raise HarnessError("this worker got no environment from the controller")

    def _selected(self) -> None:
        if not self.collect_only:  # the controller collects nothing: it reads this
            _write_atomically(
                self.options.run_dir / TURNS / SELECTION_FILE, json.dumps(self.summary.selection)
            )

    def note(self, text: str) -> None:
        """Through a file of the run, which the controller reads as the run ends (a worker's own
        Environment is never written)."""
        notes = self.options.run_dir / TURNS / f"{NOTES_PREFIX}{os.getpid()}"
        with notes.open("a") as out:
            out.write(text.replace("\n", " ") + "\n")

    def keep_secret(self, nodeid: str, *values: str) -> None:
        super().keep_secret(nodeid, *values)
        self._unsent_secrets.update(dict.fromkeys(values, nodeid))

    def _admit(self, item: pytest.Item, psi: Path) -> None:
        """Beside other checks, start once the node has room: a Ray head started on a saturated node
        misses its own startup timeouts, and KubeRay's correct reaction would read as its failure."""
        waited, pressure = node_pressure.wait_for_room(psi)
        if waited:
            self._node_cpu.setdefault(item.nodeid, {})["admission_wait_s"] = waited
            self._phase(item.nodeid, "admission_wait_s", waited)
            if pressure >= node_pressure.ADMIT_BELOW_PERCENT:
                text = (
                    f"{check_name(item.nodeid)} started at CPU pressure {pressure:.0f}% after {waited:.0f}s"
                )
                worker_say(self.config, text)
                self.note(text)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        worker_say(self.config, f"started {check_name(nodeid)}")

    def _recorded(self, item: pytest.Item, report: pytest.TestReport, result: TestResult) -> None:
        """The controller writes the run's files: the result travels with the report."""
        parallel.attach_result(report, result, self._unsent_secrets)
        self._unsent_secrets = {}
        if report.when == "teardown":
            name = check_name(item.nodeid)
            worker_say(self.config, f"finished {name}: {result.outcome} in {result.duration_s:.1f}s")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_only:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            return
        parallel.mark_done(self.options.run_dir / TURNS)  # the controller writes the run's files


def line_writer(config: pytest.Config):  # noqa: ANN201 - a Callable[[str], None]
    """Progress lines of a worker's waits, each naming the worker and the check (see worker_say)."""

    def write(line: str) -> None:
        test = check_name(os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0])
        worker_say(config, f"{test}: {line}" if test else line)

    return write


def worker_say(config: pytest.Config, text: str) -> None:
    """xdist shows nothing of a worker's terminal, but its stderr reaches the run's: one whole line
    per event, prefixed with the worker's id, so the lines of several workers read apart."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        sys.stderr.write(f"[{parallel.worker_id(config)}] {text}\n")
        sys.stderr.flush()


def _write_atomically(path: Path, text: str) -> None:
    """Every worker writes the same file; a reader sees one whole copy."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)
