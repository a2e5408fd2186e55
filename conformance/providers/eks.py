"""The `eks` provider: a VPC, an EKS cluster, CPU and GPU managed node groups and the NVIDIA device
plugin, made by infra/terraform/eks (eks-gpu.yml runs it on demand).

It refuses to start without a budget guard: KRC_EKS_MAX_RUN_MINUTES. The deadline is tagged on
every resource (expires-at) and a guard process, started before the first apply, stops the run and
destroys the cluster when the deadline passes, even with --keep-cluster and even if the run died.

Settings: KRC_EKS_REGION (or AWS_REGION / AWS_DEFAULT_REGION), KRC_EKS_MAX_RUN_MINUTES (required),
KRC_EKS_GPU_INSTANCE_TYPE (default g5.xlarge), KRC_EKS_GPU_NODES (desired GPU nodes, default 1),
KRC_EKS_KARPENTER=1 (also install Karpenter), KRC_OWNER (default GITHUB_ACTOR or USER).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from typing import Any

from conformance.errors import UsageError
from conformance.providers.terraform import (
    RunWorkspace,
    Terraform,
    TerraformProvider,
    env_count,
    start_guard,
    stop_guard,
    utc_rfc3339,
)

# Regions with EKS and the g5/g6 GPU families; the same list is the `region` validation in
# infra/terraform/eks/variables.tf (a unit test keeps the two equal).
SUPPORTED_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "eu-west-1",
    "eu-west-2",
    "eu-central-1",
    "eu-north-1",
    "ap-northeast-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-south-1",
    "ca-central-1",
)
# NVIDIA GPU instance families the NVIDIA AMI types run on.
GPU_FAMILIES = ("g4dn", "g5", "g6", "g6e", "gr6", "p3", "p4d", "p4de", "p5", "p5e", "p5en")
DEFAULT_GPU_INSTANCE_TYPE = "g5.xlarge"
# An EKS cluster takes about 15 minutes to create and 10 to destroy; less than this cannot finish a run.
MIN_RUN_MINUTES = 45
MAX_RUN_MINUTES = 12 * 60


class EksProvider(TerraformProvider):
    name = "eks"
    module = "eks"
    # aws: credentials and the kubeconfig's token plugin; helm: the device plugin and KubeRay.
    tools = ("aws", "helm")

    def __init__(self, run_id: str | None = None, keep_cluster: bool = False) -> None:
        super().__init__(run_id, keep_cluster)
        self._deadline: float | None = None

    # -- settings, all checked before anything is created ------------------------------------------

    @staticmethod
    def region() -> str:
        region = (
            os.environ.get("KRC_EKS_REGION")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
        )
        if not region:
            raise UsageError("provider eks needs a region", "set KRC_EKS_REGION (or AWS_REGION)")
        if region not in SUPPORTED_REGIONS:
            raise UsageError(
                f"region {region} is not supported by provider eks",
                f"use one of: {', '.join(SUPPORTED_REGIONS)}",
            )
        return region

    @staticmethod
    def max_run_minutes() -> int:
        text = os.environ.get("KRC_EKS_MAX_RUN_MINUTES", "")
        if not text:
            raise UsageError(
                "provider eks refuses to start without a budget guard",
                f"set KRC_EKS_MAX_RUN_MINUTES ({MIN_RUN_MINUTES}-{MAX_RUN_MINUTES}); "
                "the cluster is destroyed when it has run that long",
            )
        return env_count("KRC_EKS_MAX_RUN_MINUTES", text, MIN_RUN_MINUTES, MAX_RUN_MINUTES)

    @staticmethod
    def gpu_instance_type() -> str:
        instance = os.environ.get("KRC_EKS_GPU_INSTANCE_TYPE", DEFAULT_GPU_INSTANCE_TYPE)
        family = instance.split(".", 1)[0]
        if not re.fullmatch(r"[a-z0-9-]+\.[a-z0-9]+", instance) or family not in GPU_FAMILIES:
            raise UsageError(
                f"KRC_EKS_GPU_INSTANCE_TYPE={instance!r} is not an NVIDIA GPU instance type",
                f"use one of the families {', '.join(GPU_FAMILIES)}, e.g. g5.xlarge",
            )
        return instance

    @staticmethod
    def gpu_nodes() -> int:
        return env_count("KRC_EKS_GPU_NODES", "1", 0, 4)

    @staticmethod
    def owner() -> str:
        return (
            os.environ.get("KRC_OWNER")
            or os.environ.get("GITHUB_ACTOR")
            or os.environ.get("USER")
            or "unknown"
        )

    def check_settings(self) -> None:
        region = self.region()
        self.max_run_minutes()
        self.gpu_instance_type()
        self.gpu_nodes()
        _require_credentials(region)

    # -- the run ---------------------------------------------------------------------------------------

    def variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        # The budget starts now, before init: a hung apply counts against it too.
        self._deadline = time.time() + self.max_run_minutes() * 60
        gpu_nodes = self.gpu_nodes()
        return {
            "region": self.region(),
            # Short and unique per run: IAM name prefixes derived from it are limited to 38 characters.
            "cluster_name": "krc-" + hashlib.sha256(workspace.run_id.encode()).hexdigest()[:10],
            "owner": self.owner(),
            "run_id": workspace.run_id,
            "expires_at": utc_rfc3339(self._deadline),
            "gpu_node_group": {
                "instance_types": [self.gpu_instance_type()],
                "min_size": 0,
                "max_size": max(gpu_nodes, 1),
                "desired_size": gpu_nodes,
            },
            "enable_karpenter": os.environ.get("KRC_EKS_KARPENTER", "") == "1",
        }

    def before_apply(self, terraform: Terraform) -> None:
        assert self._deadline is not None  # set by variables(), which up() calls first
        start_guard(terraform, self._deadline, os.getpid())

    def after_destroy(self, workspace: RunWorkspace) -> None:
        stop_guard(workspace)

    def facts(self, outputs: dict[str, Any]) -> dict[str, object]:
        return {
            "region": outputs.get("region", ""),
            "cluster_name": outputs.get("cluster_name", ""),
            "gpu_taint": outputs.get("gpu_taint", ""),
            "gpu_node_labels": outputs.get("gpu_node_labels", {}),
        }


def _require_credentials(region: str) -> None:
    """Ask AWS who we are: the one check that proves the credentials work, and creates nothing."""
    argv = ["aws", "sts", "get-caller-identity", "--region", region, "--output", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired as exc:
        raise UsageError(
            "`aws sts get-caller-identity` did not answer in 60s", "check the network and region"
        ) from exc
    try:
        account = json.loads(done.stdout).get("Account") if done.returncode == 0 else None
    except ValueError:
        account = None
    if not account:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(
            f"no usable AWS credentials ({said})",
            "configure credentials (in CI: an OIDC-assumed role via aws-actions/configure-aws-credentials)",
        )
