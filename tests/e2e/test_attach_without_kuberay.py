"""`attach` to a real cluster that has no KubeRay CRDs: refused in one line, exit 3, nothing made.

The shared local cluster keeps its KubeRay (other runs need it), so the cluster without CRDs is a
second, real kube-apiserver on the same etcd under a prefix of its own (second_apiserver.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from second_apiserver import second_apiserver

from conformance.install.modes import RAY_CRDS
from conformance.providers.local.provider import LocalProvider


@pytest.fixture
def empty_cluster(
    local_provider: LocalProvider, local_cluster: object, tmp_path: Path
) -> Iterator[tuple[Path, client.ApiClient]]:
    with second_apiserver(local_provider, tmp_path) as (kubeconfig, api):
        yield kubeconfig, api


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
    print(done.stderr)  # the line the user saw, for the record (-rA shows it)
    assert done.returncode == 3, done.stderr
    assert f"no KubeRay CRDs ({', '.join(RAY_CRDS)} missing)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(workdir.iterdir()) == []
    assert _namespaces(api) == before  # nothing was installed
    assert "kuberay-system" not in before


def _namespaces(api: client.ApiClient) -> list[str]:
    return sorted(ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items)
