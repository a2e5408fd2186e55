"""Waits survive what real connections do, against the local cluster's real API server.

A loopback TCP proxy sits between the client and the API server and can go silent (the
connection stays open, no byte moves: a node or NAT gone without a FIN), so the client-side
timeouts are exercised, not assumed. A real 410 Gone comes from a second API server without a
watch cache (second_apiserver.py): its watches go to etcd, where resource version 1 is long
compacted away (the shared cluster's watch cache still holds everything since its young start).
"""

from __future__ import annotations

import functools
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client
from second_apiserver import second_apiserver

from conformance.kube import target, wait
from conformance.kube.target import KubeTarget, api_client
from conformance.providers.base import Cluster
from conformance.providers.local.provider import LocalProvider


class Proxy:
    """Forwards loopback connections to `upstream`; `freeze()` makes every open one go silent,
    `blackhole` makes new ones silent too."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.blackhole = False
        self._frozen_before = -1
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._frozen_before = self.connections

    def close(self) -> None:
        self._stop.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            number = self.connections
            threading.Thread(target=self._pipe, args=(downstream, number), daemon=True).start()

    def _silent(self, number: int) -> bool:
        return self.blackhole or number <= self._frozen_before

    def _pipe(self, downstream: socket.socket, number: int) -> None:
        upstream = socket.create_connection(self.upstream)
        ends = {downstream: upstream, upstream: downstream}
        with downstream, upstream:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(ends), [], [], 0.2)
                if self._silent(number):
                    continue  # keep the sockets open, move nothing
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    ends[sock].sendall(data)


@pytest.fixture
def proxied(local_cluster: Cluster, tmp_path: Path) -> Iterator[tuple[Proxy, client.ApiClient]]:
    config = yaml.safe_load(local_cluster.kubeconfig.read_text())
    server = urllib3.util.parse_url(config["clusters"][0]["cluster"]["server"])
    proxy = Proxy((server.host, server.port))
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    yield proxy, api_client(KubeTarget(kubeconfig))
    proxy.close()


@pytest.fixture
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wait, "_WATCH_CHUNK_S", 3)
    monkeypatch.setattr(wait, "WATCH_GRACE_S", 2)
    monkeypatch.setattr(wait, "CONNECT_TIMEOUT_S", 2)
    monkeypatch.setattr(target, "READ_TIMEOUT_S", 3)
    monkeypatch.setattr(target, "CONNECT_TIMEOUT_S", 2)  # bounds a TLS handshake nobody answers


@pytest.fixture
def uncached(
    local_provider: LocalProvider, local_cluster: Cluster, tmp_path: Path
) -> Iterator[client.CoreV1Api]:
    with second_apiserver(local_provider, tmp_path, "--watch-cache=false") as (_, api):
        yield client.CoreV1Api(api)


def _config_map(core: client.CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"v": "1"}})


def test_a_request_to_a_silent_server_times_out_instead_of_hanging(
    proxied: tuple[Proxy, client.ApiClient], short_timeouts: None
) -> None:
    proxy, api = proxied
    core = client.CoreV1Api(api)
    core.list_namespace(limit=1)  # reachable through the proxy
    proxy.blackhole = True
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError):  # ReadTimeoutError, or MaxRetryError after retries
        core.list_namespace(limit=1)
    assert time.monotonic() - started < 30


def test_holds_for_resumes_a_watch_whose_connection_went_silent(
    proxied: tuple[Proxy, client.ApiClient], short_timeouts: None, namespace: str
) -> None:
    proxy, api = proxied
    core = client.CoreV1Api(api)
    _config_map(core, namespace, "steady")
    threading.Timer(1, proxy.freeze).start()
    started = time.monotonic()
    broke = wait.holds_for(
        core.list_namespaced_config_map,
        lambda cm: cm.data == {"v": "1"},
        what="the config map keeps its data",
        duration=15,
        namespace=namespace,
        field_selector="metadata.name=steady",  # not the namespace's kube-root-ca.crt
    )
    took = time.monotonic() - started
    assert broke == ""
    assert 15 <= took < 40
    assert proxy.connections >= 2  # the frozen connections were given up and new ones made


def test_holds_for_still_sees_a_change_made_while_its_watch_was_silent(
    proxied: tuple[Proxy, client.ApiClient], short_timeouts: None, namespace: str, core: client.CoreV1Api
) -> None:
    proxy, api = proxied
    _config_map(core, namespace, "changes")

    def freeze_then_change() -> None:
        proxy.freeze()
        core.patch_namespaced_config_map("changes", namespace, {"data": {"v": "2"}})  # not via the proxy

    threading.Timer(1, freeze_then_change).start()
    broke = wait.holds_for(
        client.CoreV1Api(api).list_namespaced_config_map,
        lambda cm: cm.data == {"v": "1"},
        what="the config map keeps its data",
        duration=20,
        namespace=namespace,
        field_selector="metadata.name=changes",
    )
    assert broke.startswith(f"{namespace}/changes stopped holding"), broke


def test_stays_absent_sees_an_object_made_while_its_watch_was_silent(
    proxied: tuple[Proxy, client.ApiClient], short_timeouts: None, namespace: str, core: client.CoreV1Api
) -> None:
    proxy, api = proxied

    def freeze_then_make() -> None:
        proxy.freeze()
        _config_map(core, namespace, "late")  # not via the proxy

    threading.Timer(1, freeze_then_make).start()
    made = wait.stays_absent(
        client.CoreV1Api(api).list_namespaced_config_map,
        what="config map late",
        duration=20,
        namespace=namespace,
        field_selector="metadata.name=late",
    )
    assert made in (f"{namespace}/late appeared", f"{namespace}/late exists"), made


def test_stays_absent_watches_its_whole_window_when_nothing_comes(
    core: client.CoreV1Api, namespace: str
) -> None:
    started = time.monotonic()
    made = wait.stays_absent(
        core.list_namespaced_config_map,
        what="config map never",
        duration=5,
        namespace=namespace,
        field_selector="metadata.name=never",
    )
    assert made == ""
    assert time.monotonic() - started >= 5


def _stale_lists(list_fn: Any, calls: list[str]) -> Any:
    """`list_fn`, whose first list reports resource version 1, long compacted away: the watch that
    follows gets a real 410 Gone."""

    @functools.wraps(list_fn)
    def listing(*args: Any, **kwargs: Any) -> Any:
        result = list_fn(*args, **kwargs)
        if not kwargs.get("watch"):
            calls.append("list")
            if len(calls) == 1:
                result.metadata.resource_version = "1"
        return result

    return listing


def test_wait_for_resumes_after_410_gone(uncached: client.CoreV1Api) -> None:
    calls: list[str] = []
    threading.Timer(2, _config_map, (uncached, "default", "late")).start()
    found = wait.wait_for(
        _stale_lists(uncached.list_namespaced_config_map, calls),
        lambda cm: cm.metadata.name == "late",
        what="config map late",
        timeout=60,
        namespace="default",
    )
    assert found.metadata.name == "late"
    assert len(calls) >= 2  # the 410 made it list again, well before the 30 s watch chunk ended


def test_holds_for_resumes_after_410_gone(uncached: client.CoreV1Api) -> None:
    _config_map(uncached, "default", "steady")
    calls: list[str] = []
    started = time.monotonic()
    broke = wait.holds_for(
        _stale_lists(uncached.list_namespaced_config_map, calls),
        lambda cm: cm.data == {"v": "1"},
        what="the config map keeps its data",
        duration=5,
        namespace="default",
        field_selector="metadata.name=steady",
    )
    assert broke == ""
    assert len(calls) >= 2
    assert time.monotonic() - started >= 5  # it watched the whole window after resuming
