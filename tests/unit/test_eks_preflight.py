"""The EKS preflight: before `terraform apply`, refuse (exit 2, one line) a GPU type the module's zones
do not offer and vCPU quotas below what the node groups need.

Only the `aws` CLI boundary is faked (eks_preflight.run_aws): canned answers in the shapes the AWS CLI
prints. What AWS really answers for a given account cannot be checked here (docs/eks.md).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hcl2
import pytest
import standins as standin_tools
from hcl2 import SerializationOptions

from conformance.errors import EXIT_ENVIRONMENT, ProvisioningError
from conformance.providers import eks_preflight
from conformance.providers.eks import AVAILABILITY_ZONES, CPU_NODE_GROUP, KARPENTER_LIMITS, EksProvider
from conformance.providers.eks_preflight import AwsError, NodeGroup, check_capacity

EKS_MODULE = Path(__file__).resolve().parents[2] / "infra" / "terraform" / "eks"

VCPUS = {"m5.xlarge": 4, "g5.xlarge": 4, "g5.12xlarge": 48, "p4d.24xlarge": 96}
GPUS = {"g5.xlarge": 1, "g5.12xlarge": 4, "p4d.24xlarge": 8}


class FakeAws:
    """Answers like `aws ... --output json` for one region; records every call."""

    def __init__(
        self,
        zones: Sequence[str] = ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"),
        offered: dict[str, Sequence[str]] | None = None,
        quotas: dict[str, float] | None = None,
        applied: bool = True,
    ) -> None:
        self.zones = zones
        self.offered = offered or {}
        self.quotas = {"L-1216C47A": 32.0, "L-DB2E81BA": 8.0, "L-417A185B": 0.0, **(quotas or {})}
        self.applied = applied
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> Any:
        self.calls.append(list(args))
        verb = " ".join(args[:2])
        if verb == "ec2 describe-availability-zones":
            assert "Name=opt-in-status,Values=opt-in-not-required" in args
            # Out of order on purpose: the module sorts, so must the preflight.
            return {"AvailabilityZones": [{"ZoneName": z} for z in reversed(self.zones)]}
        if verb == "ec2 describe-instance-type-offerings":
            assert args[args.index("--location-type") + 1] == "availability-zone"
            wanted = args[-1].split("Values=", 1)[1].split(",")
            where = {t: self.offered.get(t, self.zones) for t in wanted}
            return {
                "InstanceTypeOfferings": [
                    {"InstanceType": t, "LocationType": "availability-zone", "Location": z}
                    for t, zones in where.items()
                    for z in zones
                ]
            }
        if verb == "ec2 describe-instance-types":
            types = args[args.index("--instance-types") + 1 :]
            return {
                "InstanceTypes": [
                    {
                        "InstanceType": t,
                        "VCpuInfo": {"DefaultVCpus": VCPUS[t]},
                        **({"GpuInfo": {"Gpus": [{"Count": GPUS[t], "Name": "A10G"}]}} if t in GPUS else {}),
                    }
                    for t in types
                ]
            }
        if verb == "service-quotas get-service-quota":
            if not self.applied:
                raise AwsError("An error occurred (NoSuchResourceException)", code="NoSuchResourceException")
            return {"Quota": {"Value": self.quotas[args[args.index("--quota-code") + 1]]}}
        if verb == "service-quotas get-aws-default-service-quota":
            return {"Quota": {"Value": self.quotas[args[args.index("--quota-code") + 1]]}}
        raise AssertionError(f"unexpected aws call {args}")


CPU = NodeGroup("cpu", "m5.xlarge", 4)


def gpu(instance: str = "g5.xlarge", nodes: int = 1) -> NodeGroup:
    return NodeGroup("gpu", instance, nodes)


def refused(aws: FakeAws, gpu_group: NodeGroup, karpenter: tuple[int, int] | None = None) -> str:
    with pytest.raises(ProvisioningError) as error:
        check_capacity(aws, "us-west-2", CPU, gpu_group, 2, karpenter)
    assert error.value.exit_code == EXIT_ENVIRONMENT
    line = error.value.one_line()
    assert "\n" not in line
    return line


def test_enough_of_everything_passes_with_read_only_calls() -> None:
    aws = FakeAws()
    check_capacity(aws, "us-west-2", CPU, gpu(), 2, None)
    assert {c[1].split("-")[0] for c in aws.calls} <= {"describe", "get"}, "a preflight only reads"


def test_a_gpu_type_offered_only_outside_the_module_zones_is_refused() -> None:
    # The module takes the first two zones by name; the GPU type is only in c and d.
    line = refused(FakeAws(offered={"g5.xlarge": ("us-west-2d", "us-west-2c")}), gpu())
    assert "g5.xlarge (gpu node group) is not offered in the zones the EKS module uses in us-west-2" in line
    assert "(us-west-2a, us-west-2b; it is offered in us-west-2c, us-west-2d)" in line
    assert "KRC_EKS_REGION" in line and "KRC_EKS_GPU_INSTANCE_TYPE" in line


def test_a_gpu_type_the_region_does_not_offer_says_so() -> None:
    line = refused(FakeAws(offered={"g5.xlarge": ()}), gpu())
    assert "not offered anywhere in us-west-2" in line


def test_a_gpu_type_in_one_of_the_module_zones_is_enough() -> None:
    check_capacity(FakeAws(offered={"g5.xlarge": ("us-west-2b",)}), "us-west-2", CPU, gpu(), 2, None)


def test_zero_g_quota_of_a_new_account_is_refused_naming_the_quota_and_the_need() -> None:
    line = refused(FakeAws(quotas={"L-DB2E81BA": 0.0}), gpu(nodes=2))
    assert "'Running On-Demand G and VT instances' in us-west-2 is 0 vCPUs, below the 8" in line
    assert "2 x g5.xlarge (4 vCPUs, gpu)" in line
    assert "request an increase of quota L-DB2E81BA" in line


def test_the_gpu_need_is_vcpus_of_the_type_times_the_group_max() -> None:
    # g5.12xlarge has 48 vCPUs: one node needs 48, more than the 8 granted.
    line = refused(FakeAws(quotas={"L-DB2E81BA": 47.0}), gpu("g5.12xlarge"))
    assert "is 47 vCPUs, below the 48" in line
    check_capacity(FakeAws(quotas={"L-DB2E81BA": 48.0}), "us-west-2", CPU, gpu("g5.12xlarge"), 2, None)


def test_p_instances_are_held_against_the_p_quota() -> None:
    line = refused(FakeAws(quotas={"L-417A185B": 64.0, "L-DB2E81BA": 1000.0}), gpu("p4d.24xlarge"))
    assert "L-417A185B" in line and "below the 96" in line


def test_the_standard_quota_must_hold_the_cpu_group_at_its_max() -> None:
    # 4 x m5.xlarge = 16 vCPUs; new accounts are sometimes granted less.
    line = refused(FakeAws(quotas={"L-1216C47A": 8.0}), gpu())
    assert "Running On-Demand Standard" in line and "below the 16" in line and "L-1216C47A" in line


def test_a_quota_never_applied_to_the_account_is_read_from_aws_defaults() -> None:
    aws = FakeAws(quotas={"L-DB2E81BA": 0.0}, applied=False)
    assert "is 0 vCPUs" in refused(aws, gpu())
    assert ["service-quotas", "get-aws-default-service-quota"] in [c[:2] for c in aws.calls]


def test_other_quota_errors_are_not_mistaken_for_defaults() -> None:
    def denied(args: Sequence[str]) -> Any:
        if args[0] == "service-quotas":
            raise AwsError(
                "`aws service-quotas get-service-quota` failed: (AccessDeniedException)",
                code="AccessDeniedException",
            )
        return FakeAws()(args)

    with pytest.raises(AwsError, match="AccessDeniedException"):
        check_capacity(denied, "us-west-2", CPU, gpu(), 2, None)


def test_karpenter_pools_count_at_their_limits() -> None:
    # CPU pool: 64 vCPUs on top of the managed group's 16; GPU pool: 4 GPUs = 4 x g5.xlarge = 16 vCPUs.
    line = refused(FakeAws(quotas={"L-1216C47A": 79.0, "L-DB2E81BA": 1000.0}), gpu(), karpenter=(64, 4))
    assert "below the 80" in line and "16 x m5.xlarge (4 vCPUs, karpenter cpu)" in line
    line = refused(FakeAws(quotas={"L-1216C47A": 80.0, "L-DB2E81BA": 19.0}), gpu(), karpenter=(64, 4))
    assert "below the 20" in line and "4 x g5.xlarge (4 vCPUs, karpenter gpu)" in line


# --- the figures the preflight uses are the module's -------------------------------------------------


def _variables() -> dict[str, Any]:
    options = SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
    parsed = hcl2.loads((EKS_MODULE / "variables.tf").read_text(), serialization_options=options)
    return {name: body for block in parsed["variable"] for name, body in block.items()}


def test_the_cpu_group_and_zone_count_are_the_module_defaults() -> None:
    variables = _variables()
    assert variables["cpu_node_group"]["default"] == CPU_NODE_GROUP
    assert variables["availability_zone_count"]["default"] == AVAILABILITY_ZONES


def test_karpenter_limits_are_the_nodepool_charts() -> None:
    template = (EKS_MODULE / "charts" / "karpenter-nodepools" / "templates" / "nodepools.yaml").read_text()
    cpu = re.search(r"limits:\s*\n\s*cpu: (\d+)", template)
    gpus = re.search(r"limits:\s*\n\s*nvidia.com/gpu: (\d+)", template)
    assert cpu and gpus
    assert (int(cpu.group(1)), int(gpus.group(1))) == KARPENTER_LIMITS


# --- the provider refuses before anything is created --------------------------------------------------

RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"tool": os.path.basename(sys.argv[0]), "args": sys.argv[1:]}}) + "\\n")
"""


