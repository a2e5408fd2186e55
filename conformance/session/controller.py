"""The controller half of a conformance run: the process `kuberay-conformance run` (or plain pytest)
starts. Without pytest-xdist it is the whole run; with it (`-n N`), it distributes the checks and
runs none (parallel.py).

It takes the cluster lock (cluster_lock.py) before anything changes, prepares the environment
once (before any worker starts), hands each worker the state it attaches with, takes the workers'
results from their reports, and at the end writes every file of the run (summary.json, the
reports), searches them for the secrets checks saw, tears the environment down and releases the
lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from typing import Any

import pytest
from kubernetes import client

from conformance import capacity, cluster_lock, footprint, interrupts, outcomes, parallel
from conformance.checks import RUN_LABEL
from conformance.errors import EXIT_ENVIRONMENT
from conformance.kube import namespaces
from conformance.report import build as report_build
from conformance.report import secrets
from conformance.report import terminal as report_terminal
from conformance.report.files import ReportWriteError
from conformance.session.base import NOTES_PREFIX, SELECTION_FILE, TURNS, ConformanceRun
from conformance.session.setup import RunSetup


class ControllerRun(ConformanceRun):
    def __init__(self, config: pytest.Config, setup: RunSetup) -> None:
        super().__init__(config, setup)
        self.controller = parallel.is_controller(config)  # True: there are workers (xdist)
        self.built: report_build.Built | None = None
        self.report_problem = ""
        self.worker_pids: list[int] = []
        self._footprint: footprint.Sampler | None = None  # footprint.py
        self.crashed: list[str] = []
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        interrupts.on(signal.SIGTERM, _sigterm_as_interrupt)

    # -- the environment --------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before xdist starts its workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Take the cluster lock before anything changes; a parallel run prepares here, once."""
        if self.collect_only:
            return
        self._footprint = footprint.Sampler(self.options.run_dir, lambda: self.worker_pids).start()
        api = self.environment.reachable_api() if self.setup.lock is None else None
        if api is not None:
            try:
                self._claim(api)
            except cluster_lock.LockHeld as exc:
                pytest.exit(exc.one_line(), returncode=EXIT_ENVIRONMENT)
        if self.controller:
            try:
                self._prepare_timed()
            except BaseException:
                # Interrupted before the session began: pytest calls no sessionfinish, so clean up here.
                self.pytest_sessionfinish(session, pytest.ExitCode.INTERRUPTED)
                raise
            if self.setup.recount_workers:
                self._recount_workers(session.config)

    def _recount_workers(self, config: pytest.Config) -> None:
        """`--workers auto` on a cluster this run made (kind, eks): count now that it is up."""
        api = self.environment.api if self._prepared else None
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if api is None:
            line = "workers: 1 (auto: the cluster could not be prepared, so its room is unknown)"
        else:
            room = capacity.room_for(self.options.provider, api)
            count = capacity.workers_for(room, self.options.profile)
            parallel.set_worker_count(config, count)
            line = capacity.describe(room, count, self.options.profile)
        if reporter is not None:
            reporter.write_line(line)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Prepare before the first check, so no check's duration includes the bring-up."""
        if not session.items or self.collect_only:
            # --collect-only lists checks; it must never make a cluster (on EKS, a paid one).
            return
        self._prepare_timed()

    def _prepare_timed(self) -> None:
        started = time.monotonic()
        with contextlib.suppress(Exception):  # recorded; every check then errors with the cause
            self.ensure_prepared()
        self.summary.environment["prepare_s"] = round(time.monotonic() - started, 1)

    def _claim(self, api: client.ApiClient) -> None:
        self.setup.claim(api, self.summary.started)

    def _prepare(self) -> None:
        try:
            self.environment.prepare(claim=self._claim)
            self._prepared = True
            self._record_environment()
        except BaseException as exc:
            self._prepared = False
            self._prepare_error = exc
            raise

    def worker_state(self) -> str:
        """What the controller gives each worker (see parallel.py): the run's options and selection,
        and the prepared environment or why it could not be prepared."""
        error = self._prepare_error
        return parallel.pack(
            {
                "options": self.options,
                "selection": self.setup.selection,
                "started": self.summary.started,
                "environment": self.environment.snapshot() if self._prepared else None,
                "prepare_error": (error.args[0] if error and error.args else repr(error)) if error else None,
            }
        )

    def _record_environment(self) -> None:
        caps, kuberay = self.environment.capabilities, self.environment.kuberay
        assert caps is not None and kuberay is not None
        self.summary.versions = {
            "kubernetes": caps.kubernetes_version,
            "kuberay": kuberay.observed,
            "ray": ",".join(self.options.versions_to_test),
        }
        self.summary.environment = {
            "feature_gates": caps.feature_gates,
            "gpu_capacity": caps.gpu_capacity,
            "simulated_gpus": caps.simulated_gpus,
            "gateway_api": caps.gateway_api,
            "gateway_classes": list(caps.gateway_classes),
            "default_storage_classes": list(caps.default_storage_classes),
            "profile_source": str(self.options.profile.source),
            "kuberay_requested": kuberay.requested,
            "head_service_type": self.options.profile.head_service_type,
            "notes": list(self.environment.notes),
            **kuberay.report_fields(),
        }

    def note(self, text: str) -> None:
        self.environment.notes.append(text)

    # -- the workers' results ---------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.controller:
            self._adopt(report)
        super().pytest_runtest_logreport(report)

    def _adopt(self, report: pytest.TestReport) -> None:
        """The controller takes a worker's result as the worker last recorded it."""
        self.secrets.update(parallel.secrets_of(report))
        result = parallel.result_of(report)
        if result is None:  # xdist's own report of a worker that died while running the check
            if report.failed:
                self._record_crash(report)
            return
        self.results[report.nodeid] = result
        if outcomes.settles(report):
            self._settled.add(report.nodeid)

    def _record_crash(self, report: pytest.TestReport) -> None:
        reason = str(report.longrepr).splitlines()[0] if report.longrepr else "a worker crashed"
        self.crashed.append(reason)
        result = self.results.get(report.nodeid)
        if result is not None:  # its setup was reported: the check is known, and nothing was observed
            outcomes.crashed(result, reason)
            self._settled.add(report.nodeid)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Before xdist's teardown kills them: let every worker end its check and clean up."""
        if self.controller and self.worker_pids:
            left = parallel.stop(self.worker_pids, self.options.run_dir / TURNS)
            if left:
                self.crashed.append(f"workers {left} did not stop within {parallel.STOP_GRACE_S} s")

    # -- the end ----------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)  # after junitxml has written junit.xml, which is searched too
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_only:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            return  # nothing ran and nothing was made: no results, no teardown
        try:
            self._finish(session, exitstatus)
        finally:
            self._release_lock()
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def _finish(self, session: pytest.Session, exitstatus: int) -> None:
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        for nodeid, result in self.results.items():
            result.metrics = dict(self._metrics.get(nodeid, result.metrics))
            if nodeid not in self._settled:
                outcomes.unsettled(result)
            self.summary.add(result)
        self.summary.complete = not interrupted and len(self.results) >= session.testscollected
        self._delete_run_namespaces()
        problems = self.environment.teardown()
        if problems:
            self.summary.environment["teardown_problems"] = problems
        self._record_run_shape()
        if self._footprint is not None:
            self.summary.environment["harness_footprint"] = self._footprint.stop()
        shutil.rmtree(self.options.run_dir / TURNS, ignore_errors=True)
        if not self._write_summary():
            return  # no pages without it; the terminal says which file could not be written
        self._build_reports()
        if self._fail_checks_whose_secret_leaked() and self._write_summary():
            self._build_reports()

    def _write_summary(self) -> bool:
        try:
            self.summary.write(self.options.run_dir)
        except ReportWriteError as exc:  # a full disk, say: the results stand, the file does not
            self.report_problem = exc.one_line()
            return False
        return True

    def _record_run_shape(self) -> None:
        """How the run ran: worker processes, the cluster lock, workers lost on the way."""
        workers = getattr(self.config.option, "numprocesses", None) if self.controller else None
        self.summary.environment["workers"] = int(workers or 1)
        notes = self.summary.environment.setdefault("notes", [])
        assert isinstance(notes, list)
        if self.setup.lock is not None:
            notes += self.setup.lock.notes
        for written in sorted((self.options.run_dir / TURNS).glob(f"{NOTES_PREFIX}*")):
            notes += written.read_text().splitlines()
        selected = self.options.run_dir / TURNS / SELECTION_FILE
        if self.controller and selected.is_file():
            self.summary.selection = json.loads(selected.read_text())
        notes += self.crashed

    def _release_lock(self) -> None:
        with contextlib.suppress(Exception):  # the cluster may be gone; a stale lock is taken over later
            self.setup.release_lock()

    def _fail_checks_whose_secret_leaked(self) -> bool:
        """Search every file of the run, in its final form (summary.json, index.html, the Allure
        page, junit.xml), for the kept secrets; a check whose secret leaked becomes failed."""
        leaks = secrets.search(self.options.run_dir, self.secrets)
        for nodeid, files in leaks.items():
            outcomes.secret_leaked(self.results[nodeid], files)
        return bool(leaks)

    def _build_reports(self) -> None:
        """index.html and the Allure page; a report that cannot be built never hides the results."""
        try:
            self.built = report_build.build(self.options.run_dir)
        except ReportWriteError as exc:
            self.report_problem = exc.one_line()
        except Exception as exc:  # noqa: BLE001 - summary.json is written; say why the pages are not
            self.report_problem = f"the report could not be built: {type(exc).__name__}: {exc}"

    def _delete_run_namespaces(self) -> None:
        api = self.environment.api
        if api is None:
            return
        core = client.CoreV1Api(api)
        kept = {r.id for r in self.results.values() if r.outcome in ("failed", "error")}
        try:
            for ns in core.list_namespace(label_selector=f"{RUN_LABEL}={self.options.run_id}").items:
                if self.options.keep_failed and kept:
                    continue
                namespaces.delete(core, ns.metadata.name)
        except Exception:  # noqa: BLE001 - best effort after an interrupt; the cluster may be gone
            return

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.collect_only:
            return
        terminalreporter.section("kuberay conformance")
        built = self.built or report_build.Built(self.summary, self.options.run_dir / report_build.INDEX)
        for line in report_terminal.lines(built, width=shutil.get_terminal_size().columns):
            terminalreporter.write_line(line)
        for problem in [*built.problems, self.report_problem]:
            if problem:
                terminalreporter.write_line(f"warning: {problem}", yellow=True)


class XdistController:
    """xdist's hooks of the controller, registered only when there are workers (xdist defines them)."""

    def __init__(self, run: ControllerRun) -> None:
        self.run = run

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[parallel.WORKERINPUT_KEY] = self.run.worker_state()
        # execnet knows the worker's PID from its start (xdist reads the same cached info).
        self.run.worker_pids.append(int(node.gateway._rinfo().pid))


def _sigterm_as_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def terminal_line_writer(config: pytest.Config):  # noqa: ANN201 - a Callable[[str], None]
    """Progress lines of waits, shown on the terminal past pytest's output capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    state = {"test": ""}

    def write(line: str) -> None:
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is None:
            return
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0].rsplit("::", 1)[-1]
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            if test and test != state["test"]:
                reporter.write_line(f"  {test}")
                state["test"] = test
            reporter.write_line(f"    {line}")

    return write
