"""Small facts about a pod that many checks ask: is it Ready, how often did its containers restart."""

from __future__ import annotations

from typing import Any


def is_ready(pod: Any) -> bool:
    """The pod's Ready condition is True (a pod being deleted may still say so; see `is_serving`)."""
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def is_serving(pod: Any) -> bool:
    """Ready and not being deleted: what a replacement pod must be."""
    return pod.metadata.deletion_timestamp is None and is_ready(pod)


def restarts(pod: Any, container: str | None = None) -> int:
    """Restarts of all the pod's containers, or of the one named `container`."""
    return sum(s.restart_count for s in pod.status.container_statuses or [] if container in (None, s.name))
