"""The `kind` provider: a kind cluster per run, made and deleted with the kind CLI, as KubeRay's own CI does.

For CI runners with a container engine (nightly-kind.yml) and for machines of one's own. The
cluster: a control plane, KRC_KIND_WORKERS CPU workers (default 1) and KRC_KIND_GPU_WORKERS GPU
workers (default 1) that look like EKS GPU nodes (their labels and the nvidia.com/gpu=present
NoSchedule taint) and advertise SIMULATED_GPUS simulated `nvidia.com/gpu` each, so the GPU checks
run every night. Named after the run (`krc-<run id>`), deleted by name.

The engine is the one kind uses (KIND_EXPERIMENTAL_PROVIDER, else docker, else podman). The node
image is KRC_KIND_NODE_IMAGE (default DEFAULT_NODE_IMAGE): used when the engine has it or can pull
it; where no registry is in reach, the harness builds one from what it already builds
(conformance/build/kind_node_image.py; root only). KRC_KIND_CONFIG_PATCHES names a YAML file whose
top-level lists (kubeadmConfigPatches, containerdConfigPatches, ...) are added to the config the
harness writes: what a particular machine needs (tests/support/kind_machine.sh prints this one's).

Images built here reach the nodes with `kind load image-archive` (`load_image`); the load
generator needs none (it is copied into a pod of the Ray image, load/generator.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError, UsageError
from conformance.kube.nodes import advertise_simulated_gpus
from conformance.kube.target import KubeTarget, api_client
from conformance.progress import Progress, progress
from conformance.providers.base import Cluster, ComponentStatus, ProviderStatus
from conformance.providers.terraform import env_count, slug

DEFAULT_WORKERS = 1
DEFAULT_GPU_WORKERS = 1
SIMULATED_GPUS = 2  # per GPU worker, as the local provider's GPU node (the kind profile's gpu.count)
GPU_RESOURCE = "nvidia.com/gpu"
GPU_LABELS = {"nvidia.com/gpu.present": "true", "kuberay-conformance.io/gpu": "true"}  # as the EKS module's
GPU_NODE_SELECTOR = "kuberay-conformance.io/gpu=true"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}  # the EKS GPU group's
DEFAULT_NODE_IMAGE = "docker.io/kindest/node:v1.35.0"  # qualified: Podman refuses short names
MIN_KIND = (0, 33)  # the release this provider was run with here (docs/kind-on-this-machine.md)
CLUSTER_PREFIX = "krc-"
ENGINES = ("docker", "podman")
CREATE_WAIT = "180s"  # kind's own wait for the control plane to be Ready
ADVERTISE_TIMEOUT_S = 120  # the kubelet copies capacity to allocatable at its next status update
PULL_TIMEOUT_S = 600


class KindProvider:
    name = "kind"
    # Images this provider builds are packed by Python, as any user: buildah needs root to mount.
    image_packer = "tar"

    def __init__(self, run_id: str | None = None, keep_cluster: bool = False) -> None:
        self.run_id = run_id
        self.keep_cluster = keep_cluster
        self._cluster: Cluster | None = None

    # -- settings ------------------------------------------------------------------------

    @staticmethod
    def workers() -> int:
        return env_count("KRC_KIND_WORKERS", str(DEFAULT_WORKERS), 0, 6)

    @staticmethod
    def gpu_workers() -> int:
        return env_count("KRC_KIND_GPU_WORKERS", str(DEFAULT_GPU_WORKERS), 0, 2)

    @staticmethod
    def node_image() -> str:
        return os.environ.get("KRC_KIND_NODE_IMAGE", DEFAULT_NODE_IMAGE)

    @staticmethod
    def engine() -> str:
        """The engine kind drives: KIND_EXPERIMENTAL_PROVIDER as kind reads it, else docker, else podman."""
        chosen = os.environ.get("KIND_EXPERIMENTAL_PROVIDER", "")
        if chosen and chosen not in ENGINES:
            raise UsageError(
                f"KIND_EXPERIMENTAL_PROVIDER={chosen!r} is not an engine kind drives", "use docker or podman"
            )
        for engine in [chosen] if chosen else ENGINES:
            if shutil.which(engine):
                return engine
        raise UsageError(
            f"no container engine for kind's nodes ({chosen or 'docker or podman'} is not installed)",
            "install Docker or Podman (or use --provider existing with a cluster you have)",
        )

    @property
    def cache(self) -> Path:
        """Where builds are cached (a user's own directory unless root)."""
        return cache_dir()

    def cluster_name(self) -> str:
        if self.run_id is None:
            raise UsageError("provider kind has no cluster of this run", "run the conformance run first")
        return cluster_name(self.run_id)

    def state_dir(self) -> Path:
        return state_root() / self.cluster_name()

    # -- checks before anything is made ---------------------------------------------------

    def preflight(self) -> None:
        """Settings, kind, the engine and the name, checked before anything is created."""
        self.workers()
        self.gpu_workers()
        config_patches()
        check_kind_version(_kind_version())
        engine = self.engine()
        if _run([engine, "info"], timeout=60).returncode != 0:
            raise ProvisioningError(
                f"the {engine} engine does not answer (`{engine} info` failed)",
                f"start {engine} and run again",
            )
        if self.run_id and self.cluster_name() in existing_clusters():
            raise ProvisioningError(
                f"a kind cluster named {self.cluster_name()} already exists",
                "delete it (kuberay-conformance cluster down --provider kind) or use another --run-dir",
            )

    # -- the Provider interface -------------------------------------------------------------

    def up(self) -> Cluster:
        if self._cluster is not None:
            return self._cluster
        self.run_id = self.run_id or _new_run_id()
        self.preflight()
        name, state = self.cluster_name(), self.state_dir()
        state.mkdir(parents=True, exist_ok=True)
        config = state / "kind-config.yaml"
        config.write_text(
            yaml.safe_dump(kind_config(name, self.workers(), self.gpu_workers(), config_patches()))
        )
        kubeconfig = state / "kubeconfig"
        argv = ["kind", "create", "cluster", "--name", name, "--config", str(config)]
        argv += ["--image", self._node_image(), "--kubeconfig", str(kubeconfig), "--wait", CREATE_WAIT]
        try:
            with progress(f"kind create cluster {name} ({1 + self.workers() + self.gpu_workers()} nodes)"):
                _check(argv, f"`kind create cluster` of {name}", "see the lines above; try it by hand", 1800)
            kubeconfig.chmod(0o600)
            cluster = Cluster(provider=self.name, kubeconfig=kubeconfig, facts=self._facts(name))
            self._advertise_gpus(cluster)
        except BaseException:
            if not self.keep_cluster:
                self._delete(name)  # best effort; the first error is what the user needs
            raise
        self._cluster = cluster
        return cluster

    def cluster(self) -> Cluster:
        return self._cluster or Cluster(
            self.name, self.state_dir() / "kubeconfig", facts=self._facts(self.cluster_name())
        )

    def down(self) -> list[str]:
        """Delete this run's cluster, or (no run) every cluster of this harness left behind."""
        names = (
            [self.cluster_name()]
            if self.run_id
            else [n for n in existing_clusters() if n.startswith(CLUSTER_PREFIX)]
        )
        problems = [problem for name in names if (problem := self._delete(name))]
        if not existing_clusters():
            # kind leaves its network behind after the last cluster; it was made for these clusters.
            _run([self.engine(), "network", "rm", "kind"], timeout=60)
        return problems

    def status(self) -> ProviderStatus:
        name = self.cluster_name() if self.run_id else ""
        found = [n for n in existing_clusters() if n == name or (not name and n.startswith(CLUSTER_PREFIX))]
        if not found:
            return ProviderStatus(self.name, exists=False, summary="no kind cluster of this harness")
        return ProviderStatus(
            self.name, exists=True, components=tuple(ComponentStatus(n, True, "kind cluster") for n in found)
        )

    def env(self) -> dict[str, str]:
        return KubeTarget(self.state_dir() / "kubeconfig", None).shell_env()

    def load_image(self, archive: Any) -> None:
        """Load a docker-archive (images.ImageArchive) into every node of this run's cluster."""
        argv = ["kind", "load", "image-archive", str(archive.path), "--name", self.cluster_name()]
        with progress(f"kind load image-archive {archive.ref}"):
            _check(
                argv, f"`kind load image-archive` of {archive.ref}", f"try it by hand: {' '.join(argv)}", 900
            )

    # -- helpers -----------------------------------------------------------------------------

    def _facts(self, name: str) -> dict[str, object]:
        return {"cluster_name": name, "run_id": self.run_id, "simulated_gpus": self.gpu_workers() > 0}

    def _node_image(self) -> str:
        """The node image, in the engine: present, pulled, or (no registry in reach) built here."""
        image, engine = self.node_image(), self.engine()
        if _run([engine, "image", "inspect", image], timeout=60).returncode == 0:
            return image
        line = Progress(f"pulling the kind node image {image}").start()
        pulled = _run([engine, "pull", image], timeout=PULL_TIMEOUT_S)
        if pulled.returncode == 0:
            line.finish()
            return image
        line.finish(f"not pulled ({_last_line(pulled)[:120]}); one is built here")
        if os.geteuid() != 0:
            raise ProvisioningError(
                f"the kind node image {image} cannot be pulled, and building one here needs root",
                "set KRC_KIND_NODE_IMAGE to an image your engine has, or run once as root to build it",
            )
        from conformance.build.kind_node_image import ensure_node_image  # noqa: PLC0415 - only without a registry

        return ensure_node_image(self.cache, engine).ref

    def _advertise_gpus(self, cluster: Cluster) -> None:
        if self.gpu_workers() == 0:
            return
        core = client.CoreV1Api(api_client(cluster.target))
        nodes = [n.metadata.name for n in core.list_node(label_selector=GPU_NODE_SELECTOR).items]
        if len(nodes) != self.gpu_workers():
            raise ProvisioningError(
                f"the kind cluster has {len(nodes)} node(s) labelled {GPU_NODE_SELECTOR}, "
                f"{self.gpu_workers()} asked for",
                "see the kind config in the run's state folder",
            )
        for node in nodes:
            advertise_simulated_gpus(core, node, GPU_RESOURCE, SIMULATED_GPUS, ADVERTISE_TIMEOUT_S)

    def _delete(self, name: str) -> str:
        """Delete one cluster and its state folder; '' when done, else what is left."""
        done = _run(["kind", "delete", "cluster", "--name", name], timeout=600)
        if done.returncode != 0:
            return f"kind cluster {name}: {_last_line(done)}"
        shutil.rmtree(state_root() / name, ignore_errors=True)
        return ""


def kind_config(name: str, workers: int, gpu_workers: int, patches: dict[str, Any]) -> dict[str, Any]:
    """The cluster: a control plane, CPU workers and GPU-looking workers; `patches` added as they are."""
    gpu_join = yaml.safe_dump({"kind": "JoinConfiguration", "nodeRegistration": {"taints": [GPU_TAINT]}})
    nodes: list[dict[str, Any]] = [{"role": "control-plane"}]
    nodes += [
        {"role": "worker", "labels": {"kuberay-conformance.io/node-group": "cpu"}} for _ in range(workers)
    ]
    gpu_labels = {**GPU_LABELS, "kuberay-conformance.io/node-group": "gpu"}
    nodes += [
        {"role": "worker", "labels": gpu_labels, "kubeadmConfigPatches": [gpu_join]}
        for _ in range(gpu_workers)
    ]
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": name,
        "nodes": nodes,
    }
    for key, value in patches.items():
        config[key] = [*config.get(key, []), *value]
    return config


