"""Will the EKS node groups get their instances? Asked of AWS before `terraform apply`.

New accounts have 0 vCPUs of quota for G instances, and not every zone offers every GPU type. Either
way the GPU node group fails after the control plane and the NAT gateway are already billed. So,
with read-only calls and before anything is created:

- the zones the module will use are the region's zones that need no opt-in, sorted by name, the
  first `availability_zone_count` (infra/terraform/eks/main.tf `local.azs`; the AWS provider's
  aws_availability_zones data source returns them sorted by ZoneName);
- each node group's instance type must be offered in at least one of those zones
  (`ec2 describe-instance-type-offerings --location-type availability-zone`);
- the account's on-demand vCPU quota of each instance class (Service Quotas) must hold every node
  group of that class at its max_size, Karpenter's NodePool limits included when it is enabled.
  Instances already running in the account count against the same quota; that is not subtracted
  here (it needs CloudWatch usage metrics), so a busy account can still run short.

Everything AWS-side goes through one function, `run_aws`, which runs the `aws` CLI and returns its
JSON: the unit tests replace it and nothing else.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.errors import ProvisioningError, UsageError

# `aws` argv (without --region/--output) -> parsed JSON; raises AwsError.
AwsCall = Callable[[Sequence[str]], Any]

AWS_TIMEOUT_S = 60


class AwsError(ProvisioningError):
    """An `aws` call failed; `code` is the error code AWS named (e.g. NoSuchResourceException)."""

    def __init__(self, cause: str, fix: str = "", code: str = "") -> None:
        super().__init__(cause, fix)
        self.code = code


def run_aws(region: str) -> AwsCall:
    """The real boundary: `aws ARGS --region R --output json`, its stdout parsed."""

    def call(args: Sequence[str]) -> Any:
        argv = ["aws", *args, "--region", region, "--output", "json"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=AWS_TIMEOUT_S, check=False)
        except FileNotFoundError as exc:
            raise AwsError("the AWS CLI (`aws`) is not on PATH", "install AWS CLI v2") from exc
        except subprocess.TimeoutExpired as exc:
            raise AwsError(
                f"`aws {args[0]} {args[1]}` did not answer in {AWS_TIMEOUT_S}s", "check the network"
            ) from exc
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no output"])[-1]
            found = re.search(r"\(([A-Za-z]+)\)", said)
            raise AwsError(f"`aws {args[0]} {args[1]}` failed: {said}", code=found.group(1) if found else "")
        try:
            return json.loads(done.stdout or "{}")
        except ValueError as exc:
            raise AwsError(f"`aws {args[0]} {args[1]}` printed no JSON", "check the AWS CLI version") from exc

    return call


# --- EC2 on-demand vCPU quotas (Service Quotas, service code ec2) ------------------------------------


@dataclass(frozen=True)
class QuotaClass:
    code: str
    name: str


STANDARD = QuotaClass("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
G_AND_VT = QuotaClass("L-DB2E81BA", "Running On-Demand G and VT instances")
P = QuotaClass("L-417A185B", "Running On-Demand P instances")

# The letters an instance family starts with -> its quota. Only the classes the module can launch:
# its CPU group (m5 by default, Karpenter's c and m) and the NVIDIA families of eks.GPU_FAMILIES.
_CLASS_BY_PREFIX = {
    **{letter: STANDARD for letter in ("a", "c", "d", "h", "i", "m", "r", "t", "z")},
    "g": G_AND_VT,
    "gr": G_AND_VT,
    "vt": G_AND_VT,
    "p": P,
}


def quota_class(instance_type: str) -> QuotaClass:
    prefix = re.match(r"[a-z]+", instance_type)
    found = _CLASS_BY_PREFIX.get(prefix.group(0) if prefix else "")
    if found is None:
        raise UsageError(
            f"instance type {instance_type} is of a class whose vCPU quota the preflight does not know",
            "use a standard (c, m, r, t), G or P instance type",
        )
    return found


# --- what the node groups need -------------------------------------------------------------------


@dataclass(frozen=True)
class NodeGroup:
    """One group of instances the run may launch, at its largest."""

    name: str
    instance_type: str
    max_nodes: int


@dataclass(frozen=True)
class InstanceFacts:
    vcpus: int
    gpus: int


def instance_facts(aws: AwsCall, types: Sequence[str]) -> dict[str, InstanceFacts]:
    """vCPUs and GPUs per instance type (`ec2 describe-instance-types`)."""
    answer = aws(["ec2", "describe-instance-types", "--instance-types", *sorted(set(types))])
    facts = {}
    for entry in answer.get("InstanceTypes", []):
        gpus = sum(int(g.get("Count", 0)) for g in entry.get("GpuInfo", {}).get("Gpus", []))
        facts[entry["InstanceType"]] = InstanceFacts(int(entry["VCpuInfo"]["DefaultVCpus"]), gpus)
    return facts


def module_zones(aws: AwsCall, count: int) -> list[str]:
    """The zones infra/terraform/eks uses: no opt-in needed, sorted by name, the first `count`."""
    answer = aws(
        ["ec2", "describe-availability-zones", "--filters", "Name=opt-in-status,Values=opt-in-not-required"]
    )
    return sorted(zone["ZoneName"] for zone in answer.get("AvailabilityZones", []))[:count]


def offered_zones(aws: AwsCall, types: Sequence[str]) -> dict[str, set[str]]:
    """Instance type -> the zones of the region that offer it."""
    answer = aws(
        [
            "ec2",
            "describe-instance-type-offerings",
            "--location-type",
            "availability-zone",
            "--filters",
            f"Name=instance-type,Values={','.join(sorted(set(types)))}",
        ]
    )
    found: dict[str, set[str]] = {}
    for offer in answer.get("InstanceTypeOfferings", []):
        found.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return found


def vcpu_quota(aws: AwsCall, quota: QuotaClass) -> float:
    """The account's applied quota; AWS's default where the account never had one applied."""
    args = ["--service-code", "ec2", "--quota-code", quota.code]
    try:
        answer = aws(["service-quotas", "get-service-quota", *args])
    except AwsError as exc:
        if exc.code != "NoSuchResourceException":
            raise
        answer = aws(["service-quotas", "get-aws-default-service-quota", *args])
    return float(answer["Quota"]["Value"])


# --- the checks ----------------------------------------------------------------------------------


def check_offered(
    region: str, groups: Sequence[NodeGroup], zones: Sequence[str], offers: dict[str, set[str]]
) -> None:
    for group in groups:
        where = sorted(offers.get(group.instance_type, set()))
        if not set(where) & set(zones):
            elsewhere = f"offered in {', '.join(where)}" if where else f"not offered anywhere in {region}"
            raise ProvisioningError(
                f"{group.instance_type} ({group.name} node group) is not offered in the zones the EKS module "
                f"uses in {region} ({', '.join(zones)}; it is {elsewhere})",
                "choose another region (KRC_EKS_REGION) or instance type (KRC_EKS_GPU_INSTANCE_TYPE)",
            )


def vcpu_needs(groups: Sequence[NodeGroup], facts: dict[str, InstanceFacts]) -> dict[QuotaClass, int]:
    needs: dict[QuotaClass, int] = {}
    for group in groups:
        quota = quota_class(group.instance_type)
        needs[quota] = needs.get(quota, 0) + facts[group.instance_type].vcpus * group.max_nodes
    return needs


def check_quotas(
    region: str, groups: Sequence[NodeGroup], facts: dict[str, InstanceFacts], aws: AwsCall
) -> None:
    for quota, need in vcpu_needs(groups, facts).items():
        have = vcpu_quota(aws, quota)
        if have < need:
            parts = " + ".join(
                f"{g.max_nodes} x {g.instance_type} ({facts[g.instance_type].vcpus} vCPUs, {g.name})"
                for g in groups
                if quota_class(g.instance_type) == quota
            )
            raise ProvisioningError(
                f"the account's quota '{quota.name}' in {region} is {have:g} vCPUs, below the {need} the "
                f"node groups need ({parts})",
                f"request an increase of quota {quota.code} (Service Quotas, EC2) in {region}, "
                "or lower KRC_EKS_GPU_NODES",
            )


def karpenter_groups(
    cpu: NodeGroup, gpu: NodeGroup, facts: dict[str, InstanceFacts], limits: tuple[int, int]
) -> list[NodeGroup]:
    """Karpenter's NodePools at their limits (charts/karpenter-nodepools): the CPU pool's vCPU limit
    counted in instances of the CPU group's type, the GPU pool's GPU limit in instances of the GPU type."""
    cpu_limit, gpu_limit = limits
    return [
        NodeGroup("karpenter cpu", cpu.instance_type, math.ceil(cpu_limit / facts[cpu.instance_type].vcpus)),
        NodeGroup(
            "karpenter gpu", gpu.instance_type, math.ceil(gpu_limit / max(facts[gpu.instance_type].gpus, 1))
        ),
    ]


def check_capacity(
    aws: AwsCall,
    region: str,
    cpu: NodeGroup,
    gpu: NodeGroup,
    zone_count: int,
    karpenter: tuple[int, int] | None,
) -> None:
    """Refuse (ProvisioningError, exit 2, one line) when a node group cannot get its instances.

    `karpenter`: the CPU (vCPUs) and GPU limits of its NodePools when it is enabled, else None."""
    groups = [cpu, gpu]
    zones = module_zones(aws, zone_count)
    check_offered(region, groups, zones, offered_zones(aws, [g.instance_type for g in groups]))
    facts = instance_facts(aws, [g.instance_type for g in groups])
    if karpenter is not None:
        groups += karpenter_groups(cpu, gpu, facts, karpenter)
    check_quotas(region, groups, facts, aws)
