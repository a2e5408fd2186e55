"""The local provider: a real Kubernetes cluster made of host processes.

A control-plane node and worker nodes by group (nodes.py: the profile's `local.nodes`, the default
profile's a CPU and a GPU node, or `KRC_LOCAL_NODES=cpu=N,gpu=M|none`), each in a network namespace
of its own. `up` builds what is missing, creates the nodes' network namespaces,
issues certificates, starts each program in order and waits for it to be healthy, then waits for
every node to be Ready. A second `up` keeps healthy programs and restarts dead ones. `down` stops
every process by its recorded PID, unmounts what the node mounted, and undoes the host
changes in its journal.
"""

from __future__ import annotations

import os
import shutil
import socket
import string
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import requests
import urllib3
import yaml
from kubernetes import client, dynamic, watch
from kubernetes.client.exceptions import ApiException

from conformance import interrupts, node_pressure
from conformance.build import gobuild, image_cache, pins, small_images
from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError, UsageError
from conformance.install import storage
from conformance.kube.nodes import advertise_simulated_gpus, is_node_ready
from conformance.kube.target import KubeTarget, api_client
from conformance.progress import progress
from conformance.providers.base import Cluster, ComponentStatus, ProviderStatus

from . import components, image_import, network, nodes, preflight
from .cgroup_layout import host_layout
from .cleanup import (
    ensure_pod_cgroup_root,
    kill_node_pod_processes,
    kill_pod_processes,
    remove_kubelet_cgroups,
    unmount_below,
)
from .journal import Change, HostJournal, read_sysctl
from .layout import Network, StateLayout
from .pki import CertificateAuthority, ClientIdentity, ensure_service_account_key, write_kubeconfig
from .supervisor import Supervisor

# kubelet sets these machine-wide sysctls at start; we restore the host's values on `down`.
KUBELET_KERNEL_TUNABLES = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
CLIENT_IDENTITIES = (
    ClientIdentity("admin", "kubernetes-admin", ("system:masters",)),
    ClientIdentity("kube-controller-manager", "system:kube-controller-manager"),
    ClientIdentity("kube-scheduler", "system:kube-scheduler"),
    ClientIdentity("kube-proxy", "system:kube-proxy"),
    ClientIdentity("kubelet", f"system:node:{components.NODE_NAME}", ("system:nodes",)),
    ClientIdentity("coredns", "system:coredns"),
    ClientIdentity("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client"),
)
CGROUP_NAME = "kuberay-conformance-local"
DEFAULT_SIMULATED_GPUS = 2
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class LocalSettings:
    simulated_gpus: int = DEFAULT_SIMULATED_GPUS  # per GPU node (the only node when there are no workers)
    component_timeout_s: float = 60.0
    node_ready_timeout_s: float = 120.0
    worker_nodes: tuple[nodes.WorkerNode, ...] = ()

    @classmethod
    def from_env(cls, profile_nodes: Mapping[str, int] | None = None) -> LocalSettings:
        """The settings of this environment; worker nodes as the profile's `local.nodes` say, unless
        KRC_LOCAL_NODES does (none without a profile: `status`, `down` and tools that only attach)."""
        gpus = os.environ.get("KRC_SIMULATED_GPUS", str(DEFAULT_SIMULATED_GPUS))
        if not gpus.isdigit():
            raise UsageError(
                f"KRC_SIMULATED_GPUS={gpus!r} is not a whole number", "set it to 0 or more, e.g. 2"
            )
        return cls(simulated_gpus=int(gpus), worker_nodes=nodes.asked(profile_nodes or {}))


