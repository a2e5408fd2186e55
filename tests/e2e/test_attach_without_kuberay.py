"""`attach` to a real cluster that has no KubeRay CRDs: refused in one line, exit 3, nothing made.

The shared local cluster keeps its KubeRay (other runs need it), so the cluster without CRDs is a
second, real kube-apiserver of the same build on the same etcd under a prefix of its own: an empty
cluster. It is stopped by PID and its keys removed afterwards.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.environment import RAY_CRDS
from conformance.kube.target import KubeTarget, api_client
from conformance.providers.local import components
from conformance.providers.local.provider import LocalProvider


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
    out = [arg for arg in argv if arg.split("=", 1)[0] not in replaced]
    return [*out, *(f"{key}={value}" for key, value in replaced.items()), f"--etcd-prefix={prefix}"]


def _delete_prefix(provider: LocalProvider, prefix: str) -> None:
    """Remove every key of the second API server (etcd's v3 JSON gateway: deleterange)."""
    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    requests.post(
        f"http://{provider.net.node_ip}:2379/v3/kv/deleterange",
        json={"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()},
        timeout=10,
    ).raise_for_status()


@pytest.fixture
def empty_cluster(
    local_provider: LocalProvider, local_cluster: object, tmp_path: Path
) -> Iterator[tuple[Path, client.ApiClient]]:
    port, prefix = _free_port(), f"/krc-test-{uuid.uuid4().hex[:8]}"
    log = (tmp_path / "kube-apiserver.log").open("w")
    server = subprocess.Popen(_argv(local_provider, port, prefix), stdout=log, stderr=subprocess.STDOUT)
    try:
        config = yaml.safe_load(local_provider.state.admin_kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        kubeconfig = tmp_path / "empty-kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        yield kubeconfig, _wait_ready(kubeconfig, server, tmp_path / "kube-apiserver.log")
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
        _delete_prefix(local_provider, prefix)


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


def test_attach_to_a_cluster_without_kuberay_crds_is_refused_before_anything_runs(
    empty_cluster: tuple[Path, client.ApiClient], tmp_path: Path
) -> None:
    kubeconfig, api = empty_cluster
    before = _namespaces(api)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("kuberay-conformance")), "run", "--provider", "existing",
         "--kubeconfig", str(kubeconfig), "--profile", "attach", "--run-dir", str(workdir / "run")],
        capture_output=True, text=True, check=False, cwd=workdir, timeout=300,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert f"no KubeRay CRDs ({', '.join(RAY_CRDS)} missing)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(workdir.iterdir()) == []
    assert _namespaces(api) == before  # nothing was installed
    assert "kuberay-system" not in before


def _namespaces(api: client.ApiClient) -> list[str]:
    return sorted(ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items)
