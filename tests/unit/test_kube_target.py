"""Client-side timeouts on every request (pure: what each request is given; the e2e test
tests/e2e/test_watch_resilience.py shows them ending real hangs)."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from conformance.kube import target
from conformance.kube.target import KubeTarget


def test_a_plain_request_gets_the_default_connect_and_read_timeouts() -> None:
    assert target.default_timeout([("limit", 1)]) == (target.CONNECT_TIMEOUT_S, target.READ_TIMEOUT_S)


def test_a_watch_waits_for_its_server_side_timeout_plus_grace() -> None:
    assert target.default_timeout([("watch", True), ("timeoutSeconds", 30)]) == (
        target.CONNECT_TIMEOUT_S,
        30 + target.WATCH_GRACE_S,
    )
    assert target.default_timeout([("watch", True)])[1] == target.WATCH_READ_TIMEOUT_S


def test_the_wrapper_fills_in_only_a_missing_timeout() -> None:
    api = client.ApiClient()
    seen: list[object] = []
    api.rest_client.request = lambda method, url, **kw: seen.append(kw["_request_timeout"])
    target.with_request_timeouts(api)
    target.with_request_timeouts(api)  # idempotent: not wrapped twice
    api.rest_client.request("GET", "/api", query_params=[], _request_timeout=None)
    api.rest_client.request("GET", "/api", query_params=[], _request_timeout=5)
    assert seen == [(target.CONNECT_TIMEOUT_S, target.READ_TIMEOUT_S), 5]


def test_helm_gets_kubeconfig_and_context() -> None:
    assert KubeTarget(Path("/k")).helm_args() == ["--kubeconfig", "/k"]
    assert KubeTarget(Path("/k"), "prod").helm_args() == ["--kubeconfig", "/k", "--kube-context", "prod"]
    assert KubeTarget(Path("/k"), "prod").shell_env() == {"KUBECONFIG": "/k", "HELM_KUBECONTEXT": "prod"}
