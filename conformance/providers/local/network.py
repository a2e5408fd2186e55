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

NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.conf.all.route_localnet": "1",
}


def netns_path(network: Network) -> Path:
    return Path("/run/netns") / network.netns


def in_node(network: Network, cmd: list[str]) -> list[str]:
    """A command line that runs `cmd` inside the node's network namespace and nowhere else."""
    return ["nsenter", f"--net={netns_path(network)}", "--", *cmd]


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
    ours = [ipaddress.ip_network(c) for c in (network.link_cidr, network.pod_cidr, network.service_cidr)]
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
        for cidr in network.host_routes():
            _ip("route", "add", cidr, "via", network.node_ip, "dev", network.host_veth)
    _apply_node_sysctls(network)


def _apply_node_sysctls(network: Network) -> None:
    for key, value in NODE_SYSCTLS.items():
        cmd = in_node(network, ["sysctl", "-q", "-w", f"{key}={value}"])
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ProvisioningError(
                f"cannot set {key} in the node's network namespace: {done.stderr.strip()}",
                "the kernel needs br_netfilter and IPv4 forwarding built in",
            )
