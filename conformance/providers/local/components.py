"""The node's programs: their configuration files, command lines and health endpoints.

Settings follow what a one-node cluster on a cgroup v1 VM needs (see shared/design.md):
cgroupfs everywhere, kubelet told to accept cgroup v1 and to never collect images (they
cannot be pulled again), and CoreDNS with no upstream so that nothing leaves the host.
On a cgroup v2 (unified) host kubelet needs no v1 override; everything else is the same:
kubelet and runc find the hierarchy's version themselves, and runc's cgroupfs driver
(`SystemdCgroup = false`) serves both, so containerd's configuration does not change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from conformance.build.image_cache import image_ref
from conformance.build.small_images import PAUSE_VERSION

from .cgroup_layout import CgroupMode
from .cleanup import POD_CGROUP_ROOT
from .layout import Network, StateLayout
from .nodes import WorkerNode

NODE_NAME = "krc-node"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = image_ref("pause", PAUSE_VERSION)
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    # An HTTP(S) URL answering 200 when healthy, or a unix socket that must accept connections.
    health_url: str = ""
    health_socket: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    netns: str = ""  # the network namespace it runs in; empty: the control-plane node's


@dataclass(frozen=True)
class Binaries:
    kubernetes: Path
    etcd: Path
    containerd: Path
    coredns: Path

    def path_env(self) -> str:
        return ":".join(str(p) for p in (self.kubernetes, self.containerd, self.etcd, self.coredns))


def _pki(state: StateLayout, name: str) -> str:
    return str(state.pki / name)


def etcd(state: StateLayout, net: Network, bins: Binaries) -> Component:
    client = f"http://{net.node_ip}:2379"
    peer = "http://127.0.0.1:2380"
    return Component(
        "etcd",
        [
            str(bins.etcd / "etcd"),
            "--name=krc",
            f"--data-dir={state.etcd_data}",
            f"--listen-client-urls={client},http://127.0.0.1:2379",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=krc={peer}",
            f"--listen-metrics-urls=http://{net.node_ip}:2381",
            "--log-level=warn",
            # A test cluster: a smaller backend and fewer snapshots keep memory down.
            "--quota-backend-bytes=2147483648",
            "--snapshot-count=10000",
        ],
        health_url=f"http://{net.node_ip}:2381/health",
    )


def apiserver(state: StateLayout, net: Network, bins: Binaries) -> Component:
    return Component(
        "kube-apiserver",
        [
            str(bins.kubernetes / "kube-apiserver"),
            f"--advertise-address={net.node_ip}",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            "--etcd-servers=http://127.0.0.1:2379",
            f"--service-cluster-ip-range={net.service_cidr}",
            f"--client-ca-file={_pki(state, 'ca.crt')}",
            f"--tls-cert-file={_pki(state, 'kube-apiserver.crt')}",
            f"--tls-private-key-file={_pki(state, 'kube-apiserver.key')}",
            f"--kubelet-client-certificate={_pki(state, 'kube-apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={_pki(state, 'kube-apiserver-kubelet-client.key')}",
            f"--kubelet-certificate-authority={_pki(state, 'ca.crt')}",
            # Reach the kubelet by its IP: the node's name is in no DNS, and the host's resolvers
            # must never be asked about cluster names.
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            f"--service-account-key-file={_pki(state, 'service-account.pub')}",
            f"--service-account-signing-key-file={_pki(state, 'service-account.key')}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ],
        health_url=f"https://{net.node_ip}:6443/readyz",
    )


def controller_manager(state: StateLayout, net: Network, bins: Binaries) -> Component:
    kubeconfig = state.kubeconfig_for("kube-controller-manager")
    return Component(
        "kube-controller-manager",
        [
            str(bins.kubernetes / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--cluster-signing-cert-file={_pki(state, 'ca.crt')}",
            f"--cluster-signing-key-file={_pki(state, 'ca.key')}",
            f"--root-ca-file={_pki(state, 'ca.crt')}",
            f"--service-account-private-key-file={_pki(state, 'service-account.key')}",
            "--use-service-account-credentials=true",
            "--allocate-node-cidrs=true",
            f"--cluster-cidr={net.pod_cidr}",
            "--node-cidr-mask-size=24",
            f"--service-cluster-ip-range={net.service_cidr}",
            "--leader-elect=false",
            "--v=1",
        ],
        health_url=f"https://{net.node_ip}:10257/healthz",
    )


def scheduler(state: StateLayout, net: Network, bins: Binaries) -> Component:
    kubeconfig = state.kubeconfig_for("kube-scheduler")
    return Component(
        "kube-scheduler",
        [
            str(bins.kubernetes / "kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--v=1",
        ],
        health_url=f"https://{net.node_ip}:10259/healthz",
    )


def containerd_config(state: StateLayout) -> str:
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = "{state.containerd_root}"
state = "{state.containerd_state}"

[grpc]
  address = "{state.containerd_socket}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  # Pod network namespaces live below the state directory, so `down` finds every one.
  netns_mounts_under_state_dir = true
  # Sandboxes without CAP_SYS_RESOURCE cannot lower oom_score_adj (kubelet asks -998 for
  # pause containers): clamp it to containerd's own instead of failing every pod.
  restrict_oom_score_adj = true
  [{runtime}.cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{state.cni_conf}"
  [{runtime}.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [{runtime}.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = "{RUNC}"
"""


