"""Removing a check's namespace once the check is over, without waiting out its pods' grace.

Ray pods take their whole termination grace (30 s by default): bash is their PID 1 and ignores
SIGTERM, so Ray's processes go on using the CPU of a small machine for those 30 s, next to the
checks still running, and a check that waits for earlier namespaces to be gone (exclusive.settle)
waits that long too. Once a namespace terminates, the API server admits no new pod in it, so its
pods can be ended with a short grace without a controller recreating them behind our back.
"""

from __future__ import annotations

import contextlib

from kubernetes import client
from kubernetes.client.exceptions import ApiException

POD_GRACE_AFTER_CHECK_S = 1  # SIGTERM, then SIGKILL a second later: nothing is measured any more


def delete(core: client.CoreV1Api, name: str) -> None:
    """Delete the namespace, then its pods with a short grace (best effort: the namespace goes anyway)."""
    core.delete_namespace(name)
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_pod(name, grace_period_seconds=POD_GRACE_AFTER_CHECK_S)