class LocalProvider:
    name = "local"

    def __init__(
        self,
        state: StateLayout | None = None,
        net: Network | None = None,
        settings: LocalSettings | None = None,
        profile_nodes: Mapping[str, int] | None = None,
    ) -> None:
        self.state = state or StateLayout.default()
        self.net = net or Network()
        self.settings = settings or LocalSettings.from_env(profile_nodes)
        self.cache = cache_dir()
        self.supervisor = Supervisor(self.state.pids, CGROUP_NAME)
        self.journal = HostJournal(self.state.journal)

    @property
    def workers(self) -> tuple[nodes.WorkerNode, ...]:
        """The cluster's worker nodes: as it was made (whatever the environment says now), or as
        the settings ask for one not made yet."""
        made = nodes.recorded(self.state.topology)
        return nodes.parse(made) if self.state.topology.exists() else self.settings.worker_nodes

    @property
    def node_names(self) -> list[str]:
        return [components.NODE_NAME, *(n.name for n in self.workers)]

    def _gpu_nodes(self) -> list[str]:
        """Where the simulated GPUs go: the GPU worker nodes, or the one node of a one-node cluster."""
        if not self.workers:
            return [components.NODE_NAME]
        return [n.name for n in self.workers if n.gpu]

    # -- the interface -------------------------------------------------------------------

    def up(self) -> Cluster:
        for note in preflight.run_all():
            print(f"note: {note}", file=sys.stderr)
        network.check_ranges_free(self.net)
        self._check_topology()
        bins = self.ensure_binaries()
        pause = small_images.pause_image(self.cache)
        # Built before anything starts, like the binaries: a cold build takes minutes.
        storage_images = storage.build_images(self.cache, bins.kubernetes / "kubectl")
        existed = self.state.root.exists() and bool(self.supervisor.records())
        try:
            self._bring_up(bins, pause, storage_images)
        except BaseException:
            # A first `up` that fails (or is interrupted) leaves nothing half-started; a repair
            # of a cluster that existed before keeps what still runs, for `status` and the logs.
            if not existed:
                self.down()
            raise
        return self.cluster()

    def _check_topology(self) -> None:
        made, asked = nodes.recorded(self.state.topology), nodes.describe(self.settings.worker_nodes)
        if self.state.topology.exists() and made != asked:
            raise UsageError(
                f"the local cluster was made with worker nodes {made!r}, not {asked!r} ({nodes.NODES_ENV})",
                f"run `kuberay-conformance cluster down` first, or set {nodes.NODES_ENV}={made}",
            )

    def down(self) -> list[str]:
        problems: list[str] = []
        order = [c.name for c in reversed(self._components(self._cached_binaries()))]
        survivors = self.supervisor.stop_all(order)
        problems += [f"process {pid} did not stop" for pid in survivors]
        problems += kill_pod_processes()
        problems += unmount_below(self.state.root)
        problems += remove_kubelet_cgroups()
        problems += self.journal.undo_all()
        if not problems and self.state.root.exists():
            shutil.rmtree(self.state.root)
        return problems

    def status(self) -> ProviderStatus:
        if not self.state.root.exists():
            return ProviderStatus(self.name, exists=False, summary="no local cluster")
        statuses = [self._component_status(c) for c in self._components(self._cached_binaries())]
        statuses += [self._node_status(name) for name in self.node_names]
        return ProviderStatus(self.name, exists=True, components=tuple(statuses))

    def env(self) -> dict[str, str]:
        bins = self._cached_binaries()
        return {
            "KUBECONFIG": str(self.state.admin_kubeconfig),
            "PATH": f"{bins.kubernetes}:{bins.containerd}:{os.environ.get('PATH', '')}",
        }

    def cluster(self) -> Cluster:
        bins = self._cached_binaries()
        return Cluster(
            provider=self.name,
            kubeconfig=self.state.admin_kubeconfig,
            bin_dirs=(bins.kubernetes, bins.containerd),
            facts={
                "simulated_gpus": self.settings.simulated_gpus > 0,
                "node_name": components.NODE_NAME,
                "worker_nodes": nodes.describe(self.workers),
                # The node is this machine's host processes: its kernel's CPU pressure is the node's.
                node_pressure.FACT: str(node_pressure.PSI_CPU),
                # No registry and no route off the host: images are imported, downloads fail.
                "pulls_images": False,
                "pods_reach_internet": False,
            },
        )

    # -- images --------------------------------------------------------------------------

    def load_image(self, archive: image_cache.ImageArchive) -> None:
        """Make an image built on this machine available to every node (nothing is ever pulled)."""
        ctr = self._cached_binaries().containerd / "ctr"
        for socket_path in self._containerd_sockets():
            image_import.import_image(archive, ctr, socket_path)

    # -- building ------------------------------------------------------------------------

    def ensure_binaries(self) -> components.Binaries:
        dirs = {name: gobuild.ensure_built(pins.TOOLS[name], self.cache) for name in _NODE_TOOLS}
        return components.Binaries(**dirs)

    def _cached_binaries(self) -> components.Binaries:
        dirs = {name: gobuild.cached_bin_dir(pins.TOOLS[name], self.cache) for name in _NODE_TOOLS}
        return components.Binaries(**dirs)

    # -- bring-up ------------------------------------------------------------------------

    def _bring_up(
        self,
        bins: components.Binaries,
        pause: image_cache.ImageArchive,
        storage_images: storage.StorageImages,
    ) -> None:
        for directory in (self.state.root, self.state.logs, self.state.pids):
            directory.mkdir(parents=True, exist_ok=True)
        self._record_kernel_tunables()
        self.state.topology.write_text(nodes.describe(self.workers))
        network.ensure_node_network(self.net, self.journal)
        self._ensure_pki()
        components.write_configs(self.state, self.net, host_layout().mode)
        ensure_pod_cgroup_root()
        for node in self.workers:
            network.ensure_worker_network(self.net, node, self.journal)
            components.write_worker_configs(self.state, self.net, host_layout().mode, node)
            ensure_pod_cgroup_root(node=node.name)
        for component in self._components(bins):
            interrupts.check()
            self._ensure_running(component)
            if component.name == "kube-apiserver":
                self._apply_bootstrap_objects()
            if component.name.split("@")[0] == "containerd" and component.health_socket:
                image_import.import_image(pause, bins.containerd / "ctr", component.health_socket)
        self._wait_node_ready()
        self._advertise_simulated_gpus()
        self._offer_default_storage_class(storage_images)

    def _components(self, bins: components.Binaries) -> list[components.Component]:
        return components.all_components(self.state, self.net, bins, self.workers)

    def _containerd_sockets(self) -> list[Path]:
        return [self.state.containerd_socket, *(n.state(self.state).containerd_socket for n in self.workers)]

    def _record_kernel_tunables(self) -> None:
        for key in KUBELET_KERNEL_TUNABLES:
            try:
                self.journal.record(Change("sysctl", key, read_sysctl(key)))
            except OSError:
                continue

    def _ensure_pki(self) -> None:
        ca = CertificateAuthority(self.state.pki)
        ca.ensure()
        ensure_service_account_key(self.state.pki)
        ca.issue(
            "kube-apiserver",
            _subject("kube-apiserver"),
            client=False,
            server=True,
            dns_names=(
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                f"kubernetes.default.svc.{components.CLUSTER_DOMAIN}",
                "localhost",
            ),
            ips=(self.net.node_ip, self.net.kubernetes_service_ip, "127.0.0.1"),
        )
        ca.issue(
            "kubelet-serving",
            _subject(components.NODE_NAME),
            client=False,
            server=True,
            dns_names=(components.NODE_NAME,),
            ips=(self.net.node_ip,),
        )
        for node in self.workers:
            ca.issue(
                f"kubelet-serving-{node.name}",
                _subject(node.name),
                client=False,
                server=True,
                dns_names=(node.name,),
                ips=(node.ip(self.net),),
            )
        server = f"https://{self.net.node_ip}:6443"
        kubelets = tuple(
            ClientIdentity(f"kubelet-{n.name}", f"system:node:{n.name}", ("system:nodes",))
            for n in self.workers
        )
        for identity in (*CLIENT_IDENTITIES, *kubelets):
            cert, key = ca.issue_client(identity)
            path = (
                self.state.admin_kubeconfig
                if identity.component == "admin"
                else self.state.kubeconfig_for(identity.component)
            )
            write_kubeconfig(
                path,
                server=server,
                ca=ca.cert_path,
                cert=cert,
                key=key,
                user=identity.user,
                cluster="krc-local",
            )

    def _ensure_running(self, component: components.Component) -> None:
        argv = network.in_netns(component.netns or self.net.netns, component.argv)
        record = self.supervisor.record(component.name)
        if record is not None and record.argv != argv and self.supervisor.running(component.name):
            # Started with other settings (an older version of this provider): restart to converge.
            self.supervisor.stop(component.name)
        if self.supervisor.running(component.name):
            if self._healthy(component):
                return
            with progress(f"waiting for {component.name} (running, not yet healthy)"):
                if self._wait_healthy(component, self.settings.component_timeout_s / 2):
                    return
            self.supervisor.stop(component.name)
        if component.health_url:
            url = urlparse(component.health_url)
            preflight.check_port_free(component.name, url.hostname or "", url.port or 0)
        if component.health_socket is not None:
            # A socket file left by a process that was killed (a session or CI job that ended
            # mid-run) refuses connections; the program makes its own when it starts.
            component.health_socket.unlink(missing_ok=True)
        env = {**os.environ, **component.env}
        log = self.state.log_for(component.name)
        with progress(f"starting {component.name}"):
            record = self.supervisor.start(component.name, argv, log, env)
            if not self._wait_healthy(component, self.settings.component_timeout_s, record.pid):
                raise ProvisioningError(
                    f"{component.name} did not become healthy within {self.settings.component_timeout_s:.0f}s"
                    f" ({_tail(log)})",
                    f"see {log}",
                )

    def _wait_healthy(self, component: components.Component, timeout: float, pid: int | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            interrupts.check()
            if pid is not None and not self.supervisor.running(component.name):
                raise ProvisioningError(
                    f"{component.name} exited at start ({_tail(self.state.log_for(component.name))})",
                    f"see {self.state.log_for(component.name)}",
                )
            if self._healthy(component):
                return True
            time.sleep(0.25)  # poll-interval: health endpoints have no watch
        return False

    def _healthy(self, component: components.Component) -> bool:
        if component.health_socket is not None:
            return _accepts_connections(component.health_socket)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                reply = requests.get(
                    component.health_url,
                    timeout=2,
                    cert=(str(self.state.pki / "admin.crt"), str(self.state.pki / "admin.key")),
                    # The scheduler and controller-manager serve with self-signed certificates.
                    verify=str(self.state.pki / "ca.crt") if ":6443" in component.health_url else False,
                )
        except requests.RequestException:
            return False
        return reply.status_code == 200

    def _api(self) -> client.ApiClient:
        return api_client(KubeTarget(self.state.admin_kubeconfig))

    def _apply_bootstrap_objects(self) -> None:
        """Server-side apply, so a repeated `up` converges instead of tripping over what exists."""
        template = string.Template((Path(__file__).parent / "assets" / "bootstrap.yaml").read_text())
        text = template.substitute(DNS_SERVICE_IP=self.net.dns_service_ip, NODE_IP=self.net.node_ip)
        resources = dynamic.DynamicClient(self._api()).resources
        for doc in yaml.safe_load_all(text):
            resource = resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            try:
                resource.server_side_apply(
                    body=doc,
                    name=doc["metadata"]["name"],
                    namespace=doc["metadata"].get("namespace"),
                    field_manager="kuberay-conformance",
                    force_conflicts=True,
                )
            except ApiException as exc:
                raise ProvisioningError(
                    f"applying {doc['kind']} {doc['metadata']['name']} failed: {exc.reason}",
                    f"see {self.state.log_for('kube-apiserver')}",
                ) from exc

    def _wait_node_ready(self, names: list[str] | None = None) -> None:
        core = client.CoreV1Api(self._api())
        timeout = self.settings.node_ready_timeout_s
        waiting = set(names or self.node_names)
        with progress(f"waiting for node(s) {', '.join(sorted(waiting))} to be Ready"):
            stream = watch.Watch()
            for event in stream.stream(core.list_node, timeout_seconds=int(timeout)):
                node = event["object"]
                if is_node_ready(node):
                    waiting.discard(node.metadata.name)
                if not waiting:
                    stream.stop()
                    return
        late = sorted(waiting)
        raise ProvisioningError(
            f"node(s) {', '.join(late)} not Ready within {timeout:.0f}s",
            f"see {', '.join(str(self.state.log_for(self._kubelet_of(n))) for n in late)}",
        )

    @staticmethod
    def _kubelet_of(node: str) -> str:
        return "kubelet" if node == components.NODE_NAME else f"kubelet@{node}"

    def _advertise_simulated_gpus(self) -> None:
        for name in self._gpu_nodes():
            self._advertise_gpus_on(name)

    def _advertise_gpus_on(self, node: str) -> None:
        core = client.CoreV1Api(self._api())
        timeout = self.settings.node_ready_timeout_s
        advertise_simulated_gpus(core, node, GPU_RESOURCE, self.settings.simulated_gpus, timeout)

    def _offer_default_storage_class(self, storage_images: storage.StorageImages) -> None:
        """local-path-provisioner as the default StorageClass, as kind offers it: a claim that
        names no class gets a hostPath volume below the state directory (so `down` removes it)."""
        storage.install_local(
            self, self._api(), storage_images, self.state.volumes, self.settings.node_ready_timeout_s
        )

    # -- node faults (base.NodeFaults) ----------------------------------------------------

    def worker_nodes(self) -> list[str]:
        return [n.name for n in self.workers]

    def stop_node(self, name: str) -> None:
        node = self._worker(name)
        for program in ("kube-proxy", "kubelet", "containerd"):
            self.supervisor.stop(node.component(program))
        # What a lost machine takes with it: the containers, and the shims that held them.
        problems = kill_node_pod_processes(node.name)
        shims = self.supervisor.stop_forked(str(node.state(self.state).containerd_socket))
        problems += [f"shim {pid} did not stop" for pid in shims]
        if problems:
            raise ProvisioningError(
                f"node {name} did not stop: {'; '.join(problems)}", "see `cluster status`"
            )

    def start_node(self, name: str) -> None:
        node = self._worker(name)
        for component in components.worker_components(self.state, self.net, self._cached_binaries(), node):
            self._ensure_running(component)
        self._wait_node_ready([name])
        if node.gpu:  # a restarted kubelet (or a Node made anew) no longer lists the simulated GPUs
            self._advertise_gpus_on(name)

    def isolate_node(self, name: str, cut: bool) -> None:
        network.link_up(self.net, self._worker(name), up=not cut)

    def _worker(self, name: str) -> nodes.WorkerNode:
        found = [n for n in self.workers if n.name == name]
        if not found:
            raise UsageError(
                f"{name} is not a worker node of the local cluster", f"use one of {self.worker_nodes()}"
            )
        return found[0]

    # -- status --------------------------------------------------------------------------

    def _component_status(self, component: components.Component) -> ComponentStatus:
        record = self.supervisor.record(component.name)
        if record is None:
            return ComponentStatus(component.name, False, "not started")
        if not self.supervisor.running(component.name):
            return ComponentStatus(component.name, False, f"dead (was pid {record.pid}); log: {record.log}")
        if not self._healthy(component):
            return ComponentStatus(component.name, False, f"pid {record.pid}, not healthy; log: {record.log}")
        return ComponentStatus(component.name, True, f"pid {record.pid}, healthy")

    def _node_status(self, name: str) -> ComponentStatus:
        try:
            node = client.CoreV1Api(self._api()).read_node(name, _request_timeout=5)
        except Exception as exc:  # noqa: BLE001 - any failure means "unknown", which status reports
            return ComponentStatus(f"node/{name}", False, f"unreachable: {type(exc).__name__}")
        gpus = (node.status.allocatable or {}).get(GPU_RESOURCE, "0")
        ready = is_node_ready(node)
        taints = ", ".join(f"taint {t.key}={t.value}:{t.effect}" for t in node.spec.taints or [])
        return ComponentStatus(
            f"node/{name}",
            ready,
            f"{'Ready' if ready else 'NotReady'}, {node.status.node_info.kubelet_version}, "
            f"{GPU_RESOURCE}={gpus} (simulated){', ' + taints if taints else ''}",
        )


_NODE_TOOLS = ("kubernetes", "etcd", "containerd", "coredns")


def _subject(common_name: str):  # noqa: ANN202 - x509.Name, kept out of this module's imports
    from cryptography import x509  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _tail(log: Path, lines: int = 1) -> str:
    try:
        text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return " / ".join(text[-lines:])[-300:] if text else "empty log"


def _accepts_connections(path: Path) -> bool:
    """A unix socket is healthy when something listens on it, not when its file exists."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
