"""What every process of a conformance run does inside its pytest session: collect and select the
checks, judge each check's preconditions, run it (with a namespace of its own, beside others or
alone), and record its result by the outcome rules (outcomes.py).

Two halves build on it (parallel.py tells which a process is): the controller (controller.py),
which is the whole run without pytest-xdist and the distributing process with it, and a worker
(worker.py), one of the processes that run the checks of a parallel run.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from conformance import exclusive, node_pressure, outcomes, selection, stopwatch
from conformance.checks import KUBERAY_ISSUE_URL, NOT_APPLICABLE, RUN_LABEL, area_of, check_name, issues_of
from conformance.environment import Environment
from conformance.errors import HarnessError
from conformance.kube import diagnostics, namespaces
from conformance.load import generator as load_generator
from conformance.report.summary import Summary, TestResult, now
from conformance.session.setup import RunSetup

TURNS = ".turns"  # the lock files of a parallel run's checks, inside the run folder (exclusive.py)
NOTES_PREFIX = "notes-"  # in TURNS: a worker's lines for environment.notes, one file per worker
SELECTION_FILE = "selection.json"  # in TURNS: what the workers selected, which the controller never collects


class ConformanceRun:
    """The state of one conformance run inside a pytest session (`config.stash[RUN_KEY]`)."""

    worker = False

    def __init__(self, config: pytest.Config, setup: RunSetup, started: str | None = None) -> None:
        self.config = config
        self.setup = setup
        self.options = setup.options
        self.environment = setup.environment
        self.summary = Summary(
            run_id=self.options.run_id,
            started=started or now(),
            provider=self.options.provider,
            profile=self.options.profile.name,
            versions={},
            selection=dict(setup.selection),
        )
        self._metrics: dict[str, dict[str, float]] = {}
        self.results: dict[str, TestResult] = {}
        self._prepared: bool | None = None
        self._prepare_error: BaseException | None = None
        self._settled: set[str] = set()  # checks whose outcome is known (outcomes.settles)
        # Secrets a check saw (a cluster's auth token), in memory only: no file of the finished
        # run may hold one. Value -> the check that registered it.
        self.secrets: dict[str, str] = {}
        self.collect_only = bool(config.option.collectonly)
        self.turn: exclusive.ClusterTurn | None = None  # a worker's: its turns beside the others
        self._pressure: dict[str, node_pressure.CheckPressure] = {}  # per running check
        self._node_cpu: dict[str, dict[str, float]] = {}  # per check: TestResult.node_cpu
        self._phases: dict[str, dict[str, float]] = {}  # per check: TestResult.phases
        self._inside_call: dict[str, dict[str, float]] = {}  # per check: its call's waits (stopwatch)

    # -- collection -------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "ray_version" in metafunc.fixturenames:
            versions = self.options.versions_to_test
            metafunc.parametrize("ray_version", versions, ids=[f"ray{v}" for v in versions], scope="session")

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        import allure  # noqa: PLC0415 - only conformance runs need it

        wanted = set(self.setup.areas)
        if wanted:
            deselected = [item for item in items if area_of(item) not in wanted]
            items[:] = [item for item in items if area_of(item) in wanted]
            config.hook.pytest_deselected(items=deselected)
        cap = self.options.timeouts.check
        exclusive.exclusive_last(items)
        for item in items:
            area = area_of(item)
            if item.get_closest_marker("timeout") is None:  # pytest-timeout: a hang becomes an error
                item.add_marker(pytest.mark.timeout(cap, method="signal"))
            item.add_marker(allure.epic(area))
            item.add_marker(allure.feature(item.module.__name__.rsplit(".", 1)[-1] if item.module else area))
            item.add_marker(allure.story(item.originalname if hasattr(item, "originalname") else item.name))
            for number in issues_of(item):
                item.add_marker(allure.issue(KUBERAY_ISSUE_URL.format(number), f"kuberay#{number}"))

    def select(self, items: list[pytest.Item]) -> None:
        """Keep the tier's checks, then the shard's (selection.py); record what was selected."""
        asked = self.summary.selection
        chosen = selection.tier_of(items, str(asked["tier"]))
        selected, split = len(chosen), None
        if asked["shard"]:
            areas = {item.nodeid: area_of(item) for item in chosen}
            shard = selection.parse_shard(str(asked["shard"]))
            made = selection.shard_of(chosen, shard, areas, selection.recorded_durations())
            chosen, split = made.kept, made.split
        kept = {id(item) for item in chosen}
        deselected = [item for item in items if id(item) not in kept]
        if deselected:
            items[:] = chosen
            self.config.hook.pytest_deselected(items=deselected)
        self.summary.selection = {**asked, "selected": selected, "checks": len(chosen), "split": split}
        self._selected()

    def _selected(self) -> None:
        """After `select`: a worker tells the controller, which collects nothing (worker.py)."""

    # -- environment ------------------------------------------------------------------

    def ensure_prepared(self) -> Environment:
        if self._prepared is None:
            self._prepare()
        if not self._prepared:
            message = self._prepare_error.args[0] if self._prepare_error and self._prepare_error.args else ""
            raise HarnessError(f"the environment could not be prepared: {message}")
        return self.environment

    def _prepare(self) -> None:
        """Bring the environment up (the controller), or say why this process cannot (a worker)."""
        raise NotImplementedError

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

    def note(self, text: str) -> None:
        """A line for summary.json's environment.notes."""
        raise NotImplementedError

    def keep_secret(self, nodeid: str, *values: str) -> None:
        """Have the finished run's files searched for `values`; a hit fails the check `nodeid`."""
        self.secrets.update(dict.fromkeys(values, nodeid))

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
        beside_others = runs and not alone and self.turn is not None
        if psi is not None and beside_others and node_pressure.needs_room(item):
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
        """Beside other checks, start once the node has room (worker.py: only workers run beside others)."""

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
            self.note(f"before {check_name(item.nodeid)}: {note}")

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
        self._recorded(item, report, result)

    def _recorded(self, item: pytest.Item, report: pytest.TestReport, result: TestResult) -> None:
        """After a phase's result is recorded: a worker sends it to the controller (worker.py)."""

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
                area=area_of(item),
                outcome="passed",
                duration_s=0.0,
                issues=[f"kuberay#{n}" for n in issues_of(item)],
            )
            self.results[item.nodeid] = result
        result.duration_s = round(result.duration_s + report.duration, 3)
        self._time_phase(item.nodeid, report)
        if outcomes.settles(report):
            self._settled.add(item.nodeid)
        if not outcomes.judge(result, report, call):
            return
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
        result = self.results.get(report.nodeid)
        if report.outcome != "rerun" or result is None:
            return
        outcomes.rerun(result)

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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
