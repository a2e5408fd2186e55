"""The `eks` provider: a VPC, an EKS cluster, CPU and GPU managed node groups and the NVIDIA device
plugin, made by infra/terraform/eks (eks-gpu.yml runs it on demand).

It refuses to start without a budget guard: KRC_EKS_MAX_RUN_MINUTES. The deadline is tagged on
every resource (expires-at) and a guard process, started before the first apply, stops the run and
destroys the cluster when the deadline passes, even with --keep-cluster and even if the run died.

It refuses to start without remote state (KRC_TF_BACKEND + KRC_TF_BACKEND_CONFIG), on a laptop as
in CI: a machine that dies or sleeps takes local state and the budget guard with it, and only remote
state lets the reaper (eks_reaper.py, .github/workflows/eks-reaper.yml) or anyone else destroy what
it left. And it asks AWS, read-only, whether the node groups can get their instances
(eks_preflight.py) before `apply` creates anything billable.

Settings: KRC_EKS_REGION (or AWS_REGION / AWS_DEFAULT_REGION), KRC_EKS_MAX_RUN_MINUTES (required),
KRC_EKS_GPU_INSTANCE_TYPE (default g5.xlarge), KRC_EKS_GPU_NODES (desired GPU nodes, default 1),
KRC_EKS_KARPENTER=1 (also install Karpenter), KRC_OWNER (default GITHUB_ACTOR or USER).
`down` with a run id this machine has no record of destroys that run from remote state.
docs/eks.md says how to set up the AWS side.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from typing import Any

from conformance.errors import UsageError
from conformance.providers import eks_preflight
from conformance.providers.eks_preflight import AwsError, NodeGroup
from conformance.providers.terraform import (
    Backend,
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

# The CPU node group, passed to the module as `cpu_node_group` (equal to its default in
# infra/terraform/eks/variables.tf; a unit test keeps them equal) so the preflight counts the same
# sizes the module launches.
CPU_NODE_GROUP: dict[str, Any] = {
    "instance_types": ["m5.xlarge"],
    "min_size": 1,
    "max_size": 4,
    "desired_size": 3,
}
# Zones the VPC spans (the module's `availability_zone_count`): the preflight checks these zones.
AVAILABILITY_ZONES = 2
# Karpenter's NodePool limits in infra/terraform/eks/charts/karpenter-nodepools: vCPUs of the CPU
# pool, nvidia.com/gpu of the GPU pool (a unit test reads them from the template).
KARPENTER_LIMITS = (64, 4)


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

    @classmethod
    def gpu_node_group(cls) -> dict[str, Any]:
        nodes = cls.gpu_nodes()
        return {
            "instance_types": [cls.gpu_instance_type()],
            "min_size": 0,
            "max_size": max(nodes, 1),
            "desired_size": nodes,
        }

    @staticmethod
    def karpenter() -> bool:
        return os.environ.get("KRC_EKS_KARPENTER", "") == "1"

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
        gpu = self.gpu_node_group()
        require_remote_state()
        aws = eks_preflight.run_aws(region)
        _require_credentials(aws)
        eks_preflight.check_capacity(
            aws,
            region,
            NodeGroup("cpu", CPU_NODE_GROUP["instance_types"][0], CPU_NODE_GROUP["max_size"]),
            NodeGroup("gpu", gpu["instance_types"][0], gpu["max_size"]),
            AVAILABILITY_ZONES,
            KARPENTER_LIMITS if self.karpenter() else None,
        )

    # -- the run ---------------------------------------------------------------------------------------

    def variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        # The budget starts now, before init: a hung apply counts against it too.
        self._deadline = time.time() + self.max_run_minutes() * 60
        return {
            "region": self.region(),
            "cluster_name": cluster_name(workspace.run_id),
            "owner": self.owner(),
            "run_id": workspace.run_id,
            "expires_at": utc_rfc3339(self._deadline),
            "availability_zone_count": AVAILABILITY_ZONES,
            "cpu_node_group": CPU_NODE_GROUP,
            "gpu_node_group": self.gpu_node_group(),
            "enable_karpenter": self.karpenter(),
        }

    def destroy_variables(self, workspace: RunWorkspace) -> dict[str, Any]:
        """What `destroy` of a run made elsewhere needs: the provider's region and the required
        inputs. The resources themselves come from the state, so sizes do not matter; the deadline
        is any valid time (nothing is tagged on a destroy)."""
        return {
            "region": self.region(),
            "cluster_name": cluster_name(workspace.run_id),
            "owner": self.owner(),
            "run_id": workspace.run_id,
            "expires_at": utc_rfc3339(time.time()),
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


def cluster_name(run_id: str) -> str:
    """Short and unique per run: IAM name prefixes derived from it are limited to 38 characters."""
    return "krc-" + hashlib.sha256(run_id.encode()).hexdigest()[:10]


def require_remote_state() -> None:
    """Remote state, always: local state dies with the machine, and the reaper cannot reach it."""
    if Backend.from_env() is None:
        raise UsageError(
            "provider eks keeps its Terraform state remotely, so that what a lost run leaves can be "
            "destroyed from elsewhere, and no backend is configured",
            "set KRC_TF_BACKEND=s3 and KRC_TF_BACKEND_CONFIG to a file naming bucket, key, region and "
            "use_lockfile (docs/eks.md)",
        )


def _require_credentials(aws: eks_preflight.AwsCall) -> None:
    """Ask AWS who we are: the one check that proves the credentials work, and creates nothing."""
    try:
        account = aws(["sts", "get-caller-identity"]).get("Account")
    except AwsError as exc:
        raise UsageError(
            f"no usable AWS credentials ({exc.cause})",
            "configure credentials (in CI: an OIDC-assumed role, docs/eks.md)",
        ) from exc
    if not account:
        raise UsageError(
            "`aws sts get-caller-identity` named no account", "configure credentials (docs/eks.md)"
        )
