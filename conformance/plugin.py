"""The pytest plugin of conformance runs: the entry point (`pytest11`) that starts a run's session.

Loaded with the package, it stays inert unless the CLI hands it a run (session/setup.py) or
`--conformance-provider` is given, so other pytest sessions (the harness's own tests) are not
affected. Where things are:

- options.py: the run options, declared once (the CLI's flags and their `--conformance-*` twins)
- session/setup.py: the run as its options make it, built once per run
- session/base.py, controller.py, worker.py: the run inside the session; with pytest-xdist
  (`-n N`, what `run --workers` passes) the controller prepares, collects results and writes the
  run's files, the workers run the checks (parallel.py)
- checks.py: what the suites import (markers, outcome words, labels); fixtures.py: their fixtures
- outcomes.py: how a check's reports become its outcome (failed, error, not applicable, ...)
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance import checks, options, parallel, progress
from conformance.checks import RUN_KEY
from conformance.errors import HarnessError
from conformance.session import controller, worker
from conformance.session.base import ConformanceRun
from conformance.session.setup import RunSetup

pytest_plugins = ("conformance.fixtures",)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_to_pytest(parser)


def pytest_configure(config: pytest.Config) -> None:
    checks.register_markers(config)
    try:
        run = _run_of(config)
    except HarnessError as exc:  # bad input under plain pytest: a usage error, not an INTERNALERROR
        raise pytest.UsageError(f"kuberay-conformance: {exc.one_line()}") from None
    if run is None:
        return
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "kuberay-conformance-run")
    if isinstance(run, controller.ControllerRun) and run.controller:
        config.pluginmanager.register(controller.XdistController(run), "kuberay-conformance-xdist")
    write: Any = worker.line_writer(config) if run.worker else controller.terminal_line_writer(config)
    progress.route_lines_to(write)


def _run_of(config: pytest.Config) -> ConformanceRun | None:
    """The run this session is part of: sent by the controller to a worker, handed over by the CLI,
    or built here from the --conformance-* options (plain pytest); none without them."""
    if parallel.is_worker(config):
        state = parallel.unpack(config)
        return worker.WorkerRun(config, state) if state else None
    setup = RunSetup.handed_to(config)
    if setup is None and config.getoption("--conformance-provider", default=None):
        setup = RunSetup.build(options.RunValues.from_pytest(config), config.option.keyword)
    return controller.ControllerRun(config, setup) if setup is not None else None


@pytest.hookimpl(trylast=True)  # after --area and -k: the tier and the shard select among what is left
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.select(items)
