"""The node's network namespace and its link to the host.

The node's processes run in their own network namespace (entered with `nsenter --net`
only, so they share the host's mounts and /proc as a real node's processes would).
Its sysctls, bridge and iptables chains stay inside it; the host gets one veth end and
routes to the pod and service ranges, all of which vanish with the namespace.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from conformance.errors import ProvisioningError, UsageError

from .journal import Change, HostJournal
from .layout import Network
from .nodes import WorkerNode

NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.conf.all.route_localnet": "1",
}


WORKER_LINK = "eth0"  # a worker node's one link, to the fabric


NETNS_DIR = Path("/run/netns")  # where `ip netns add` keeps its namespaces


def netns_path(network: Network) -> Path:
    return NETNS_DIR / network.netns


def in_node(network: Network, cmd: list[str]) -> list[str]:
    """A command line that runs `cmd` inside the node's network namespace and nowhere else."""
    return in_netns(network.netns, cmd)


def in_netns(netns: str, cmd: list[str]) -> list[str]:
    return ["nsenter", f"--net={NETNS_DIR / netns}", "--", *cmd]


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ProvisioningError(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}", "see `ip` output above")


def _host_routes() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=False
    ).stdout
    nets = []
    for line in out.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "broadcast", "local", "unreachable", "blackhole"):
            continue
        try:
            nets.append(ipaddress.ip_network(first, strict=False))
        except ValueError:
            continue
    return nets


def check_ranges_free(network: Network) -> None:
    """Refuse ranges that overlap the host's own networks: routing them to the node would cut the host off."""
    if netns_path(network).exists():
        return  # ours, from an earlier `up`
    ranges = (network.link_cidr, network.pod_cidr, network.service_cidr, network.fabric_cidr)
    ours = [ipaddress.ip_network(c) for c in ranges]
    for theirs in _host_routes():
        for net in ours:
            if net.overlaps(theirs):
                raise UsageError(
                    f"address range {net} is already routed on this host ({theirs}); the local "
                    f"provider needs {', '.join(str(n) for n in ours)} free",
                    f"remove the route to {theirs} (`ip route`) or run on a host where those ranges are free",
                )


def ensure_node_network(network: Network, journal: HostJournal) -> None:
    if not netns_path(network).exists():
        journal.record(Change("netns", network.netns))
        _ip("netns", "add", network.netns)
    if not Path("/sys/class/net", network.host_veth).exists():
        journal.record(Change("link", network.host_veth))
        _ip("link", "add", network.host_veth, "type", "veth", "peer", "name", network.node_veth)
        _ip("link", "set", network.node_veth, "netns", network.netns)
        _ip("addr", "add", f"{network.host_ip}/{network.prefix_len}", "dev", network.host_veth)
        _ip("link", "set", network.host_veth, "up")
        _ip(
            "addr",
            "add",
            f"{network.node_ip}/{network.prefix_len}",
            "dev",
            network.node_veth,
            netns=network.netns,
        )
        _ip("link", "set", network.node_veth, "up", netns=network.netns)
        _ip("link", "set", "lo", "up", netns=network.netns)
        # Programs that look for "the" interface (kube-apiserver, Ray) find it by the default
        # route. The host does not forward (ip_forward stays 0), so nothing leaves the machine.
        _ip("route", "add", "default", "via", network.host_ip, netns=network.netns)
    # `replace`: a cluster made before a range was added gets its route on the next `up`. The
    # routes go with the veth, so they need no journal entry.
    for cidr in network.host_routes():
        _ip("route", "replace", cidr, "via", network.node_ip, "dev", network.host_veth)
    _apply_node_sysctls(network.netns)


def ensure_worker_network(network: Network, node: WorkerNode, journal: HostJournal) -> None:
    """The worker node's namespace, on the fabric bridge in the control-plane node's namespace.

    Everything it sends outside its own pods goes to the control-plane node, which routes to the
    other nodes' pod ranges and, for the host's sake, back to the host."""
    _ensure_fabric(network)
    if not (NETNS_DIR / node.netns).exists():
        journal.record(Change("netns", node.netns))
        _ip("netns", "add", node.netns)
    if not _link_exists(network.netns, node.fabric_veth):
        # Made in the control-plane namespace with its peer moved straight into the node's.
        _ip("link", "add", node.fabric_veth, "type", "veth", "peer", "name", WORKER_LINK, "netns", node.netns,
            netns=network.netns)  # fmt: skip
        _ip("link", "set", node.fabric_veth, "master", network.fabric_bridge, "up", netns=network.netns)
        address = f"{node.ip(network)}/{network.fabric_prefix_len}"
        _ip("addr", "add", address, "dev", WORKER_LINK, netns=node.netns)
        _ip("link", "set", WORKER_LINK, "up", netns=node.netns)
        _ip("link", "set", "lo", "up", netns=node.netns)
        _ip("route", "add", "default", "via", network.fabric_gateway, netns=node.netns)
    _ip("route", "replace", node.pod_cidr(network), "via", node.ip(network), netns=network.netns)
    _apply_node_sysctls(node.netns)


def link_up(network: Network, node: WorkerNode, up: bool) -> None:
    """Cut the worker node off the fabric (its processes keep running) or join it again."""
    _ip("link", "set", node.fabric_veth, "up" if up else "down", netns=network.netns)


def _ensure_fabric(network: Network) -> None:
    if _link_exists(network.netns, network.fabric_bridge):
        return
    _ip("link", "add", network.fabric_bridge, "type", "bridge", netns=network.netns)
    _ip("addr", "add", f"{network.fabric_gateway}/{network.fabric_prefix_len}", "dev", network.fabric_bridge,
        netns=network.netns)  # fmt: skip
    _ip("link", "set", network.fabric_bridge, "up", netns=network.netns)


def _link_exists(netns: str, link: str) -> bool:
    done = subprocess.run(["ip", "-n", netns, "link", "show", link], capture_output=True, check=False)
    return done.returncode == 0


def _apply_node_sysctls(netns: str) -> None:
    for key, value in NODE_SYSCTLS.items():
        cmd = in_netns(netns, ["sysctl", "-q", "-w", f"{key}={value}"])
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ProvisioningError(
                f"cannot set {key} in the node's network namespace: {done.stderr.strip()}",
                "the kernel needs br_netfilter and IPv4 forwarding built in",
            )
