"""The fixtures the suites take from the harness (registered by plugin.py): the prepared
environment and what it holds, the profile's values, and per check a namespace, its metrics and
its timelines. Each asks the session's run (session/base.py) for its part."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from kubernetes import client

from conformance import profiles
from conformance.capabilities import Capabilities
from conformance.checks import RUN_KEY
from conformance.environment import Environment
from conformance.report import timelines
from conformance.timeouts import Timeouts

if TYPE_CHECKING:
    from conformance.session.base import ConformanceRun


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
