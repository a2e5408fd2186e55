"""The pytest plugin: options, fixtures, markers and result collection for conformance runs.

Loaded through the `pytest11` entry point, it stays inert unless the CLI hands it a run
(session/setup.py) or `--conformance-provider` is given, so other pytest sessions (the harness's
own tests) are not affected. The options are declared in options.py.

Outcomes are classified as summary.json wants them: an AssertionError in a check is a
conformance failure; any other exception (a wait that timed out, an API error, a
provisioning error) is an error of the environment or harness; a skip whose reason
starts with "not applicable:" is not applicable.

With pytest-xdist (`-n N`, what `run --workers` passes) the same class runs in the controller
and in every worker, in different roles (parallel.py): the controller takes the cluster lock
(cluster_lock.py), prepares and tears down, and writes every file of the run from the results
the workers' reports carry; a worker attaches, runs checks under the run's exclusive lock
(exclusive.py) and records results only to send them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from conformance import (
    capacity,
    cluster_lock,
    exclusive,
    footprint,
    interrupts,
    node_pressure,
    options,
    parallel,
    profiles,
    progress,
    selection,
    stopwatch,
)
from conformance.capabilities import Capabilities
from conformance.environment import Environment
from conformance.errors import EXIT_ENVIRONMENT, HarnessError
from conformance.kube import diagnostics, namespaces
from conformance.load import generator as load_generator
from conformance.report import build as report_build
from conformance.report import secrets, timelines
from conformance.report import terminal as report_terminal
from conformance.report.summary import AREAS, HARNESS, Summary, TestResult, now
from conformance.session.setup import RunSetup
from conformance.timeouts import Timeouts

NOT_APPLICABLE = "not applicable: "
RUN_LABEL = "kuberay-conformance.io/run-id"
KUBERAY_ISSUE_URL = "https://github.com/ray-project/kuberay/issues/{}"
RUN_KEY = pytest.StashKey["ConformanceRun"]()
TURNS = ".turns"  # the lock files of a parallel run's checks, inside the run folder (exclusive.py)
NOTES_PREFIX = "notes-"  # in TURNS: a worker's lines for environment.notes, one file per worker
SELECTION_FILE = "selection.json"  # in TURNS: what the workers selected, which the controller never collects


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_to_pytest(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "area(name): the conformance area a check belongs to")
    config.addinivalue_line("markers", "kuberay_issue(*numbers): kuberay issues the check encodes")
    config.addinivalue_line(
        "markers", "requires(*needs): preconditions (gpu, gateway_api, gate:X, kuberay>=V)"
    )
    config.addinivalue_line("markers", exclusive.MARKER_HELP)
    config.addinivalue_line("markers", selection.SMOKE_HELP)
    try:
        setup, state = _setup_of(config)
        run = ConformanceRun(config, setup, state) if setup is not None else None
    except HarnessError as exc:  # bad input under plain pytest: a usage error, not an INTERNALERROR
        raise pytest.UsageError(f"kuberay-conformance: {exc.one_line()}") from None
    if run is not None:
        config.stash[RUN_KEY] = run
        config.pluginmanager.register(run, "kuberay-conformance-run")
        if run.controller:
            config.pluginmanager.register(XdistController(run), "kuberay-conformance-xdist")
        progress.route_lines_to(_terminal_line_writer(config))


def _setup_of(config: pytest.Config) -> tuple[RunSetup | None, dict[str, Any]]:
    """The run this session is part of: handed over by the CLI, sent by the controller to a worker,
    or built here from the --conformance-* options (plain pytest); none without them."""
    if parallel.is_worker(config):
        state = parallel.unpack(config)
        return (RunSetup.for_worker(state), state) if state else (None, {})
    handed = RunSetup.handed_to(config)
    if handed is not None:
        return handed, {}
    if not config.getoption("--conformance-provider", default=None):
        return None, {}
    return RunSetup.build(options.RunValues.from_pytest(config), config.option.keyword), {}


@pytest.hookimpl(trylast=True)  # after --area and -k: the tier and the shard select among what is left
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.select(items)


class ConformanceRun:
    """The state of one conformance run inside a pytest session."""

    def __init__(self, config: pytest.Config, setup: RunSetup, state: dict[str, Any]) -> None:
        # A worker of a parallel run (pytest-xdist) is one of several processes of one run: the
        # controller made the run's id and folder, prepared the environment and sends its state.
        self.config = config
        self.setup = setup
        self.worker = parallel.is_worker(config)
        self.controller = parallel.is_controller(config)
        self.options = setup.options
        self.environment = setup.environment
        self.summary = Summary(
            run_id=self.options.run_id,
            started=state.get("started") or now(),
            provider=self.options.provider,
            profile=self.options.profile.name,
            versions={},
            selection=dict(setup.selection),
        )
        self._metrics: dict[str, dict[str, float]] = {}
        self.results: dict[str, TestResult] = {}
        self._prepared: bool | None = None
        self._prepare_error: BaseException | None = None
        self.built: report_build.Built | None = None
        self._settled: set[str] = set()  # checks whose outcome is known (their call ran, or setup ended them)
        self.report_problem = ""
        # Secrets a check saw (a cluster's auth token), in memory only: no file of the finished
        # run may hold one. Value -> the check that registered it.
        self.secrets: dict[str, str] = {}
        self.collect_only = bool(config.option.collectonly)
        self._unsent_secrets: dict[str, str] = {}  # a worker's, until a report carries them
        self.worker_pids: list[int] = []
        self._footprint: footprint.Sampler | None = None  # the controller's (footprint.py)
        self.crashed: list[str] = []
        self.turn = exclusive.ClusterTurn(self.options.run_dir / TURNS) if self.worker else None
        self._pressure: dict[str, node_pressure.CheckPressure] = {}  # per running check
        self._node_cpu: dict[str, dict[str, float]] = {}  # per check: TestResult.node_cpu
        self._phases: dict[str, dict[str, float]] = {}  # per check: TestResult.phases
        self._inside_call: dict[str, dict[str, float]] = {}  # per check: its call's waits (stopwatch)
        self._previous_sigterm = signal.getsignal(signal.SIGTERM)
        if self.worker:
            parallel.stop_once_on_signal()
            self._attach(state)
        else:
            interrupts.on(signal.SIGTERM, _sigterm_as_interrupt)

    # -- collection -------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "ray_version" in metafunc.fixturenames:
            versions = self.options.versions_to_test
            metafunc.parametrize("ray_version", versions, ids=[f"ray{v}" for v in versions], scope="session")

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        import allure  # noqa: PLC0415 - only conformance runs need it

        wanted = set(self.setup.areas)
        if wanted:
            deselected = [item for item in items if _area(item) not in wanted]
            items[:] = [item for item in items if _area(item) in wanted]
            config.hook.pytest_deselected(items=deselected)
        cap = self.options.timeouts.check
        exclusive.exclusive_last(items)
        for item in items:
            area = _area(item)
            if item.get_closest_marker("timeout") is None:  # pytest-timeout: a hang becomes an error
                item.add_marker(pytest.mark.timeout(cap, method="signal"))
            item.add_marker(allure.epic(area))
            item.add_marker(allure.feature(item.module.__name__.rsplit(".", 1)[-1] if item.module else area))
            item.add_marker(allure.story(item.originalname if hasattr(item, "originalname") else item.name))
            for number in _issues(item):
                item.add_marker(allure.issue(KUBERAY_ISSUE_URL.format(number), f"kuberay#{number}"))

    def select(self, items: list[pytest.Item]) -> None:
        """Keep the tier's checks, then the shard's (selection.py); record what was selected."""
        asked = self.summary.selection
        chosen = selection.tier_of(items, str(asked["tier"]))
        selected, split = len(chosen), None
        if asked["shard"]:
            areas = {item.nodeid: _area(item) for item in chosen}
            shard = selection.parse_shard(str(asked["shard"]))
            made = selection.shard_of(chosen, shard, areas, selection.recorded_durations())
            chosen, split = made.kept, made.split
        kept = {id(item) for item in chosen}
        deselected = [item for item in items if id(item) not in kept]
        if deselected:
            items[:] = chosen
            self.config.hook.pytest_deselected(items=deselected)
        self.summary.selection = {**asked, "selected": selected, "checks": len(chosen), "split": split}
        if self.worker and not self.collect_only:  # the controller collects nothing: it reads this
            _write_atomically(
                self.options.run_dir / TURNS / SELECTION_FILE, json.dumps(self.summary.selection)
            )

    # -- environment ------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before xdist starts its workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Take the cluster lock before anything changes; a parallel run prepares here, once."""
        if self.worker or self.collect_only:
            return
        self._footprint = footprint.Sampler(self.options.run_dir, lambda: self.worker_pids).start()
        api = self.environment.reachable_api()
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
        if not session.items or self.collect_only or self.worker:
            # --collect-only lists checks; it must never make a cluster (on EKS, a paid one).
            # A worker attaches to what the controller prepared.
            return
        self._prepare_timed()

    def _prepare_timed(self) -> None:
        started = time.monotonic()
        with contextlib.suppress(Exception):  # recorded; every check then errors with the cause
            self.ensure_prepared()
        self.summary.environment["prepare_s"] = round(time.monotonic() - started, 1)

    def _claim(self, api: client.ApiClient) -> None:
        self.setup.claim(api, self.summary.started)

    def _attach(self, state: dict[str, Any]) -> None:
        """A worker uses the environment the controller prepared, or fails every check with its cause."""
        if state.get("prepare_error") is not None:
            self._prepared, self._prepare_error = False, HarnessError(state["prepare_error"])
        elif state.get("environment") is not None:
            self.environment.attach(state["environment"])
            self._prepared = True

    def worker_state(self) -> str:
        """What the controller gives each worker (see parallel.py)."""
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

    def ensure_prepared(self) -> Environment:
        if self._prepared is None and self.worker:
            raise HarnessError("this worker got no environment from the controller")
        if self._prepared is None:
            try:
                self.environment.prepare(claim=self._claim)
                self._prepared = True
                self._record_environment()
            except BaseException as exc:
                self._prepared = False
                self._prepare_error = exc
                raise
        if not self._prepared:
            message = self._prepare_error.args[0] if self._prepare_error and self._prepare_error.args else ""
            raise HarnessError(f"the environment could not be prepared: {message}")
        return self.environment

    def _record_environment(self) -> None:
        caps = self.environment.capabilities
        assert caps is not None
        self.summary.versions = {
            "kubernetes": caps.kubernetes_version,
            "kuberay": caps.kuberay_version,
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
            "kuberay_requested": self.options.profile.kuberay.version,
            "head_service_type": self.options.profile.head_service_type,
            "notes": list(self.environment.notes),
            **self.environment.report_fields(),
        }

    def metrics_for(self, nodeid: str) -> dict[str, float]:
        return self._metrics.setdefault(nodeid, {})

    def namespace_for(self, node: pytest.Item | pytest.Collector, api: client.ApiClient) -> Iterator[str]:
        core = client.CoreV1Api(api)
        name = f"krc-{_slug(node.name.removesuffix('.py'))[:40]}-{uuid.uuid4().hex[:5]}"
        core.create_namespace({"metadata": {"name": name, "labels": {RUN_LABEL: self.options.run_id}}})
        yield name
        failed = [
            r
            for r in self.results.values()
            if r.id.startswith(node.nodeid) and r.outcome in ("failed", "error")
        ]
        if failed:
            self._collect_diagnostics(node, api, name)
        if not (failed and self.options.keep_failed):
            namespaces.delete(core, name)

    # -- preconditions ----------------------------------------------------------------

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        why = self._unmet(item)
        if why:
            pytest.skip(NOT_APPLICABLE + why)

    def _unmet(self, item: pytest.Item) -> str:
        """Why the check's `requires` preconditions do not hold here ("" when they all do)."""
        needs = [need for marker in item.iter_markers("requires") for need in marker.args]
        if not needs or self.collect_only:
            return ""
        caps = self.ensure_prepared().capabilities
        assert caps is not None
        return next(filter(None, (caps.missing(n, self.options.profile.gateway_class) for n in needs)), "")

    def _will_run(self, item: pytest.Item) -> bool:
        try:
            return not self._unmet(item)
        except Exception:  # noqa: BLE001 - the check's setup meets it again and reports it as its error
            return True

    # -- running alone or beside others ------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """In a parallel run, setup, call and teardown of a check hold the run's lock (exclusive.py);
        an exclusive check measuring under load starts once earlier checks' namespaces are gone."""
        # A check that will be not applicable touches nothing: it neither waits for room or for
        # quiet nor keeps others out.
        runs = self._will_run(item)
        alone = runs and exclusive.is_exclusive(item)
        psi = self._pressure_file()
        if psi is not None and self.turn is not None and runs and not alone:
            self._admit(item, psi)
        asked = time.monotonic()
        with self.turn.hold(alone) if self.turn is not None else contextlib.nullcontext():
            self._phase(item.nodeid, "turn_wait_s", time.monotonic() - asked)
            if runs and exclusive.needs_quiet(item):
                settling = time.monotonic()
                self._settle_before(item)
                self._phase(item.nodeid, "settle_wait_s", time.monotonic() - settling)
            if runs and exclusive.needs_quiet_load(item):
                load_generator.before_next_attack(lambda: self._settle_inside(item))
            if psi is not None:
                self._pressure[item.nodeid] = node_pressure.CheckPressure(psi).start()
            try:
                yield
            finally:
                load_generator.forget_before_attack()

    def _pressure_file(self) -> Path | None:
        """The PSI file of the nodes' kernel, where the provider names one (node_pressure.py)."""
        cluster = self.environment.cluster
        if cluster is None or self.collect_only or not cluster.facts.get(node_pressure.FACT):
            return None
        path = Path(str(cluster.facts[node_pressure.FACT]))
        return path if path.is_file() else None

    def _admit(self, item: pytest.Item, psi: Path) -> None:
        """Beside other checks, start once the node has room: a Ray head started on a saturated node
        misses its own startup timeouts, and KubeRay's correct reaction would read as its failure."""
        waited, pressure = node_pressure.wait_for_room(psi)
        if waited:
            self._node_cpu.setdefault(item.nodeid, {})["admission_wait_s"] = waited
            self._phase(item.nodeid, "admission_wait_s", waited)
            if pressure >= node_pressure.ADMIT_BELOW_PERCENT:
                name = _check_name(item.nodeid)
                text = f"{name} started at CPU pressure {pressure:.0f}% after {waited:.0f}s"
                worker_say(self.config, text)
                self.note(text)

    def _phase(self, nodeid: str, name: str, seconds: float) -> None:
        """A timer of the check's `phases` (conformance/stopwatch.py); under 1 ms is not worth a key."""
        if seconds >= 0.001:
            self._phases.setdefault(nodeid, {})[name] = round(seconds, 3)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        stopwatch.reset()
        yield
        self._inside_call[item.nodeid] = stopwatch.taken()

    def _settle_inside(self, item: pytest.Item) -> None:
        with stopwatch.spent(stopwatch.SETTLE):
            self._settle_before(item)

    def _settle_before(self, item: pytest.Item) -> None:
        api = self.environment.api
        if api is None or self.collect_only:
            return
        note = exclusive.settle(api, f"{RUN_LABEL}={self.options.run_id}", self.options.timeouts.cleanup)
        if note:  # in the report's notes: the check ran less alone than meant
            self.note(f"before {_check_name(item.nodeid)}: {note}")

    def note(self, text: str) -> None:
        """A line for summary.json's environment.notes; a worker's goes through a file of the run,
        which the controller reads as the run ends (a worker's own Environment is never written)."""
        if not self.worker:
            self.environment.notes.append(text)
            return
        notes = self.options.run_dir / TURNS / f"{NOTES_PREFIX}{os.getpid()}"
        with notes.open("a") as out:
            out.write(text.replace("\n", " ") + "\n")

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if self.worker:
            worker_say(self.config, f"started {_check_name(nodeid)}")

    # -- results ----------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        setattr(item, f"rep_{report.when}", report)
        starved = self._stop_sampling(item.nodeid) if report.when == "teardown" else ""
        self._record(item, report, call)
        result = self.results[item.nodeid]
        if starved and result.outcome in ("failed", "error"):
            result.reason = f"{result.reason} [{starved}]"
        if self.worker:  # the controller writes the run's files: the result travels with the report
            parallel.attach_result(report, result, self._unsent_secrets)
            self._unsent_secrets = {}
            if report.when == "teardown":
                done = self.results[item.nodeid]
                name = _check_name(item.nodeid)
                worker_say(self.config, f"finished {name}: {done.outcome} in {done.duration_s:.1f}s")

    def _stop_sampling(self, nodeid: str) -> str:
        """The node's CPU pressure during the check into its node_cpu; a sentence if it was starved."""
        sampler = self._pressure.pop(nodeid, None)
        if sampler is None:
            return ""
        sampler.stop()
        self._node_cpu.setdefault(nodeid, {}).update(sampler.figures())
        return sampler.starvation_note()

    def _record(self, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
        result = self.results.get(item.nodeid)
        if result is None:
            result = TestResult(
                id=item.nodeid,
                area=_area(item),
                outcome="passed",
                duration_s=0.0,
                issues=[f"kuberay#{n}" for n in _issues(item)],
            )
            self.results[item.nodeid] = result
        result.duration_s = round(result.duration_s + report.duration, 3)
        self._time_phase(item.nodeid, report)
        if report.when == "call" or not report.passed:
            self._settled.add(item.nodeid)
        if report.skipped:
            reason = _skip_reason(report)
            result.outcome = "not_applicable" if reason.startswith(NOT_APPLICABLE) else "skipped"
            result.reason = reason.removeprefix(NOT_APPLICABLE)
        elif report.failed:
            if result.outcome in ("failed", "error"):
                return  # the first failure is the one that matters
            conformance_failure = (
                report.when == "call"
                and call.excinfo is not None
                and isinstance(call.excinfo.value, AssertionError)
            )
            result.outcome = "failed" if conformance_failure else "error"
            result.reason = _failure_reason(call, report)
            result.details = _failure_details(report)
        result.metrics = dict(self._metrics.get(item.nodeid, {}))
        result.node_cpu = dict(self._node_cpu.get(item.nodeid, {}))
        result.phases = dict(self._phases.get(item.nodeid, {}))

    def _time_phase(self, nodeid: str, report: pytest.TestReport) -> None:
        """pytest's setup/call/teardown durations, the call split by what its waits waited for."""
        if report.when != "call":
            self._phase(nodeid, f"{report.when}_s", report.duration)
            return
        inside = self._inside_call.pop(nodeid, {})
        for name, seconds in stopwatch.call_phases(report.duration, inside).items():
            self._phase(nodeid, name, seconds)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A rerun plugin (pytest-rerunfailures) turns a failed attempt into "rerun" after it was
        recorded above: the check starts afresh, and a pass on a later attempt is flaky."""
        if self.controller:
            self._adopt(report)
        result = self.results.get(report.nodeid)
        if report.outcome != "rerun" or result is None:
            return
        result.attempts += 1
        result.reason = f"attempt {result.attempts - 1}: {result.reason}"
        result.outcome, result.details = "passed", ""

    def _adopt(self, report: pytest.TestReport) -> None:
        """The controller takes a worker's result as the worker last recorded it."""
        self.secrets.update(parallel.secrets_of(report))
        result = parallel.result_of(report)
        if result is None:  # xdist's own report of a worker that died while running the check
            if report.failed:
                self._record_crash(report)
            return
        self.results[report.nodeid] = result
        if report.when == "call" or not report.passed:
            self._settled.add(report.nodeid)

    def _record_crash(self, report: pytest.TestReport) -> None:
        reason = str(report.longrepr).splitlines()[0] if report.longrepr else "a worker crashed"
        self.crashed.append(reason)
        result = self.results.get(report.nodeid)
        if result is not None:  # its setup was reported: the check is known, and nothing was observed
            result.outcome, result.reason = "error", reason
            self._settled.add(report.nodeid)

    def _collect_diagnostics(
        self, item: pytest.Item | pytest.Collector, api: client.ApiClient, namespace: str
    ) -> None:
        import allure  # noqa: PLC0415

        out = self.options.run_dir / "diagnostics" / _slug(item.nodeid)
        files = diagnostics.collect(api, namespace, self.environment.operator_namespace, out)
        for path in files:
            allure.attach.file(
                str(path), name=str(path.relative_to(out)), attachment_type=allure.attachment_type.TEXT
            )

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Before xdist's teardown kills them: let every worker end its check and clean up."""
        if self.controller and self.worker_pids:
            left = parallel.stop(self.worker_pids, self.options.run_dir / TURNS)
            if left:
                self.crashed.append(f"workers {left} did not stop within {parallel.STOP_GRACE_S} s")

    @pytest.hookimpl(trylast=True)  # after junitxml has written junit.xml, which is searched too
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.collect_only:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            return  # nothing ran and nothing was made: no results, no teardown
        if self.worker:  # the controller writes the run's files and tears the environment down
            parallel.mark_done(self.options.run_dir / TURNS)
            return
        try:
            self._finish(session, exitstatus)
        finally:
            self._release_lock()
            signal.signal(signal.SIGTERM, self._previous_sigterm)

    def _finish(self, session: pytest.Session, exitstatus: int) -> None:
        interrupted = exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
        for nodeid, result in self.results.items():
            result.metrics = dict(self._metrics.get(nodeid, result.metrics))
            if nodeid not in self._settled and result.outcome == "passed":
                # Set up, then interrupted before its call ended: nothing was observed.
                result.outcome, result.reason = "error", "interrupted: the run stopped while this check ran"
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
        self.summary.write(self.options.run_dir)
        self._build_reports()
        if self._fail_checks_whose_secret_leaked():
            self.summary.write(self.options.run_dir)
            self._build_reports()

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

    def keep_secret(self, nodeid: str, *values: str) -> None:
        """Have the finished run's files searched for `values`; a hit fails the check `nodeid`."""
        self.secrets.update(dict.fromkeys(values, nodeid))
        if self.worker:
            self._unsent_secrets.update(dict.fromkeys(values, nodeid))

    def _fail_checks_whose_secret_leaked(self) -> bool:
        """Search every file of the run, in its final form (summary.json, index.html, the Allure
        page, junit.xml), for the kept secrets; a check whose secret leaked becomes failed."""
        leaks = secrets.search(self.options.run_dir, self.secrets)
        for nodeid, files in leaks.items():
            result = self.results[nodeid]
            result.outcome = "failed"
            result.reason = f"its secret appears in files of the finished run: {', '.join(files)}"
        return bool(leaks)

    def _build_reports(self) -> None:
        """index.html and the Allure page; a report that cannot be built never hides the results."""
        try:
            self.built = report_build.build(self.options.run_dir)
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

    def __init__(self, run: ConformanceRun) -> None:
        self.run = run

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[parallel.WORKERINPUT_KEY] = self.run.worker_state()
        # execnet knows the worker's PID from its start (xdist reads the same cached info).
        self.run.worker_pids.append(int(node.gateway._rinfo().pid))


# -- fixtures the suites use -----------------------------------------------------------


def _current(request: pytest.FixtureRequest) -> ConformanceRun:
    run = request.config.stash.get(RUN_KEY, None)
    if run is None:
        raise pytest.UsageError("conformance checks need a run: pass --conformance-provider (or use the CLI)")
    return run


@pytest.fixture(scope="session")
def conformance(request: pytest.FixtureRequest) -> Environment:
    """The prepared environment: cluster up, KubeRay installed and checked, images available."""
    return _current(request).ensure_prepared()


@pytest.fixture(scope="session")
def profile(request: pytest.FixtureRequest) -> profiles.Profile:
    return _current(request).options.profile


@pytest.fixture(scope="session")
def timeouts(request: pytest.FixtureRequest) -> Timeouts:
    return _current(request).options.timeouts


@pytest.fixture(scope="session")
def api(conformance: Environment) -> client.ApiClient:
    assert conformance.api is not None
    return conformance.api


@pytest.fixture(scope="session")
def capabilities(conformance: Environment) -> Capabilities:
    assert conformance.capabilities is not None
    return conformance.capabilities


@pytest.fixture
def metrics(request: pytest.FixtureRequest) -> dict[str, float]:
    """Figures a check measured (snake_case names with a unit suffix); they go into summary.json."""
    return _current(request).metrics_for(request.node.nodeid)


@pytest.fixture
def timeline(request: pytest.FixtureRequest) -> Iterator[timelines.Recorder]:
    """Timelines for the report's charts (see conformance/report/timelines.py); saved even on failure."""
    recorder = timelines.Recorder(_current(request).options.run_dir, request.node.nodeid)
    yield recorder
    recorder.save()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, api: client.ApiClient) -> Iterator[str]:
    """A namespace for one check, removed afterwards (kept on failure with --keep-failed)."""
    yield from _current(request).namespace_for(request.node, api)


