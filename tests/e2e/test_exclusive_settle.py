"""An exclusive check starts once the namespaces of the checks before it are gone (exclusive.settle),
on the real API server: a namespace held open by a finalizer is waited for, then named."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from conformance import exclusive
from conformance.kube.wait import wait_for

FINALIZER = "kuberay-conformance.test/hold"


@pytest.fixture
def held_namespace(core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """A namespace of a made-up run, deleted while a ConfigMap's finalizer holds it Terminating."""
    run = f"settle-{uuid.uuid4().hex[:6]}"
    name = f"krc-{run}"
    core.create_namespace({"metadata": {"name": name, "labels": {"krc-test-run": run}}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "held", "finalizers": [FINALIZER]}})
    core.delete_namespace(name)
    wait_for(
        core.list_namespace,
        lambda ns: ns.status.phase == "Terminating",
        what=f"namespace {name} terminating",
        timeout=30,
        field_selector=f"metadata.name={name}",
    )
    yield name, f"krc-test-run={run}"
    release(core, name)


def release(core: client.CoreV1Api, namespace: str) -> None:
    try:
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def test_a_terminating_namespace_is_waited_for_and_named_when_it_stays(
    api: client.ApiClient, core: client.CoreV1Api, held_namespace: tuple[str, str]
) -> None:
    name, selector = held_namespace
    assert exclusive.terminating(api, selector) == [name]
    note = exclusive.settle(api, selector, timeout=3)
    assert name in note and "still terminating" in note


def test_settle_returns_once_the_namespace_is_gone(
    api: client.ApiClient, core: client.CoreV1Api, held_namespace: tuple[str, str]
) -> None:
    name, selector = held_namespace
    release(core, name)
    assert exclusive.settle(api, selector, timeout=60) == ""
    assert exclusive.terminating(api, selector) == []
