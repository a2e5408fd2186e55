"""The `kind` provider through Terraform/OpenTofu (KRC_KIND_VIA=terraform): the alternative to the
kind CLI (kind.py, the default), for teams that make every cluster with Terraform. The cluster is
made by infra/terraform/kind (tehcyx/kind provider, which embeds kind as a library and so needs a
node image it can pull: no node image is built here for it). Kept thin and tested with a stand-in
terraform (tests/unit/test_terraform_orchestration_only.py); it never ran against a real engine.
Settings: KRC_KIND_NODE_IMAGE_VERSION (kindest/node tag), KRC_KIND_WORKERS (worker nodes),
KRC_KIND_GPU_WORKERS (GPU-looking worker nodes, default 1: the EKS GPU labels and taint, and
SIMULATED_GPUS simulated `nvidia.com/gpu` each, so the GPU checks run every night).

Every image is pulled; the load generator is vegeta built from the Go module proxy and copied into
a pod of the profile's Ray image (load/generator.py). `load_image` loads an image archive packed
without buildah or root (build/image_pack.py, packer "tar") into every node with `kind load image-archive`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

from kubernetes import client

from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError, UsageError
from conformance.kube.nodes import advertise_simulated_gpus
from conformance.kube.target import api_client
from conformance.providers.base import Cluster

# The same nodes and settings as the kind CLI provider's (infra/terraform/kind gpu_node_labels).
from conformance.providers.kind import (
    ADVERTISE_TIMEOUT_S,
    GPU_NODE_SELECTOR,
    GPU_RESOURCE,
    SIMULATED_GPUS,
    KindProvider,
)
from conformance.providers.terraform import RunWorkspace, TerraformProvider, slug


class KindTerraformProvider(TerraformProvider):
    name = "kind"
    module = "kind"
    # kind and helm: the run loads images and installs KubeRay with them; docker runs the nodes.
    tools = ("kind", "helm", "docker")

    def check_settings(self) -> None:
        self.workers()
        self.gpu_workers()
        self.node_image_version()
        # The nodes are containers: without an answering engine, apply would fail half-way.
        try:
            answered = (
                subprocess.run(
                    ["docker", "info", "--format", "{{.ServerVersion}}"],
                    capture_output=True,
                    timeout=30,
                    check=False,
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            answered = False
        if not answered:
            raise UsageError(
                "the Docker engine does not answer (`docker info` failed)", "start Docker and run again"
            )

    workers = staticmethod(KindProvider.workers)
    gpu_workers = staticmethod(KindProvider.gpu_workers)

    def up(self) -> Cluster:
        """The cluster, with simulated GPUs on its GPU workers (idempotent, like the patch itself)."""
        cluster = super().up()
        if self.gpu_workers() == 0:
            return cluster
        core = client.CoreV1Api(api_client(cluster.target))
        nodes = core.list_node(label_selector=GPU_NODE_SELECTOR).items
        if len(nodes) != self.gpu_workers():
            raise ProvisioningError(
                f"the kind cluster has {len(nodes)} node(s) labelled {GPU_NODE_SELECTOR}, "
                f"{self.gpu_workers()} asked for",
                "check infra/terraform/kind's gpu_node_labels",
            )
        for node in nodes:
            advertise_simulated_gpus(
                core, node.metadata.name, GPU_RESOURCE, SIMULATED_GPUS, ADVERTISE_TIMEOUT_S
            )
        return cluster

    @staticmethod
    def node_image_version() -> str | None:
        version = os.environ.get("KRC_KIND_NODE_IMAGE_VERSION")
        if version is not None and not re.fullmatch(r"v1\.\d+\.\d+(@sha256:[0-9a-f]{64})?", version):
            raise UsageError(
                f"KRC_KIND_NODE_IMAGE_VERSION={version!r} is not a kindest/node tag", "use e.g. v1.35.0"
            )
        return version

    # Images this provider builds are packed by Python, as any user: buildah needs root to mount.
    image_packer = "tar"

    @property
    def cache(self) -> Path:
        """Where the Go builds and the image archive are cached (a user's own directory unless root)."""
        return cache_dir()

    def cluster_name(self) -> str:
        if self._cluster is not None and self._cluster.facts.get("cluster_name"):
            return str(self._cluster.facts["cluster_name"])
        if self.run_id is None:
            raise UsageError("provider kind has no cluster of this run", "run the conformance run first")
        return cluster_name(self.run_id)

    def load_image(self, archive: Any) -> None:
        """Load a docker-archive (images.ImageArchive) into every node of this run's cluster."""
        argv = ["kind", "load", "image-archive", str(archive.path), "--name", self.cluster_name()]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProvisioningError(
                f"`kind load image-archive` of {archive.ref} failed: {exc}", "check kind"
            ) from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ProvisioningError(
                f"`kind load image-archive` of {archive.ref} failed: {last}",
                f"try it by hand: {' '.join(argv)}",
            )

    def variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        variables: dict[str, Any] = {
            # The run id makes the name unique, so parallel runs on one machine never share a cluster.
            "cluster_name": cluster_name(workspace.run_id),
            "worker_count": self.workers(),
            "gpu_worker_count": self.gpu_workers(),
            "kubeconfig_path": str(workspace.kubeconfig),
            "run_id": slug(workspace.run_id)[:63],
        }
        version = self.node_image_version()
        if version:
            variables["node_image_version"] = version
        return variables

    def facts(self, outputs: dict[str, Any]) -> dict[str, object]:
        return {"cluster_name": outputs.get("cluster_name", ""), "simulated_gpus": self.gpu_workers() > 0}


def cluster_name(run_id: str) -> str:
    """The kind cluster of run `run_id` (a DNS label of at most 40 characters)."""
    return f"krc-{slug(run_id)}"[:40].rstrip("-")