@pytest.fixture(scope="module")
def module_namespace(request: pytest.FixtureRequest, api: client.ApiClient) -> Iterator[str]:
    """A namespace shared by the checks of one module that look at one expensive object."""
    yield from _current(request).namespace_for(request.node, api)


def _terminal_line_writer(config: pytest.Config):  # noqa: ANN202 - a Callable[[str], None]
    """Progress lines of waits, shown on the terminal past pytest's output capture."""
    capture = config.pluginmanager.getplugin("capturemanager")
    state = {"test": ""}
    if parallel.is_worker(config):
        return _worker_line_writer(config)

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


def _worker_line_writer(config: pytest.Config):  # noqa: ANN202 - a Callable[[str], None]
    """Progress lines of a worker's waits, each naming the worker and the check (see worker_say)."""

    def write(line: str) -> None:
        test = _check_name(os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0])
        worker_say(config, f"{test}: {line}" if test else line)

    return write


def worker_say(config: pytest.Config, text: str) -> None:
    """xdist shows nothing of a worker's terminal, but its stderr reaches the run's: one whole line
    per event, prefixed with the worker's id, so the lines of several workers read apart."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        sys.stderr.write(f"[{parallel.worker_id(config)}] {text}\n")
        sys.stderr.flush()


def _check_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def _sigterm_as_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _area(item: pytest.Item) -> str:
    marker = item.get_closest_marker("area")
    if marker is None or marker.args[0] not in (*AREAS, HARNESS):
        raise pytest.UsageError(
            f"{item.nodeid}: every conformance check needs @pytest.mark.area(one of {AREAS})"
        )
    return str(marker.args[0])


def _issues(item: pytest.Item) -> list[int]:
    return [int(n) for marker in item.iter_markers("kuberay_issue") for n in marker.args]


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


def _failure_reason(call: pytest.CallInfo[None], report: pytest.TestReport) -> str:
    if call.excinfo is not None:
        text = str(call.excinfo.value).strip().splitlines()
        first = text[0] if text else ""
        return f"{call.excinfo.typename}: {first}"[:500]
    return str(report.longrepr).splitlines()[-1][:500] if report.longrepr else ""


def _failure_details(report: pytest.TestReport) -> str:
    """The whole assertion message, with pytest's explanation of the values compared."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text[:4000]


def _write_atomically(path: Path, text: str) -> None:
    """Every worker writes the same file; a reader sees one whole copy."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def results_json(summary: Summary) -> str:
    return json.dumps(summary.to_json(), indent=2)
