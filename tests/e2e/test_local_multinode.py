"""The local provider with worker nodes (the default profile's cpu=1,gpu=1): every node Ready with its
group's taints and labels, pods placed by node group and reaching each other across nodes, a node
stopped and started again (`cluster node`) rejoins, and `down` leaves nothing of any node.

They run last (after the one-node cluster was taken down) and end with the cluster down."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from conformance import cluster_lock
from conformance.build import small_images
from conformance.errors import EXIT_ENVIRONMENT, EXIT_USAGE
from conformance.kube.nodes import is_node_ready
from conformance.kube.wait import wait_for
from conformance.providers.local import nodes
from conformance.providers.local.cleanup import POD_CGROUP_ROOT, mounts_below
from conformance.providers.local.provider import CGROUP_NAME, LocalProvider, LocalSettings
from conformance.report.summary import now

pytestmark = pytest.mark.runs_last

TOPOLOGY = "cpu=1,gpu=1"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def multinode(local_provider: LocalProvider) -> Iterator[LocalProvider]:
    local_provider.down()  # the one-node cluster of the other tests, if still up
    provider = LocalProvider(settings=LocalSettings(worker_nodes=nodes.parse(TOPOLOGY)))
    provider.up()
    yield provider
    provider.down()


@pytest.fixture(scope="module")
def core(multinode: LocalProvider) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(multinode.state.admin_kubeconfig)))


@pytest.fixture(scope="module")
def toolbox(multinode: LocalProvider) -> str:
    archive = small_images.toolbox_image(multinode.cache, multinode.ensure_binaries().kubernetes / "kubectl")
    multinode.load_image(archive)  # into every node's containerd
    return archive.ref


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"krc-test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_every_node_is_ready_with_its_groups_gpus_taints_and_labels(core: client.CoreV1Api) -> None:
    found = {n.metadata.name: n for n in core.list_node().items}
    assert sorted(found) == ["krc-cpu-1", "krc-gpu-1", "krc-node"]
    for name, node in found.items():
        assert is_node_ready(node), name
    gpus = {name: (n.status.allocatable or {}).get("nvidia.com/gpu", "0") for name, n in found.items()}
    assert gpus == {"krc-node": "0", "krc-cpu-1": "0", "krc-gpu-1": "2"}
    taints = {name: [(t.key, t.value, t.effect) for t in n.spec.taints or []] for name, n in found.items()}
    assert taints == {"krc-node": [], "krc-cpu-1": [], "krc-gpu-1": [nodes.GPU_TAINT]}
    labels = found["krc-gpu-1"].metadata.labels
    assert labels[nodes.GROUP_LABEL] == "gpu" and labels["nvidia.com/gpu.present"] == "true"
    assert found["krc-cpu-1"].metadata.labels[nodes.GROUP_LABEL] == "cpu"


def _pod(name: str, image: str, node_group: str, command: list[str], tolerate_gpu: bool = False) -> dict:
    spec = {
        "nodeSelector": {nodes.GROUP_LABEL: node_group},
        "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if tolerate_gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def _wait_phase(core: client.CoreV1Api, namespace: str, name: str, phases: tuple[str, ...]) -> client.V1Pod:
    return wait_for(
        core.list_namespaced_pod,
        lambda p: p.status.phase in phases,
        what=f"pod {name} {' or '.join(phases)}",
        timeout=120,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
    )


def test_a_service_on_the_cpu_node_answers_a_pod_on_the_gpu_node_by_its_dns_name(
    core: client.CoreV1Api, namespace: str, toolbox: str
) -> None:
    serve = "echo across-nodes > /tmp/index.html && httpd -f -p 8080 -h /tmp"
    core.create_namespaced_pod(namespace, _pod("web", toolbox, "cpu", ["sh", "-c", serve]))
    ports = [{"port": 80, "targetPort": 8080}]
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": ports}}
    )
    placed = _wait_phase(core, namespace, "web", ("Running",))
    assert placed.spec.node_name == "krc-cpu-1"
    url = f"http://web.{namespace}.svc.cluster.local/index.html"
    # Polls (20 s at most): kube-proxy on the GPU node programs the new Service a moment after it exists.
    ask = f"for i in 1 2 3 4 5 6 7 8 9 10; do wget -qO- {url} && exit 0; sleep 2; done; exit 1"
    core.create_namespaced_pod(namespace, _pod("ask", toolbox, "gpu", ["sh", "-c", ask], tolerate_gpu=True))
    done = _wait_phase(core, namespace, "ask", ("Succeeded", "Failed"))
    log = core.read_namespaced_pod_log("ask", namespace)
    assert done.spec.node_name == "krc-gpu-1"
    assert done.status.phase == "Succeeded" and "across-nodes" in log, log


def test_a_pod_without_the_gpu_toleration_never_lands_on_the_gpu_node(
    core: client.CoreV1Api, namespace: str, toolbox: str
) -> None:
    core.create_namespaced_pod(namespace, _pod("no-toleration", toolbox, "gpu", ["true"]))
    pod = wait_for(
        core.list_namespaced_pod,
        lambda p: any(c.reason == "Unschedulable" for c in p.status.conditions or []),
        what="pod no-toleration reported Unschedulable",
        timeout=60,
        namespace=namespace,
        field_selector="metadata.name=no-toleration",
    )
    assert pod.spec.node_name is None


def _cluster_node(*args: str) -> subprocess.CompletedProcess[str]:
    """`kuberay-conformance cluster node ARGS`, as a user types it."""
    program = Path(sys.executable).with_name("kuberay-conformance")
    return subprocess.run([str(program), "cluster", "node", *args], capture_output=True, text=True,
                          check=False, timeout=300)  # fmt: skip


def test_cluster_node_refuses_while_a_run_holds_the_cluster_and_names_the_worker_nodes(
    multinode: LocalProvider, core: client.CoreV1Api
) -> None:
    api = config.new_client_from_config(str(multinode.state.admin_kubeconfig))
    holder = cluster_lock.claim(api, "krc-test-holder", now())
    try:
        held = _cluster_node("stop", "krc-cpu-1")
    finally:
        holder.release()
    assert held.returncode == EXIT_ENVIRONMENT, held
    assert "run krc-test-holder" in held.stderr and "holds the cluster" in held.stderr, held.stderr
    assert is_node_ready(core.read_node("krc-cpu-1")), "a refused `cluster node stop` stopped the node"
    unknown = _cluster_node("cut", "krc-node")  # the control-plane node is no worker node
    assert unknown.returncode == EXIT_USAGE and "krc-cpu-1" in unknown.stderr, unknown
    assert len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr


def test_a_stopped_worker_node_goes_not_ready_and_rejoins_with_its_gpus(
    multinode: LocalProvider, core: client.CoreV1Api
) -> None:
    stopped = _cluster_node("stop", "krc-gpu-1")
    assert stopped.returncode == 0, stopped.stderr
    assert not [r for r in multinode.supervisor.records() if r.name.endswith("@krc-gpu-1")]
    # Kubernetes marks it after node-monitor-grace-period (50 s).
    wait_for(core.list_node, lambda n: not is_node_ready(n), what="krc-gpu-1 NotReady", timeout=120,
             field_selector="metadata.name=krc-gpu-1")  # fmt: skip
    started = _cluster_node("start", "krc-gpu-1")
    assert started.returncode == 0 and "started again and Ready" in started.stdout, started.stderr

    def rejoined(node: client.V1Node) -> bool:
        # The node controller lifts its unreachable taint a moment after the node is Ready again.
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        return (
            is_node_ready(node)
            and (node.status.allocatable or {}).get("nvidia.com/gpu") == "2"
            and (taints == [nodes.GPU_TAINT])
        )

    wait_for(core.list_node, rejoined, what="krc-gpu-1 Ready with its GPUs and its own taint only",
             timeout=120, field_selector="metadata.name=krc-gpu-1")  # fmt: skip


def test_down_leaves_nothing_of_any_node(multinode: LocalProvider) -> None:
    workers = multinode.workers
    assert multinode.down() == []
    for name in ["krc-node", *(n.netns for n in workers)]:
        assert not Path("/run/netns", name).exists(), name
    for hierarchy in ("pids", "memory", "cpu"):
        assert not Path("/sys/fs/cgroup", hierarchy, CGROUP_NAME).exists()
        assert not Path("/sys/fs/cgroup", hierarchy, POD_CGROUP_ROOT).exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert "krc" not in links and "fab-" not in links
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert multinode.net.fabric_cidr not in routes
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    assert "KUBE-" not in rules and "CNI-" not in rules
    assert mounts_below(multinode.state.root) == []
    assert not multinode.state.root.exists()
