"""The local cluster's worker nodes: node groups like the EKS module's, each node a network namespace.

The control-plane node (layout.Network) is the cluster as it always was. Worker nodes are added by
group: `cpu` nodes carry nothing special; `gpu` nodes advertise the simulated GPUs and carry the
taint and labels the EKS module's GPU node group has (infra/terraform/eks), so GPU checks meet the
same scheduling rules here as there. With worker nodes, the control-plane node advertises no GPU.
The groups come from the profile (`local: {nodes: {cpu: 1, gpu: 1}}`, the default profile's), or
from KRC_LOCAL_NODES, which overrides it for one command.

Each worker node is one network namespace with its own containerd, kubelet and kube-proxy, joined
to the control-plane node's namespace by a veth pair on a bridge there (the fabric). Its address
is on the fabric, its pods get the next /24 of the pod range, and the control-plane namespace
routes between them; the host reaches the fabric through the control-plane node, as it reaches
the pod range.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import UsageError
from conformance.profiles.schema import MAX_NODES_PER_GROUP

from .layout import Network, StateLayout

GROUPS = ("cpu", "gpu")
NODES_ENV = "KRC_LOCAL_NODES"
ONE_NODE = "none"  # the KRC_LOCAL_NODES value of a cluster without worker nodes
GPU_TAINT = ("nvidia.com/gpu", "present", "NoSchedule")  # infra/terraform/eks/main.tf gpu_taint
GPU_LABELS = {"nvidia.com/gpu.present": "true", "kuberay-conformance.io/gpu": "true"}  # gpu_node_labels
GROUP_LABEL = "kuberay-conformance.io/node-group"
_SPEC = re.compile(r"^(cpu|gpu)=(\d+)$")


@dataclass(frozen=True)
class WorkerNode:
    group: str
    index: int  # 1-based within its group
    ordinal: int  # 1-based among all worker nodes: its addresses and pod range

    @property
    def name(self) -> str:
        return f"krc-{self.group}-{self.index}"

    @property
    def netns(self) -> str:
        return self.name

    @property
    def fabric_veth(self) -> str:
        """Its veth end on the fabric bridge, in the control-plane node's namespace (15 chars at most)."""
        return f"fab-{self.group}-{self.index}"

    @property
    def gpu(self) -> bool:
        return self.group == "gpu"

    def ip(self, net: Network) -> str:
        return str(ipaddress.ip_network(net.fabric_cidr)[10 + self.ordinal])

    def pod_cidr(self, net: Network) -> str:
        subnets = ipaddress.ip_network(net.pod_cidr).subnets(new_prefix=24)
        return str(next(s for i, s in enumerate(subnets) if i == self.ordinal))

    def state(self, cluster: StateLayout) -> StateLayout:
        """Its own containerd, kubelet and CNI directories; PKI, logs and PIDs stay the cluster's."""
        return StateLayout(cluster.root / "nodes" / self.name)

    def labels(self) -> dict[str, str]:
        return {GROUP_LABEL: self.group, **(GPU_LABELS if self.gpu else {})}

    def taints(self) -> list[dict[str, str]]:
        key, value, effect = GPU_TAINT
        return [{"key": key, "value": value, "effect": effect}] if self.gpu else []

    def component(self, program: str) -> str:
        """The supervisor's name for one of its programs."""
        return f"{program}@{self.name}"


def parse(spec: str) -> tuple[WorkerNode, ...]:
    """Worker nodes from `cpu=N,gpu=M` (either may be left out; `none`: the one-node cluster)."""
    counts: dict[str, int] = {}
    parts = [] if spec.strip() == ONE_NODE else [p.strip() for p in spec.split(",")]
    for part in parts:
        found = _SPEC.match(part)
        if not found or found.group(1) in counts or int(found.group(2)) > MAX_NODES_PER_GROUP:
            raise UsageError(
                f"{NODES_ENV}={spec!r}: cannot read {part!r}",
                f"give node groups as cpu=N,gpu=M (each at most {MAX_NODES_PER_GROUP}), e.g. cpu=1,gpu=1, "
                f"or {ONE_NODE} for one node",
            )
        counts[found.group(1)] = int(found.group(2))
    return from_counts(counts)


def from_counts(counts: Mapping[str, int]) -> tuple[WorkerNode, ...]:
    """Worker nodes from a count per group (a profile's `local.nodes`), in a fixed group order."""
    workers, ordinal = [], 0
    for group in GROUPS:
        for index in range(1, counts.get(group, 0) + 1):
            ordinal += 1
            workers.append(WorkerNode(group, index, ordinal))
    return tuple(workers)


def asked(profile_nodes: Mapping[str, int]) -> tuple[WorkerNode, ...]:
    """The worker nodes a new cluster gets: KRC_LOCAL_NODES when it is set (`none`: one node), so a
    user can change the topology for one command, else the profile's `local.nodes`."""
    spec = os.environ.get(NODES_ENV)
    return parse(spec) if spec is not None else from_counts(profile_nodes)


def recorded(path: Path) -> str:
    """The topology a cluster was made with (kept in its state), so that `status` and `down` find
    every node whatever the environment of the later command says. An empty record is a one-node
    cluster's, as versions before `none` wrote it."""
    return (path.read_text().strip() or ONE_NODE) if path.exists() else ONE_NODE


def describe(nodes: tuple[WorkerNode, ...]) -> str:
    groups = {g: sum(1 for n in nodes if n.group == g) for g in GROUPS}
    return ",".join(f"{g}={c}" for g, c in groups.items() if c) or ONE_NODE
