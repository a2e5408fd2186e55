"""The fixtures the suites take from the harness (registered by plugin.py): the prepared
environment and what it holds, the profile's values, and per check a namespace, a `Ray` helper
bound to it, the manifest values, its metrics and its timelines; `check` holds these together for
a check that needs several. Each asks the session's run (session/base.py) for its part."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client

from conformance import profiles
from conformance.capabilities import Capabilities
from conformance.checks import RUN_KEY
from conformance.environment import Environment
from conformance.kube.manifests import manifest_values
from conformance.kube.ray import Ray
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


@pytest.fixture
def ray(api: client.ApiClient, namespace: str) -> Ray:
    """Ray objects, pods and waits, bound to the check's namespace."""
    return Ray(api, namespace)


@pytest.fixture
def cluster_values(profile: profiles.Profile, ray_version: str) -> dict[str, Any]:
    """The values every Ray manifest template takes, for the Ray version the check runs with."""
    return manifest_values(profile, ray_version)


@dataclass(frozen=True)
class Check:
    """One check's context, for a check that needs several of the fixtures above: take `check`
    instead of `ray, conformance, profile, timeouts, metrics, ...` and pass it on to helpers."""

    environment: Environment  # the prepared environment (the `conformance` fixture)
    ray: Ray  # bound to the check's namespace
    profile: profiles.Profile
    timeouts: Timeouts
    values: dict[str, Any]  # the manifest values (`cluster_values`); the check adds its own
    metrics: dict[str, float]  # what the check measured, into summary.json
    timeline: timelines.Recorder  # saved after the check, even on failure (nothing if unused)
    request: pytest.FixtureRequest

    @property
    def nodeid(self) -> str:
        return self.request.node.nodeid

    @property
    def case(self) -> str:
        """The parameters' id (`ray2.58.0-step100-...`), "" for a check without any."""
        callspec = getattr(self.request.node, "callspec", None)
        return callspec.id if callspec is not None else ""

    @property
    def namespace(self) -> str:
        return self.ray.namespace

    @property
    def run_dir(self) -> Path:
        return self.environment.options.run_dir


@pytest.fixture
def check(
    request: pytest.FixtureRequest,
    conformance: Environment,
    ray: Ray,
    profile: profiles.Profile,
    timeouts: Timeouts,
    cluster_values: dict[str, Any],
    metrics: dict[str, float],
    timeline: timelines.Recorder,
) -> Check:
    """The check's context (`Check`): its namespace's `Ray` helper, the profile, the timeouts, the
    manifest values, its metrics and timelines, the environment and the run folder."""
    return Check(conformance, ray, profile, timeouts, cluster_values, metrics, timeline, request)
