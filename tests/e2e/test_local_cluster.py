"""The local provider's cluster does what a real one-node cluster does.

Everything here talks to the real API server, kubelet, containerd, kube-proxy and
CoreDNS that `cluster up` started; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from conformance.build import pins
from conformance.kube.pods import is_ready
from conformance.kube.wait import wait_for, wait_gone
from conformance.providers.base import Cluster
from conformance.providers.local import components
from conformance.providers.local.cleanup import POD_CGROUP_ROOT, mounts_below
from conformance.providers.local.journal import read_sysctl
from conformance.providers.local.provider import CGROUP_NAME, LocalProvider

READY_TIMEOUT = 120
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def _pod(name: str, image: str, command: str, **spec: object) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", command]}
            ],
            **spec,
        },
    }


def _phase_is(*phases: str):
    return lambda pod: pod.status.phase in phases


def _run_to_completion(
    core: client.CoreV1Api, namespace: str, name: str, image: str, command: str, **spec: object
) -> str:
    core.create_namespaced_pod(namespace, _pod(name, image, command, restartPolicy="Never", **spec))
    pod = wait_for(
        core.list_namespaced_pod,
        _phase_is("Succeeded", "Failed"),
        what=f"pod {name} to finish",
        timeout=READY_TIMEOUT,
        describe=lambda p: str(p.status.phase),
        namespace=namespace,
        field_selector=f"metadata.name={name}",
    )
    logs = core.read_namespaced_pod_log(name, namespace)
    assert pod.status.phase == "Succeeded", f"pod {name} failed; logs: {logs}"
    return logs


def test_node_is_ready_with_the_pinned_version_and_simulated_gpus(core: client.CoreV1Api) -> None:
    node = core.read_node(components.NODE_NAME)
    ready = {c.type: c.status for c in node.status.conditions}["Ready"]
    assert ready == "True"
    assert node.status.node_info.kubelet_version == pins.KUBERNETES
    assert node.status.node_info.container_runtime_version == f"containerd://{pins.CONTAINERD.lstrip('v')}"
    assert node.status.allocatable["nvidia.com/gpu"] == "2"
    assert node.metadata.labels["kuberay-conformance.io/simulated-gpu"] == "true"
    # Enough for a Ray head and two small workers.
    assert int(node.status.allocatable["cpu"]) >= 2


def test_kubectl_reports_the_real_version(local_cluster: Cluster) -> None:
    env = {**os.environ, **LocalProvider().env()}
    out = subprocess.run(
        ["kubectl", "version", "-o", "yaml"], env=env, capture_output=True, text=True, check=True
    )
    assert f"gitVersion: {pins.KUBERNETES}" in out.stdout
    assert out.stdout.count(f"gitVersion: {pins.KUBERNETES}") == 2  # client and server


def test_pod_from_a_locally_built_image_runs_and_its_logs_read_back(
    core: client.CoreV1Api, namespace: str, toolbox: str
) -> None:
    token = uuid.uuid4().hex
    logs = _run_to_completion(core, namespace, "hello", toolbox, f"echo {token}")
    assert logs.strip() == token


def _serve(core: client.CoreV1Api, namespace: str, image: str, body: str) -> client.V1Service:
    command = f"mkdir -p /www && echo {body} > /www/index.html && exec httpd -f -p 8080 -h /www"
    core.create_namespaced_pod(namespace, _pod("web", image, command))
    service = core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    wait_for(
        core.list_namespaced_pod,
        is_ready,
        what="pod web to be ready",
        timeout=READY_TIMEOUT,
        namespace=namespace,
        field_selector="metadata.name=web",
    )
    return service


def test_pod_resolves_a_service_name_through_cluster_dns(
    core: client.CoreV1Api, namespace: str, toolbox: str
) -> None:
    service = _serve(core, namespace, toolbox, "dns")
    fqdn = f"web.{namespace}.svc.cluster.local"
    logs = _run_to_completion(core, namespace, "resolver", toolbox, f"cat /etc/resolv.conf; nslookup {fqdn}")
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in logs
    assert "nameserver 10.215.0.10" in logs
    answer = logs.split(f"Name:\t{fqdn}", 1)
    assert len(answer) == 2, f"no answer for {fqdn}: {logs}"
    assert f"Address: {service.spec.cluster_ip}" in answer[1]


def test_clusterip_service_routes_to_its_pod(core: client.CoreV1Api, namespace: str, toolbox: str) -> None:
    body = uuid.uuid4().hex
    service = _serve(core, namespace, toolbox, body)
    logs = _run_to_completion(
        # busybox's static wget crashes in Debian's build; a raw HTTP request through nc does the same.
        core,
        namespace,
        "client",
        toolbox,
        f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {service.spec.cluster_ip} 80",
    )
    assert logs.startswith("HTTP/1.1 200 OK"), logs
    assert logs.strip().splitlines()[-1] == body


def test_in_cluster_config_is_allowed_what_rbac_grants_and_refused_the_rest(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, toolbox: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "lister"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "list-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "lister-lists-pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": namespace}],
            "roleRef": {"kind": "Role", "name": "list-pods", "apiGroup": "rbac.authorization.k8s.io"},
        },
    )
    # No kubeconfig in the pod: kubectl falls back to the in-cluster config (token, CA, service env).
    script = "kubectl get pods -o name; echo rc=$?; kubectl get secrets 2>&1; echo rc=$?"
    logs = _run_to_completion(core, namespace, "lister", toolbox, script, serviceAccountName="lister")
    assert "pod/lister" in logs
    assert "rc=0" in logs
    assert "Forbidden" in logs and 'cannot list resource "secrets"' in logs
    assert "rc=1" in logs


def test_the_default_storage_class_provisions_a_claim_below_the_state_directory(
    local_provider: LocalProvider, core: client.CoreV1Api, api: client.ApiClient, namespace: str, toolbox: str
) -> None:
    """`up` offers local-path-provisioner as the default class: a claim naming no class gets a
    hostPath volume on first use, below the state directory, and it goes with its claim."""
    classes = client.StorageV1Api(api).list_storage_class().items
    default = [c for c in classes if (c.metadata.annotations or {}).get(DEFAULT_CLASS) == "true"]
    assert [(c.metadata.name, c.provisioner) for c in default] == [("local-path", "rancher.io/local-path")]
    assert default[0].volume_binding_mode == "WaitForFirstConsumer"
    assert default[0].reclaim_policy == "Delete"
    claim = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    core.create_namespaced_persistent_volume_claim(namespace, claim)
    token = uuid.uuid4().hex
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    pod = _pod(
        "writer",
        toolbox,
        f"echo {token} > /data/token && cat /data/token",
        restartPolicy="Never",
        volumes=volumes,
    )
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    core.create_namespaced_pod(namespace, pod)
    wait_for(
        core.list_namespaced_pod,
        _phase_is("Succeeded", "Failed"),
        what="pod writer to finish",
        timeout=READY_TIMEOUT,
        describe=lambda p: str(p.status.phase),
        namespace=namespace,
        field_selector="metadata.name=writer",
    )
    assert core.read_namespaced_pod_log("writer", namespace).strip() == token
    pvc = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert (pvc.status.phase, pvc.spec.storage_class_name) == ("Bound", "local-path")
    pv = core.read_persistent_volume(pvc.spec.volume_name)
    assert pv.metadata.annotations["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"
    directory = Path(pv.spec.host_path.path)
    assert directory.parent == local_provider.state.volumes
    assert (directory / "token").read_text().strip() == token
    # reclaimPolicy Delete: the helper pod removes the directory, then the volume goes.
    core.delete_namespaced_pod("writer", namespace, grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_gone(
        core.list_persistent_volume,
        what=f"volume {pv.metadata.name}",
        timeout=READY_TIMEOUT,
        field_selector=f"metadata.name={pv.metadata.name}",
    )
    assert not directory.exists()


def test_kubelet_restarts_a_killed_container(core: client.CoreV1Api, namespace: str, toolbox: str) -> None:
    core.create_namespaced_pod(namespace, _pod("sleeper", toolbox, "exec sleep 3600"))
    pod = wait_for(
        core.list_namespaced_pod,
        _phase_is("Running"),
        what="pod sleeper to run",
        timeout=READY_TIMEOUT,
        namespace=namespace,
        field_selector="metadata.name=sleeper",
    )
    container_id = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    pids = _container_pids(pod.metadata.uid, container_id)
    assert pids, "the container's process was not found in its cgroup"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    restarted = wait_for(
        core.list_namespaced_pod,
        lambda p: (
            p.status.container_statuses[0].restart_count >= 1
            and p.status.container_statuses[0].state.running is not None
        ),
        what="kubelet to restart the killed container",
        timeout=READY_TIMEOUT,
        describe=lambda p: f"restartCount={p.status.container_statuses[0].restart_count}",
        namespace=namespace,
        field_selector="metadata.name=sleeper",
    )
    assert restarted.status.container_statuses[0].restart_count == 1


def _container_pids(pod_uid: str, container_id: str) -> list[int]:
    root = Path("/sys/fs/cgroup/pids", POD_CGROUP_ROOT)
    for procs in root.rglob("cgroup.procs"):
        if procs.parent.name == container_id and f"pod{pod_uid}" in str(procs):
            return [int(p) for p in procs.read_text().split()]
    return []


@pytest.mark.runs_last
def test_down_leaves_no_process_bridge_chain_or_mount(
    local_provider: LocalProvider, local_cluster: Cluster
) -> None:
    records = local_provider.supervisor.records()
    assert records, "the cluster had no recorded processes"
    tunables = {c.target: c.previous for c in local_provider.journal.entries() if c.kind == "sysctl"}
    problems = local_provider.down()
    assert problems == []
    for record in records:
        assert not Path(f"/proc/{record.pid}").exists() or record.start_time != _start_time(record.pid)
    for hierarchy in ("pids", "memory", "cpu"):
        assert not Path("/sys/fs/cgroup", hierarchy, CGROUP_NAME).exists()
        assert not Path("/sys/fs/cgroup", hierarchy, POD_CGROUP_ROOT).exists()
    net = local_provider.net
    assert not Path("/run/netns", net.netns).exists()
    assert not Path("/sys/class/net", net.host_veth).exists()
    assert not Path("/sys/class/net", net.bridge).exists()
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    assert "KUBE-" not in rules and "CNI-" not in rules
    assert mounts_below(local_provider.state.root) == []
    assert not local_provider.state.root.exists()
    for key, previous in tunables.items():
        assert read_sysctl(key) == previous


def _start_time(pid: int) -> int | None:
    from conformance.providers.local.supervisor import process_start_time  # noqa: PLC0415

    return process_start_time(pid)


@pytest.mark.runs_last
def test_sigterm_during_a_first_up_leaves_nothing_behind(local_provider: LocalProvider) -> None:
    local_provider.down()
    root = Path(__file__).resolve().parents[2]
    up = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "cluster", "up"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert up.stdout is not None
    for line in up.stdout:
        if "starting kube-apiserver" in line:  # etcd runs, the network namespace exists
            break
    up.send_signal(signal.SIGTERM)
    output = up.stdout.read()
    assert up.wait(timeout=120) == 2, output
    assert "interrupted" in output
    assert local_provider.supervisor.cgroup_pids() == []
    assert not Path("/run/netns", local_provider.net.netns).exists()
    assert not local_provider.state.root.exists()
