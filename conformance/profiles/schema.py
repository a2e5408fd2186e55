"""The profile file as a typed schema (pydantic v2): what a profile YAML may say, and nothing else.

Strict on purpose: an unknown key is refused (a mistyped threshold would otherwise be ignored and
a built-in default used), booleans are only `true`/`false` (`"no"` is an error), a version or a
quantity written as a number is refused (`2.10` would become 2.1), and closed sets are enums.
`conformance/profiles/profile.schema.json` is generated from these models (`kuberay-conformance
profile schema`), so users can validate profiles in their CI; a unit test keeps it equal.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from conformance.timeouts import Timeouts

MAX_NODES_PER_GROUP = 4  # local worker nodes per group: each costs about 200 MiB idle and a share of 2 cores

# source: built from the checkout --kuberay-source names, installed with its own chart (or kustomize).
KubeRayInstall = Literal["local-build", "helm", "existing", "source"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
# How the Gateway API implementation gets there (see conformance/install/gateway*.py).
GatewayInstall = Literal["local-build", "istio", "envoy-gateway", "existing"]
HeadServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]

Text = Annotated[str, StringConstraints(min_length=1)]
# A Ray version goes into image tags and `rayVersion`: letters, digits, dots, dashes.
RayVersion = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][0-9A-Za-z._-]*$")]
Quantity = Annotated[str, StringConstraints(pattern=r"^[0-9.]+([eE][0-9]+|[A-Za-z]*)$")]
Seconds = Annotated[float, Field(gt=0)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Images(Section):
    ray: Text = Field(description="Ray image; {ray_version} is filled in per Ray version tested")
    redis: Text = Field(description="Redis image for the GCS fault-tolerance checks")
    pull_policy: PullPolicy


class KubeRay(Section):
    version: Text = Field(description="KubeRay release, e.g. v1.7.0 (read back under install: existing)")
    install: KubeRayInstall
    namespace: Text
    feature_gates: dict[Text, bool] = Field(
        default_factory=dict, description="overrides of the chart's feature-gate defaults"
    )
    env: dict[Text, str] = Field(
        default_factory=dict,
        description="operator container environment variables, as KubeRay reads them (quote values)",
    )
    extra_args: list[Text] = Field(
        default_factory=list, description="operator arguments after the chart's (the last value wins)"
    )


class Resources(Section):
    head: dict[Text, Quantity] = Field(description="requests = limits of the Ray head, e.g. {cpu: '1'}")
    worker: dict[Text, Quantity] = Field(description="requests = limits of each Ray worker")


class TimeoutsSection(Section):
    """Seconds per kind of wait; `--timeout KIND=SECONDS` overrides one."""

    apply: Seconds = Timeouts.apply
    ready: Seconds = Timeouts.ready
    scale: Seconds = Timeouts.scale
    cleanup: Seconds = Timeouts.cleanup
    upgrade: Seconds = Timeouts.upgrade
    check: Seconds = Field(Timeouts.check, description="hard cap on one check (pytest-timeout)")


class Thresholds(Section):
    """Limits the suites assert against. Adding one is one line here (and its use in a suite)."""

    upgrade_failed_requests: Annotated[int, Field(ge=0)] = Field(
        0, description="failed requests allowed during a RayService upgrade"
    )
    ttl_slack_s: Annotated[float, Field(ge=0)] = Field(
        15, description="a TTL-driven deletion may come this long after its TTL"
    )
    deadline_slack_s: Annotated[float, Field(ge=0)] = Field(
        30, description="a RayJob deadline, or a RayService initializing timeout, may end it this long after"
    )
    scale_down_slack_s: Annotated[float, Field(ge=0)] = Field(
        30, description="idle workers gone within idleTimeoutSeconds + this"
    )
    scale_down_early_slack_s: Annotated[float, Field(ge=0)] = Field(
        5, description="idle workers not gone before idleTimeoutSeconds - this"
    )
    deletion_delay_slack_s: Annotated[float, Field(ge=0)] = Field(
        15, description="an upgraded-away RayCluster gone within rayClusterDeletionDelaySeconds + this"
    )
    traffic_share_tolerance_percent: Annotated[float, Field(ge=0, le=100)] = Field(
        10, description="answers from a cluster within this many points of its route weight"
    )
    route_propagation_allowance_s: Annotated[float, Field(ge=0)] = Field(
        3, description="answers this soon after an HTTPRoute weight change are not held against the weights"
    )
    head_loss_outage_s: Annotated[float, Field(ge=0)] = Field(
        120, description="a RayService whose head was lost answers again within this many seconds"
    )
    gcs_restart_failed_requests: Annotated[int, Field(ge=0)] = Field(
        0, description="failed requests allowed while a GCS fault-tolerant RayService's gcs_server restarts"
    )
    node_loss_silence_s: Annotated[float, Field(ge=0)] = Field(
        5, description="a RayService that lost a worker node's replica and proxy is silent no longer"
    )

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(f"no threshold {key!r}; known: {', '.join(type(self).model_fields)}")
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """Mapping-style read, for code written against the old dict of thresholds."""
        return getattr(self, key) if key in type(self).model_fields else default


class Gateway(Section):
    class_name: Text = Field(description="the GatewayClass RayService traffic goes through")
    install: GatewayInstall = "existing"


class Gpu(Section):
    resource: Text = Field(description="extended resource name, e.g. nvidia.com/gpu")
    count: Annotated[int, Field(ge=0)] = Field(description="GPUs per GPU node the checks may use")
    simulated: bool = Field(description="GPUs advertised by a status patch (local provider)")


NodeCount = Annotated[int, Field(ge=0, le=MAX_NODES_PER_GROUP)]


class LocalNodes(Section):
    cpu: NodeCount = Field(default=0, description="worker nodes without GPUs")
    gpu: NodeCount = Field(default=0, description="worker nodes with the simulated GPUs and the GPU taint")


class Local(Section):
    """What the local provider makes (other providers ignore it)."""

    nodes: LocalNodes = Field(
        default=LocalNodes(),
        description="worker node groups beside the control-plane node (KRC_LOCAL_NODES overrides them)",
    )


class Exposure(Section):
    head_service_type: HeadServiceType = "ClusterIP"


class ProfileDocument(Section):
    """One profile YAML file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, title="kuberay-conformance profile")

    name: Text
    description: Text
    ray_versions: list[RayVersion] = Field(min_length=1, description="Ray versions the checks run on")
    images: Images
    kuberay: KubeRay
    resources: Resources
    timeouts: TimeoutsSection = TimeoutsSection()
    thresholds: Thresholds = Thresholds()
    gateway: Gateway
    gpu: Gpu
    exposure: Exposure = Exposure()
    local: Local = Local()


def json_schema() -> str:
    """The published JSON Schema, as written to profile.schema.json."""
    return json.dumps(ProfileDocument.model_json_schema(), indent=2, sort_keys=True) + "\n"
