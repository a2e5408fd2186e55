"""Small facts about a node that the providers, the capacity count and the checks ask."""

from __future__ import annotations

from typing import Any


def is_node_ready(node: Any) -> bool:
    """The node's Ready condition is True."""
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def allocatable(node: Any, resource: str) -> int:
    """How many of an extended resource (nvidia.com/gpu) the node offers the scheduler."""
    return int((node.status.allocatable or {}).get(resource, "0"))
