"""Shared fixtures of the harness's own tests.

The end-to-end tests share one local cluster for the session (it is built on first use
and taken down at the end unless KRC_KEEP_CLUSTER=1); the test that checks `down`
itself is moved to the very end. Since they end by taking the cluster down, they refuse to
start while a conformance run holds the cluster's lock.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import checkouts
import pytest
import urllib3
from kubernetes import client, config

from conformance import cluster_lock
from conformance.build import small_images
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
    if os.environ.get("KRC_KEEP_CLUSTER") == "1":
        return
    holder = _live_holder_if_up(provider)
    if holder:  # the session was refused at its start (local_cluster), or a run began since
        print(f"\nleft the local cluster up: {holder} holds it")
        return
    provider.down()


@pytest.fixture(scope="session")
def local_cluster(local_provider: LocalProvider) -> Cluster:
    cluster = local_provider.up()
    holder = _live_holder_of_the_cluster_lock(cluster.kubeconfig)
    if holder:
        pytest.exit(
            f"{holder} holds the local cluster, and these tests end by taking it down: "
            "wait until it ends (or stop it), then run the tests again",
            returncode=2,
        )
    return cluster


def _live_holder_if_up(provider: LocalProvider) -> str:
    kubeconfig = provider.state.admin_kubeconfig
    if not kubeconfig.exists():
        return ""
    try:
        return _live_holder_of_the_cluster_lock(kubeconfig)
    except (urllib3.exceptions.HTTPError, OSError):  # an API server that is gone runs nobody's run
        return ""


def _live_holder_of_the_cluster_lock(kubeconfig: Path) -> str:
    """The conformance run that holds the cluster's lock and still renews it, described; '' if none."""
    holder = cluster_lock.live_holder(config.new_client_from_config(str(kubeconfig)))
    return holder.describe() if holder else ""


@pytest.fixture(scope="session")
def toolbox(local_provider: LocalProvider, local_cluster: Cluster) -> str:
    """An image built on this machine (busybox and kubectl), imported into the node."""
    kubectl = local_provider.ensure_binaries().kubernetes / "kubectl"
    archive = small_images.toolbox_image(local_provider.cache, kubectl)
    local_provider.load_image(archive)
    return archive.ref


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
    path = checkouts.named_checkout()
    if path is None:
        pytest.skip(checkouts.NO_CHECKOUT)
    return path
