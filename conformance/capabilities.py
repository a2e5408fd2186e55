"""What the cluster under test offers, detected rather than assumed.

A check names its preconditions with `@pytest.mark.requires(...)`; a missing one turns
the check into "not applicable" with the reason, never a pass and never a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.kube.nodes import allocatable

GATEWAY_CRD = "gateways.gateway.networking.k8s.io"
DEFAULT_STORAGE_CLASS = "storageclass.kubernetes.io/is-default-class"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(text: str) -> tuple[int, int, int]:
    match = _VERSION.search(text or "")
    if not match:
        return (0, 0, 0)
    major, minor, patch = match.groups()
    return (int(major), int(minor), int(patch or 0))


@dataclass(frozen=True)
class Capabilities:
    kubernetes_version: str
    kuberay_version: str
    feature_gates: dict[str, bool] = field(default_factory=dict)
    gpu_capacity: int = 0
    simulated_gpus: bool = False
    gateway_api: bool = False
    gateway_classes: tuple[str, ...] = ()
    # StorageClasses annotated as the default: a claim that names no class is provisioned by one.
    default_storage_classes: tuple[str, ...] = ()
    # Worker nodes the provider can stop, cut off and bring back (providers.base.NodeFaults).
    fault_nodes: tuple[str, ...] = ()

    def missing(self, need: str, gateway_class: str = "") -> str:
        """Why the precondition `need` is absent, or "" when it holds.

        `need` is one of: gpu, real_gpu, gateway_api, default_storage_class, node_faults,
        gate:<Name>, kuberay>=<version>, kuberay<<version>, kubernetes>=<version>,
        kubernetes<<version>. The `<` form is for
        behaviour a later release changed (the check of the later one says >= the same version).
        """
        plain = {
            "gpu": "" if self.gpu_capacity > 0 else "the cluster has no allocatable GPUs",
            "default_storage_class": ""
            if self.default_storage_classes
            else "the cluster has no default StorageClass to provision a claim that names none",
            "node_faults": ""
            if self.fault_nodes
            else "the provider cannot take a worker node away and back (the local provider with "
            "worker nodes can: the default profile's local.nodes, or KRC_LOCAL_NODES)",
        }
        if need in plain:
            return plain[need]
        if need == "real_gpu":
            if self.simulated_gpus:
                return "the cluster's GPUs are simulated (an extended resource on a CPU host): no CUDA device"
            return "" if self.gpu_capacity > 0 else "the cluster has no allocatable GPUs"
        if need == "gateway_api":
            if not self.gateway_api:
                return "the Gateway API CRDs are not installed"
            if gateway_class and gateway_class not in self.gateway_classes:
                return f"GatewayClass {gateway_class!r} does not exist"
            return ""
        if need.startswith("gate:"):
            gate = need.split(":", 1)[1]
            return "" if self.feature_gates.get(gate) else f"feature gate {gate} is off in the operator"
        for subject, have in (("kuberay", self.kuberay_version), ("kubernetes", self.kubernetes_version)):
            if need.startswith(f"{subject}>="):
                wanted = need.split(">=", 1)[1]
                if version_tuple(have) < version_tuple(wanted):
                    return f"{subject} {have} is older than {wanted}"
                return ""
            if need.startswith(f"{subject}<"):
                bound = need.split("<", 1)[1]
                if version_tuple(have) >= version_tuple(bound):
                    return f"{subject} {have} is {bound} or newer"
                return ""
        raise ValueError(f"unknown precondition {need!r}")


def detect(
    api: client.ApiClient,
    kuberay_version: str,
    feature_gates: dict[str, bool],
    simulated_gpus: bool,
    gpu_resource: str = "nvidia.com/gpu",
    fault_nodes: tuple[str, ...] = (),
) -> Capabilities:
    kubernetes_version = client.VersionApi(api).get_code().git_version
    nodes = client.CoreV1Api(api).list_node().items
    gpus = sum(allocatable(n, gpu_resource) for n in nodes)
    extensions = client.ApiextensionsV1Api(api)
    try:
        extensions.read_custom_resource_definition(GATEWAY_CRD)
        gateway_api = True
    except ApiException as exc:
        if exc.status != 404:
            raise
        gateway_api = False
    classes: tuple[str, ...] = ()
    if gateway_api:
        listing = client.CustomObjectsApi(api).list_cluster_custom_object(
            "gateway.networking.k8s.io", "v1", "gatewayclasses"
        )
        classes = tuple(item["metadata"]["name"] for item in listing["items"])
    storage_classes = client.StorageV1Api(api).list_storage_class().items
    default_classes = tuple(
        sorted(
            c.metadata.name
            for c in storage_classes
            if (c.metadata.annotations or {}).get(DEFAULT_STORAGE_CLASS) == "true"
        )
    )
    return Capabilities(
        kubernetes_version=kubernetes_version,
        kuberay_version=kuberay_version,
        feature_gates=feature_gates,
        gpu_capacity=gpus,
        simulated_gpus=simulated_gpus,
        gateway_api=gateway_api,
        gateway_classes=classes,
        default_storage_classes=default_classes,
        fault_nodes=fault_nodes,
    )
