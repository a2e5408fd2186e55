"""The `kind` provider: a kind cluster made by infra/terraform/kind (tehcyx/kind provider).

For CI runners that have a Docker engine and the internet (nightly-kind.yml). KubeRay is then
installed from its Helm chart by the run (profile `kind`), like on any cluster with a registry.
Settings: KRC_KIND_NODE_IMAGE_VERSION (kindest/node tag), KRC_KIND_WORKERS (worker nodes).
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from conformance.errors import UsageError
from conformance.providers.terraform import RunWorkspace, TerraformProvider, env_count, slug

DEFAULT_WORKERS = 2


class KindProvider(TerraformProvider):
    name = "kind"
    module = "kind"
    # kind and helm: the run loads images and installs KubeRay with them; docker runs the nodes.
    tools = ("kind", "helm", "docker")

    def check_settings(self) -> None:
        self.workers()
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

    @staticmethod
    def workers() -> int:
        return env_count("KRC_KIND_WORKERS", str(DEFAULT_WORKERS), 0, 6)

    @staticmethod
    def node_image_version() -> str | None:
        version = os.environ.get("KRC_KIND_NODE_IMAGE_VERSION")
        if version is not None and not re.fullmatch(r"v1\.\d+\.\d+(@sha256:[0-9a-f]{64})?", version):
            raise UsageError(
                f"KRC_KIND_NODE_IMAGE_VERSION={version!r} is not a kindest/node tag", "use e.g. v1.35.0"
            )
        return version

    def variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        variables: dict[str, Any] = {
            # The run id makes the name unique, so parallel runs on one machine never share a cluster.
            "cluster_name": f"krc-{slug(workspace.run_id)}"[:40].rstrip("-"),
            "worker_count": self.workers(),
            "kubeconfig_path": str(workspace.kubeconfig),
            "run_id": slug(workspace.run_id)[:63],
        }
        version = self.node_image_version()
        if version:
            variables["node_image_version"] = version
        return variables

    def facts(self, outputs: dict[str, Any]) -> dict[str, object]:
        return {"cluster_name": outputs.get("cluster_name", "")}