def config_patches() -> dict[str, Any]:
    """KRC_KIND_CONFIG_PATCHES: top-level lists added to the kind config (what a machine needs)."""
    path = os.environ.get("KRC_KIND_CONFIG_PATCHES", "")
    if not path:
        return {}
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(
            f"KRC_KIND_CONFIG_PATCHES={path} cannot be read: {exc}", "name a YAML file"
        ) from None
    bad = [key for key, value in loaded.items() if key in ("nodes", "name") or not isinstance(value, list)]
    if not isinstance(loaded, dict) or bad:
        raise UsageError(
            f"KRC_KIND_CONFIG_PATCHES={path} must map kind config keys to lists (not nodes or name): {bad}",
            "e.g. kubeadmConfigPatches: [...]",
        )
    return loaded


def check_kind_version(text: str) -> None:
    found = re.search(r"v(\d+)\.(\d+)\.\d+", text)
    if found is None or (int(found.group(1)), int(found.group(2))) < MIN_KIND:
        have = found.group(0) if found else repr(text.strip()[:40])
        raise UsageError(
            f"kind {have} is older than v{MIN_KIND[0]}.{MIN_KIND[1]}.0, the release this harness runs",
            "install kind v0.33.0 (go install sigs.k8s.io/kind@v0.33.0)",
        )


def existing_clusters() -> list[str]:
    done = _run(["kind", "get", "clusters"], timeout=60)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def cluster_name(run_id: str) -> str:
    """The kind cluster of run `run_id` (a DNS label of at most 40 characters)."""
    return f"{CLUSTER_PREFIX}{slug(run_id)}"[:40].rstrip("-")


def state_root() -> Path:
    """Kubeconfigs and configs of this user's kind clusters (KRC_KIND_STATE_DIR)."""
    default = Path.home() / ".local" / "state" / "kuberay-conformance" / "kind"
    return Path(os.environ.get("KRC_KIND_STATE_DIR", default))


def _kind_version() -> str:
    if shutil.which("kind") is None:
        raise UsageError(
            "kind is not installed", "install kind v0.33.0 (go install sigs.k8s.io/kind@v0.33.0)"
        )
    return _run(["kind", "version"], timeout=30).stdout


def _new_run_id() -> str:
    from conformance.report.summary import new_run_id  # noqa: PLC0415

    return new_run_id()


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))


def _check(argv: list[str], what: str, fix: str, timeout: float) -> None:
    done = _run(argv, timeout)
    if done.returncode != 0:
        raise ProvisioningError(f"{what} failed: {_last_line(done)}", fix)


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"
