"""Small facts about a node that the providers, the capacity count and the checks ask."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from conformance.kube.wait import wait_for

SIMULATED_GPU_LABEL = "kuberay-conformance.io/simulated-gpu"


def is_node_ready(node: Any) -> bool:
    """The node's Ready condition is True."""
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def allocatable(node: Any, resource: str) -> int:
    """How many of an extended resource (nvidia.com/gpu) the node offers the scheduler."""
    return int((node.status.allocatable or {}).get(resource, "0"))


def advertise_simulated_gpus(
    core: client.CoreV1Api, node: str, resource: str, count: int, timeout: float
) -> None:
    """Advertise `resource` (nvidia.com/gpu) as an extended resource, as a device plugin would on a
    GPU node, and label the node so reports can say the GPUs are simulated. Returns once the kubelet
    has copied it into allocatable, so whatever runs next can schedule on it."""
    core.patch_node_status(node, {"status": {"capacity": {resource: str(count)}}})
    wait_for(
        core.list_node,
        lambda seen: (seen.status.allocatable or {}).get(resource) == str(count),
        what=f"{resource}={count} to be allocatable on {node}",
        timeout=timeout,
        field_selector=f"metadata.name={node}",
    )
    labels = {SIMULATED_GPU_LABEL: "true" if count else "false", "nvidia.com/gpu.count": str(count)}
    core.patch_node(node, {"metadata": {"labels": labels}})
