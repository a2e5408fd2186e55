"""The local provider's worker nodes: how a topology is read, and what each node is given."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import profiles
from conformance.errors import EXIT_USAGE, UsageError
from conformance.profiles import ProfileError
from conformance.providers.local import components, nodes
from conformance.providers.local.cgroup_layout import CgroupMode
from conformance.providers.local.layout import Network, StateLayout
from conformance.providers.local.provider import LocalProvider, LocalSettings


def test_groups_are_read_in_a_fixed_order_with_addresses_of_their_own() -> None:
    workers = nodes.parse("gpu=1, cpu=2")
    assert [n.name for n in workers] == ["krc-cpu-1", "krc-cpu-2", "krc-gpu-1"]
    net = Network()
    ips = [n.ip(net) for n in workers]
    pods = [n.pod_cidr(net) for n in workers]
    assert len(set(ips)) == 3 and net.fabric_gateway not in ips
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(net.fabric_cidr) for ip in ips)
    # Every node's pods get a /24 of their own, none the control-plane node's.
    assert len({*pods, net.node_pod_cidr}) == 4
    assert nodes.describe(workers) == "cpu=2,gpu=1"
    assert all(len(n.fabric_veth) <= 15 for n in workers)  # the kernel's limit on link names


@pytest.mark.parametrize("spec", ["", "cpu", "cpu=one", "tpu=1", "cpu=1,cpu=2", "gpu=9"])
def test_a_topology_that_cannot_be_read_is_refused_with_the_form_to_use(spec: str) -> None:
    with pytest.raises(UsageError) as caught:
        nodes.parse(spec)
    assert nodes.NODES_ENV in str(caught.value) and "cpu=N,gpu=M" in caught.value.fix


def test_no_worker_nodes_is_the_one_node_cluster_and_spelled_none(tmp_path: Path) -> None:
    assert nodes.parse("none") == () and nodes.describe(()) == "none"
    assert nodes.parse(nodes.describe(nodes.parse("cpu=0"))) == ()
    record = tmp_path / "topology"
    record.write_text("")  # a one-node cluster's record, as earlier versions wrote it
    assert nodes.recorded(record) == "none" and nodes.recorded(tmp_path / "absent") == "none"


def test_only_gpu_nodes_carry_the_eks_gpu_taint_and_labels() -> None:
    cpu, gpu = nodes.parse("cpu=1,gpu=1")
    assert cpu.taints() == [] and nodes.GROUP_LABEL in cpu.labels()
    assert gpu.taints() == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert gpu.labels()["kuberay-conformance.io/gpu"] == "true"


def test_a_worker_kubelet_has_its_own_runtime_cgroup_root_and_pod_logs(tmp_path: Path) -> None:
    state, net = StateLayout(tmp_path), Network()
    (gpu,) = nodes.parse("gpu=1")
    config = components.worker_kubelet_config(state, net, CgroupMode.HYBRID, gpu)
    control = components.kubelet_config(state, net, CgroupMode.HYBRID)
    assert (
        config["cgroupRoot"].startswith(control["cgroupRoot"] + "/")
        and config["cgroupRoot"] != control["cgroupRoot"]
    )
    assert config["containerRuntimeEndpoint"] != control["containerRuntimeEndpoint"]
    assert config["podLogsDir"].startswith(str(tmp_path))
    assert config["registerWithTaints"] == gpu.taints()
    names = [
        c.name for c in components.worker_components(state, net, components.Binaries(*[tmp_path] * 4), gpu)
    ]
    assert names == ["containerd@krc-gpu-1", "kubelet@krc-gpu-1", "kube-proxy@krc-gpu-1"]


def test_up_refuses_another_topology_than_the_cluster_was_made_with(tmp_path: Path) -> None:
    state = StateLayout(tmp_path)
    state.topology.write_text("cpu=1,gpu=1")
    made = LocalProvider(state=state, settings=LocalSettings(worker_nodes=nodes.parse("cpu=1,gpu=1")))
    made._check_topology()  # the same groups: nothing to say
    assert [n.name for n in made.workers] == ["krc-cpu-1", "krc-gpu-1"]
    other = LocalProvider(state=state, settings=LocalSettings())
    with pytest.raises(UsageError) as caught:
        other._check_topology()
    assert "cpu=1,gpu=1" in str(caught.value) and "cluster down" in caught.value.fix
    # `status` and `down` go by what the cluster was made with, whatever the settings say now.
    assert [n.name for n in other.workers] == ["krc-cpu-1", "krc-gpu-1"]


def test_none_is_the_one_node_cluster_and_the_environment_overrides_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(nodes.NODES_ENV, raising=False)
    assert nodes.describe(nodes.asked({"cpu": 1, "gpu": 1})) == "cpu=1,gpu=1"
    assert nodes.asked({}) == ()
    monkeypatch.setenv(nodes.NODES_ENV, "none")
    assert nodes.asked({"cpu": 1, "gpu": 1}) == ()
    monkeypatch.setenv(nodes.NODES_ENV, "gpu=2")
    assert nodes.describe(nodes.asked({"cpu": 1, "gpu": 1})) == "gpu=2"
    # The same nodes, whichever way they were asked for: a kept cluster is found again.
    assert nodes.from_counts({"gpu": 1, "cpu": 1}) == nodes.parse("cpu=1,gpu=1")


def test_the_default_profile_asks_for_a_cpu_and_a_gpu_worker_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nodes.NODES_ENV, raising=False)
    local_nodes = profiles.load("default").local_nodes
    assert local_nodes == {"cpu": 1, "gpu": 1}
    settings = LocalSettings.from_env(local_nodes)
    assert [n.name for n in settings.worker_nodes] == ["krc-cpu-1", "krc-gpu-1"]
    # Without a profile (status, down, attach-only tools): no worker nodes asked for.
    assert LocalSettings.from_env().worker_nodes == ()


@pytest.mark.parametrize("nodes_yaml", ["{cpu: 5}", "{tpu: 1}", "{gpu: '1'}"])
def test_a_profile_with_bad_local_nodes_is_refused_naming_the_key(nodes_yaml: str) -> None:
    text = (
        (profiles.BUNDLED / "default.yaml")
        .read_text()
        .replace("nodes: {cpu: 1, gpu: 1}", f"nodes: {nodes_yaml}")
    )
    with pytest.raises(ProfileError) as caught:
        profiles.parse(text, Path("bad.yaml"))
    assert "local.nodes" in str(caught.value)


def test_cluster_up_refuses_a_bad_profile_before_making_anything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("kuberay-conformance")), "cluster", "up", "--profile", "nope"],
        capture_output=True, text=True, check=False, timeout=60,
        env={**os.environ, "KRC_STATE_DIR": str(state)},
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "unknown profile 'nope'" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not state.exists()
