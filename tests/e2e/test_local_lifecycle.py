"""`up`, `status`, `env` and repair on the real local cluster; bad input fails early and leaves nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from conformance.kube.target import KubeTarget, api_client
from conformance.kube.wait import poll_until, wait_for
from conformance.providers.base import Cluster
from conformance.providers.local.cleanup import kill_pod_processes
from conformance.providers.local.provider import LocalProvider

CLI = [sys.executable, "-m", "conformance.cli"]


def _cli(
    *args: str, unprivileged: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    # A fresh user namespace makes us uid 65534 without root's capabilities, yet able to read
    # the interpreter and the project (owner checks still see root's files as ours).
    prefix = ["unshare", "--user"] if unprivileged else []
    return subprocess.run(
        [*prefix, *CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=Path(__file__).resolve().parents[2],
    )


def test_second_up_reuses_the_healthy_cluster(local_provider: LocalProvider, local_cluster: Cluster) -> None:
    before = {r.name: (r.pid, r.start_time) for r in local_provider.supervisor.records()}
    local_provider.up()
    after = {r.name: (r.pid, r.start_time) for r in local_provider.supervisor.records()}
    assert after == before


def test_status_shows_a_dead_component_and_up_repairs_it(
    local_provider: LocalProvider, local_cluster: Cluster
) -> None:
    record = local_provider.supervisor.record("coredns")
    assert record is not None
    os.kill(record.pid, signal.SIGKILL)
    status = _cli("cluster", "status")
    assert status.returncode == 2, status.stdout
    line = next(line for line in status.stdout.splitlines() if " coredns " in line)
    assert line.startswith("FAIL") and "dead" in line
    local_provider.up()
    repaired = local_provider.supervisor.record("coredns")
    assert repaired is not None and repaired.pid != record.pid
    status = _cli("cluster", "status")
    assert status.returncode == 0, status.stdout
    assert all(line.startswith("ok") for line in status.stdout.splitlines())


def test_up_after_every_process_was_killed_brings_the_cluster_back(
    local_provider: LocalProvider, local_cluster: Cluster
) -> None:
    """A session or CI job that ends mid-run kills everything without `down`; the next `up` converges.

    containerd killed this way leaves its socket file behind: a health check that looked only at
    the file let `up` import the pause image into a containerd that was not yet listening.
    """
    core = client.CoreV1Api(api_client(KubeTarget(local_cluster.kubeconfig)))
    # The cluster's own pods (storage, Gateway, operator); other tests' namespaces come and go.
    pods_before = {
        (p.metadata.namespace, p.metadata.name)
        for p in core.list_pod_for_all_namespaces().items
        if _ready(p) and not p.metadata.namespace.startswith("krc-")
    }
    assert kill_pod_processes() == []
    poll_until(
        lambda: True if not _sigkill_all(local_provider.supervisor.cgroup_pids()) else None,
        what="the killed cluster processes to exit",
        timeout=30,
        every=0.2,
    )
    assert local_provider.state.containerd_socket.is_socket(), "SIGKILL should leave containerd's socket file"

    local_provider.up()

    status = _cli("cluster", "status")
    assert status.returncode == 0, status.stdout
    for namespace, name in sorted(pods_before):
        wait_for(
            core.list_namespaced_pod,
            _ready,
            what=f"pod {namespace}/{name} ready again",
            timeout=180,
            describe=_conditions,
            namespace=namespace,
            field_selector=f"metadata.name={name}",
        )


def _sigkill_all(pids: list[int]) -> list[int]:
    """SIGKILL each PID still there; returns the PIDs that were. A PID read from cgroup.procs can
    exit before its signal (a short-lived child), which is what we want anyway."""
    alive = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            alive.append(pid)
    return alive


def _conditions(pod: client.V1Pod) -> str:
    held = [c.type for c in pod.status.conditions or [] if c.status == "True"]
    return f"{pod.status.phase}, conditions {held}"


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_env_prints_kubeconfig_and_the_built_kubectl_first(
    local_provider: LocalProvider, local_cluster: Cluster
) -> None:
    out = _cli("cluster", "env").stdout
    exports = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())
    assert exports["KUBECONFIG"] == str(local_cluster.kubeconfig)
    first = exports["PATH"].split(":")[0]
    assert Path(first, "kubectl").exists()
    version = subprocess.run(
        ["bash", "-c", f"{out}\nkubectl version --client -o json"], capture_output=True, text=True, check=True
    )
    assert '"gitVersion": "v1.35.4"' in version.stdout


def test_not_root_is_refused_in_one_line_before_anything_is_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = _cli("cluster", "up", unprivileged=True, env={"KRC_STATE_DIR": str(state)})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "needs root" in lines[0] and "run it as root" in lines[0]
    assert not state.exists()


def test_unknown_provider_is_a_usage_error() -> None:
    done = _cli("cluster", "up", "--provider", "nope")
    assert done.returncode == 3
    assert "nope" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_simulated_gpu_count_follows_the_setting(
    local_provider: LocalProvider, local_cluster: Cluster
) -> None:
    kubectl = [*local_provider.env()["PATH"].split(":")[:1]]
    query = [
        f"{kubectl[0]}/kubectl",
        "--kubeconfig",
        str(local_cluster.kubeconfig),
        "get",
        "node",
        "krc-node",
        "-o",
        "jsonpath={.status.allocatable.nvidia\\.com/gpu}",
    ]
    try:
        assert _cli("cluster", "up", env={"KRC_SIMULATED_GPUS": "3"}).returncode == 0
        assert subprocess.run(query, capture_output=True, text=True, check=True).stdout == "3"
    finally:
        assert _cli("cluster", "up", env={"KRC_SIMULATED_GPUS": "2"}).returncode == 0
    assert subprocess.run(query, capture_output=True, text=True, check=True).stdout == "2"


def test_a_bad_gpu_count_is_a_one_line_usage_error() -> None:
    done = _cli("cluster", "up", env={"KRC_SIMULATED_GPUS": "two"})
    assert done.returncode == 3
    assert "KRC_SIMULATED_GPUS='two' is not a whole number" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
