"""Where the local provider keeps its cluster state, and the cluster's addresses.

The state directory belongs to one cluster: `down` unmounts everything below it and removes it.
The build cache, which outlives clusters and serves every provider, is conformance/build/cache.py.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = Path("/var/lib/kuberay-conformance/local")


@dataclass(frozen=True)
class Network:
    """The node lives in its own network namespace, joined to the host by one veth pair.

    Every iptables rule, bridge and sysctl the cluster needs is made inside that
    namespace, so deleting it takes them all away. The host only gains the veth end and
    routes to the pod and service ranges through it.
    """

    netns: str = "krc-node"
    host_veth: str = "krc-host"
    node_veth: str = "krc-node"
    link_cidr: str = "10.213.0.0/30"
    pod_cidr: str = "10.214.0.0/16"
    service_cidr: str = "10.215.0.0/16"
    bridge: str = "krc0"
    # Worker nodes (nodes.py) join the control-plane node's namespace on this bridge and range.
    fabric_cidr: str = "10.216.0.0/24"
    fabric_bridge: str = "krcfab0"

    @property
    def host_ip(self) -> str:
        return str(ipaddress.ip_network(self.link_cidr)[1])

    @property
    def node_ip(self) -> str:
        return str(ipaddress.ip_network(self.link_cidr)[2])

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.link_cidr).prefixlen

    @property
    def node_pod_cidr(self) -> str:
        # The control-plane node gets the first /24 of the pod range; worker nodes the next ones.
        return str(next(ipaddress.ip_network(self.pod_cidr).subnets(new_prefix=24)))

    @property
    def fabric_gateway(self) -> str:
        """The control-plane node's address on the fabric: the worker nodes' way to everything."""
        return str(ipaddress.ip_network(self.fabric_cidr)[1])

    @property
    def fabric_prefix_len(self) -> int:
        return ipaddress.ip_network(self.fabric_cidr).prefixlen

    @property
    def kubernetes_service_ip(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr)[1])

    @property
    def dns_service_ip(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr)[10])

    def host_routes(self) -> list[str]:
        return [self.pod_cidr, self.service_cidr, self.fabric_cidr]


@dataclass(frozen=True)
class StateLayout:
    root: Path

    @classmethod
    def default(cls) -> StateLayout:
        return cls(Path(os.environ.get("KRC_STATE_DIR", DEFAULT_STATE_DIR)))

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run" / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_state(self) -> Path:
        return self.root / "cni" / "state"

    @property
    def volumes(self) -> Path:
        """Where the default StorageClass (local-path-provisioner) makes each volume's directory."""
        return self.root / "volumes"

    @property
    def journal(self) -> Path:
        """Host changes made by `up`, undone in reverse order by `down`."""
        return self.root / "host-changes.json"

    @property
    def topology(self) -> Path:
        """The worker node groups the cluster was made with (nodes.py), e.g. `cpu=1,gpu=1`."""
        return self.root / "worker-nodes"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def kubeconfig_for(self, component: str) -> Path:
        return self.config / f"{component}.kubeconfig"

    def log_for(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def pid_for(self, component: str) -> Path:
        return self.pids / f"{component}.json"
