"""Shared fixtures of the harness's own tests.

The end-to-end tests share one local cluster for the session (it is built on first use
and taken down at the end unless KRC_KEEP_CLUSTER=1); the test that checks `down`
itself is moved to the very end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from conformance.providers.base import Cluster
from conformance.providers.local.provider import LocalProvider


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "runs_last: run after every other test (tears the cluster down)")


@pytest.fixture(scope="session")
def local_provider() -> Iterator[LocalProvider]:
    if os.geteuid() != 0:
        pytest.fail("the end-to-end tests need root: they run a real cluster on this machine")
    provider = LocalProvider()
    yield provider
    if os.environ.get("KRC_KEEP_CLUSTER") != "1":
        provider.down()


@pytest.fixture(scope="session")
def local_cluster(local_provider: LocalProvider) -> Cluster:
    return local_provider.up()


@pytest.fixture(scope="session")
def api(local_cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(str(local_cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"krc-test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"kuberay-conformance.io/test": "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def real_checkout() -> Path:
    """A KubeRay checkout named by KRC_KUBERAY_CHECKOUT (none is committed), for the Helm-chart
    path of --kuberay-source; the tests that need one are skipped, with that reason, without it."""
    path = os.environ.get("KRC_KUBERAY_CHECKOUT", "")
    if not path:
        pytest.skip("KRC_KUBERAY_CHECKOUT names no KubeRay checkout (e.g. one at tag ray-operator/v1.7.0)")
    return Path(path)