def cni_config(state: StateLayout, net: Network, subnet: str = "") -> str:
    """The bridge plugin on the node's own /24 (`subnet`; the control-plane node's by default)."""
    bridge = {
        "type": "bridge",
        "bridge": net.bridge,
        "isGateway": True,
        # Masquerade only traffic leaving the pod range; pod-to-pod keeps its source address.
        "ipMasq": True,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet or net.node_pod_cidr}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(state.cni_state),
        },
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    return json.dumps({"cniVersion": "1.0.0", "name": "krc", "plugins": [bridge, portmap]}, indent=2)


def containerd(state: StateLayout, bins: Binaries) -> Component:
    return Component(
        "containerd",
        [str(bins.containerd / "containerd"), f"--config={state.config / 'containerd.toml'}"],
        health_socket=state.containerd_socket,
        # containerd finds its shim on PATH.
        env={"PATH": f"{bins.containerd}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def kubelet_config(state: StateLayout, net: Network, cgroups: CgroupMode) -> dict:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": _pki(state, "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        # Pods get cgroups below a root of ours, so `down` can find and remove every one.
        "cgroupRoot": f"/{POD_CGROUP_ROOT}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [net.dns_service_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        "containerRuntimeEndpoint": f"unix://{state.containerd_socket}",
        # Images cannot be pulled again, so they must never be collected.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "tlsCertFile": _pki(state, "kubelet-serving.crt"),
        "tlsPrivateKeyFile": _pki(state, "kubelet-serving.key"),
        "healthzBindAddress": net.node_ip,
        "healthzPort": 10248,
        "resolvConf": str(state.config / "resolv.conf"),
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "maxPods": 110,
        "nodeStatusReportFrequency": "10s",
    }
    if cgroups is CgroupMode.UNIFIED:
        # kubelet 1.35+ refuses v1 (hybrid included) unless told otherwise; v2 needs no override.
        del config["failCgroupV1"]
    return config


def kubelet(state: StateLayout, net: Network, bins: Binaries) -> Component:
    return Component(
        "kubelet",
        [
            str(bins.kubernetes / "kubelet"),
            f"--config={state.config / 'kubelet.yaml'}",
            f"--kubeconfig={state.kubeconfig_for('kubelet')}",
            f"--root-dir={state.kubelet_root}",
            f"--node-ip={net.node_ip}",
            f"--hostname-override={NODE_NAME}",
            # Lowering our own OOM score needs CAP_SYS_RESOURCE, which a sandboxed root may lack.
            "--oom-score-adj=0",
            "--node-labels=kuberay-conformance.io/local-node=true",
            "--v=1",
        ],
        health_url=f"http://{net.node_ip}:10248/healthz",
    )


def kube_proxy_config(state: StateLayout, net: Network) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(state.kubeconfig_for("kube-proxy"))},
        "mode": "iptables",
        "clusterCIDR": net.pod_cidr,
        "hostnameOverride": NODE_NAME,
        "nodePortAddresses": ["primary"],
        "healthzBindAddress": f"{net.node_ip}:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # Conntrack limits are machine-wide: leave the host's as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def kube_proxy(state: StateLayout, net: Network, bins: Binaries) -> Component:
    return Component(
        "kube-proxy",
        [str(bins.kubernetes / "kube-proxy"), f"--config={state.config / 'kube-proxy.yaml'}", "--v=1"],
        health_url=f"http://{net.node_ip}:10256/healthz",
    )


def corefile(state: StateLayout, net: Network) -> str:
    # No `forward`: names outside the cluster get an answer from nobody, and no query leaves the host.
    return f""".:53 {{
    bind {net.node_ip}
    errors
    health {net.node_ip}:8080
    ready {net.node_ip}:8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {state.kubeconfig_for("coredns")}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
}}
"""


def coredns(state: StateLayout, net: Network, bins: Binaries) -> Component:
    return Component(
        "coredns",
        [str(bins.coredns / "coredns"), f"-conf={state.config / 'Corefile'}"],
        health_url=f"http://{net.node_ip}:8181/ready",
    )


def _write_if_changed(path: Path, text: str) -> None:
    # kube-proxy exits when its config file changes under it; a repeated `up` must not touch it.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_configs(state: StateLayout, net: Network, cgroups: CgroupMode) -> None:
    state.config.mkdir(parents=True, exist_ok=True)
    state.cni_conf.mkdir(parents=True, exist_ok=True)
    _write_if_changed(state.config / "containerd.toml", containerd_config(state))
    _write_if_changed(state.cni_conf / "10-krc.conflist", cni_config(state, net))
    _write_if_changed(state.config / "kubelet.yaml", yaml.safe_dump(kubelet_config(state, net, cgroups)))
    _write_if_changed(state.config / "kube-proxy.yaml", yaml.safe_dump(kube_proxy_config(state, net)))
    _write_if_changed(state.config / "Corefile", corefile(state, net))
    # Pods with dnsPolicy Default get this file: cluster DNS, never the host's resolvers.
    _write_if_changed(state.config / "resolv.conf", f"nameserver {net.dns_service_ip}\n")


def worker_kubelet_config(state: StateLayout, net: Network, cgroups: CgroupMode, node: WorkerNode) -> dict:
    """The control-plane node's kubelet settings, with the worker node's own runtime, addresses,
    cgroup root, pod log directory (two kubelets sharing one would collect each other's logs as
    orphans) and taints."""
    own = node.state(state)
    return {
        **kubelet_config(state, net, cgroups),
        "cgroupRoot": f"/{POD_CGROUP_ROOT}/{node.name}",
        "containerRuntimeEndpoint": f"unix://{own.containerd_socket}",
        "tlsCertFile": _pki(state, f"kubelet-serving-{node.name}.crt"),
        "tlsPrivateKeyFile": _pki(state, f"kubelet-serving-{node.name}.key"),
        "healthzBindAddress": node.ip(net),
        "podLogsDir": str(own.root / "pod-logs"),
        "registerWithTaints": node.taints(),
    }


def worker_components(state: StateLayout, net: Network, bins: Binaries, node: WorkerNode) -> list[Component]:
    """The worker node's containerd, kubelet and kube-proxy, in start order, in its namespace."""
    own = node.state(state)
    labels = {"kuberay-conformance.io/local-node": "true", **node.labels()}
    kubelet_argv = [
        str(bins.kubernetes / "kubelet"),
        f"--config={own.config / 'kubelet.yaml'}",
        f"--kubeconfig={state.kubeconfig_for(f'kubelet-{node.name}')}",
        f"--root-dir={own.kubelet_root}",
        f"--node-ip={node.ip(net)}",
        f"--hostname-override={node.name}",
        "--oom-score-adj=0",
        f"--node-labels={','.join(f'{k}={v}' for k, v in labels.items())}",
        "--v=1",
    ]
    base = containerd(own, bins)
    return [
        Component(
            node.component("containerd"),
            base.argv,
            health_socket=base.health_socket,
            env=base.env,
            netns=node.netns,
        ),
        Component(
            node.component("kubelet"),
            kubelet_argv,
            health_url=f"http://{node.ip(net)}:10248/healthz",
            netns=node.netns,
        ),
        Component(
            node.component("kube-proxy"),
            [str(bins.kubernetes / "kube-proxy"), f"--config={own.config / 'kube-proxy.yaml'}", "--v=1"],
            health_url=f"http://{node.ip(net)}:10256/healthz",
            netns=node.netns,
        ),
    ]


def write_worker_configs(state: StateLayout, net: Network, cgroups: CgroupMode, node: WorkerNode) -> None:
    own = node.state(state)
    own.config.mkdir(parents=True, exist_ok=True)
    own.cni_conf.mkdir(parents=True, exist_ok=True)
    _write_if_changed(own.config / "containerd.toml", containerd_config(own))
    _write_if_changed(own.cni_conf / "10-krc.conflist", cni_config(own, net, node.pod_cidr(net)))
    kubelet_yaml = yaml.safe_dump(worker_kubelet_config(state, net, cgroups, node))
    _write_if_changed(own.config / "kubelet.yaml", kubelet_yaml)
    proxy = {
        **kube_proxy_config(state, net),
        "hostnameOverride": node.name,
        "healthzBindAddress": f"{node.ip(net)}:10256",
    }
    _write_if_changed(own.config / "kube-proxy.yaml", yaml.safe_dump(proxy))


def all_components(
    state: StateLayout, net: Network, bins: Binaries, workers: tuple[WorkerNode, ...] = ()
) -> list[Component]:
    """In start order; `down` stops them in reverse."""
    return [
        etcd(state, net, bins),
        apiserver(state, net, bins),
        controller_manager(state, net, bins),
        scheduler(state, net, bins),
        containerd(state, bins),
        kubelet(state, net, bins),
        kube_proxy(state, net, bins),
        coredns(state, net, bins),
        *(c for node in workers for c in worker_components(state, net, bins, node)),
    ]