def test_the_provider_refuses_before_terraform_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = standin_tools.install(tmp_path, monkeypatch, RECORDER, "terraform", "aws", "helm")
    monkeypatch.setenv("KRC_TERRAFORM", str(tmp_path / "bin" / "terraform"))
    monkeypatch.setenv("KRC_TF_STATE_DIR", str(tmp_path / "state"))
    backend = tmp_path / "backend.hcl"
    backend.write_text('bucket = "krc-state"\n')
    for name, value in {
        "KRC_EKS_REGION": "us-west-2",
        "KRC_EKS_MAX_RUN_MINUTES": "90",
        "KRC_TF_BACKEND": "s3",
        "KRC_TF_BACKEND_CONFIG": str(backend),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KRC_EKS_KARPENTER", raising=False)
    aws = FakeAws(quotas={"L-DB2E81BA": 0.0})

    def identity_then_fake(args: Sequence[str]) -> Any:
        return {"Account": "123456789012"} if args[:2] == ["sts", "get-caller-identity"] else aws(args)

    monkeypatch.setattr(eks_preflight, "run_aws", lambda region: identity_then_fake)
    with pytest.raises(ProvisioningError, match="L-DB2E81BA"):
        EksProvider(run_id="eks-1-1").up()
    assert [c for c in standin_tools.calls(log) if c["tool"] == "terraform"] == []
    assert not (tmp_path / "state").exists(), "nothing written, nothing to clean up"
