"""A second, real kube-apiserver of the local cluster's build, on the same etcd under a key prefix
of its own: an empty cluster beside the shared one (whose KubeRay other runs need), started and
stopped by PID, its keys removed afterwards. Extra flags shape it (e.g. no watch cache)."""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.kube.target import KubeTarget, api_client
from conformance.providers.local import components
from conformance.providers.local.provider import LocalProvider


@contextmanager
def second_apiserver(
    provider: LocalProvider, folder: Path, *extra: str
) -> Iterator[tuple[Path, client.ApiClient]]:
    """(kubeconfig, client) of the second API server while the block runs."""
    port, prefix = _free_port(), f"/krc-test-{uuid.uuid4().hex[:8]}"
    log_path = folder / "kube-apiserver.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [*_argv(provider, port, prefix), *extra], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            config = yaml.safe_load(provider.state.admin_kubeconfig.read_text())
            config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
            kubeconfig = folder / "second-kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(config))
            yield kubeconfig, _wait_ready(kubeconfig, server, log_path)
        finally:
            server.terminate()
            server.wait(timeout=60)
            _delete_prefix(provider, prefix)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _argv(provider: LocalProvider, port: int, prefix: str) -> list[str]:
    argv = components.apiserver(provider.state, provider.net, provider._cached_binaries()).argv
    replaced = {
        "--secure-port": str(port),
        "--bind-address": "127.0.0.1",
        "--advertise-address": provider.net.host_ip,  # not loopback; the host's end of the veth
        "--etcd-servers": f"http://{provider.net.node_ip}:2379",  # etcd runs in the node's namespace
    }
    kept = [arg for arg in argv if arg.split("=", 1)[0] not in replaced]
    return [*kept, *(f"{key}={value}" for key, value in replaced.items()), f"--etcd-prefix={prefix}"]


def _wait_ready(kubeconfig: Path, server: subprocess.Popen, log: Path) -> client.ApiClient:
    api = api_client(KubeTarget(kubeconfig))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the second kube-apiserver exited: {log.read_text()[-2000:]}")
        try:
            client.CoreV1Api(api).read_namespace("default")
            return api
        except (ApiException, urllib3.exceptions.HTTPError):
            time.sleep(1)  # poll-interval: a process coming up has no watch
    pytest.fail("the second kube-apiserver was not ready in 120 s")


def _delete_prefix(provider: LocalProvider, prefix: str) -> None:
    """Remove every key of the second API server (etcd's v3 JSON gateway: deleterange)."""
    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    requests.post(
        f"http://{provider.net.node_ip}:2379/v3/kv/deleterange",
        json={"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()},
        timeout=10,
    ).raise_for_status()
