"""Checks that must run alone: `@pytest.mark.exclusive("why")`, and how a parallel run keeps them alone.

A check is exclusive when it changes state every other check depends on (the operator's pod
deleted or killed, the operator downgraded and upgraded, a second operator that reconciles
outside its own namespace, CRDs, feature gates), or when it measures latency and failed
requests under load: a neighbour's Ray clusters competing for the same two cores slow the
server, and the load generator's self-check (rate shortfall, schedule lag) sees only the
generator, so a slow server would pass for KubeRay dropping requests.

The design is a reader/writer lock over the whole run, taken by every check around its
setup, call and teardown: an ordinary check holds it shared, an exclusive one holds it
alone. It is two `flock(2)` files in the run folder, so it needs no coordinator, no
scheduler of our own, and dies with a crashed worker (the kernel drops its locks). A
turnstile in front gives the exclusive check precedence: once it waits, no new check
starts, and the running ones drain. The exclusive checks are also moved to the end of the
collection (every worker sorts the same way, as xdist requires), so in practice they run
as one serial phase after the parallel one, instead of draining the workers once each.

Alone also means after the checks before it have gone: a namespace still terminating holds
Ray clusters KubeRay is deleting and Gateways the Gateway implementation is unloading. Seen on
2026-12-01 (1.7.0 from source, Traefik): the first second of an upgrade check's load got HTTP 500
while Traefik rebuilt its configuration for the previous check's vanishing HTTPRoute. So an
exclusive check that measures under load (`quiet=True` on its marker) first waits until no
namespace of the run is terminating (`settle`); the others do not wait, as a terminating namespace
takes up to a minute (pods get their 30 s of grace). A check whose quiet matters only to its load
(`quiet=BEFORE_LOAD`) waits just before its load generator's first request instead: building its
RayService, a minute or more, overlaps the earlier namespaces' going, which otherwise cost about
28 s of the serial phase before each of 26 load checks (issue 44's reading of a whole main job).

Why not two pytest sessions (a parallel one, then a serial one)? The environment, the
Lease, the summary, junit.xml and the Allure results would have to be carried across two
sessions; one session with a lock keeps all of that as it is.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from conformance.kube.wait import WaitTimeout, poll_until

MARKER = "exclusive"
BEFORE_LOAD = "before_load"
MARKER_HELP = (
    "exclusive(why, quiet=False): the check changes cluster-wide state (operator, CRDs, feature gates) or "
    "measures under load, and runs while no other check does; quiet=True: also after earlier checks' "
    f"namespaces are gone; quiet='{BEFORE_LOAD}': they are gone before its load generator's first request"
)


def is_exclusive(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def needs_quiet(item: pytest.Item) -> bool:
    """An exclusive check that needs the cluster to itself from its start: it starts after earlier
    checks' teardown."""
    return _quiet(item) is True


def needs_quiet_load(item: pytest.Item) -> bool:
    """An exclusive check whose load must not meet earlier checks' teardown (`BEFORE_LOAD`)."""
    return _quiet(item) == BEFORE_LOAD


def _quiet(item: pytest.Item) -> object:
    marker = item.get_closest_marker(MARKER)
    return marker.kwargs.get("quiet", False) if marker is not None else False


def exclusive_last(items: list[pytest.Item]) -> None:
    """Move the exclusive checks to the end, keeping the order within each group (a stable sort)."""
    items.sort(key=is_exclusive)


class ClusterTurn:
    """The reader/writer lock of one run, in `folder` (shared by the run's worker processes)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._turnstile = folder / "turnstile.lock"
        self._checks = folder / "checks.lock"

    @contextmanager
    def hold(self, exclusive: bool) -> Iterator[None]:
        with _opened(self._turnstile) as turnstile, _opened(self._checks) as checks:
            # Through the turnstile one at a time: a waiting exclusive check keeps it closed.
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(checks, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(checks, fcntl.LOCK_UN)


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def terminating(api: client.ApiClient, selector: str) -> list[str]:
    """The namespaces matching `selector` (the run's label) that are being deleted."""
    found = client.CoreV1Api(api).list_namespace(label_selector=selector).items
    return sorted(ns.metadata.name for ns in found if ns.status and ns.status.phase == "Terminating")


def settle(api: client.ApiClient, selector: str, timeout: float) -> str:
    """Wait until no namespace of the run terminates; returns a note when it ran out of time.

    Running out is said, not raised: a namespace held by a finalizer is the finding of the check
    that made it, and this check may still run (its measurement is then less quiet than meant)."""
    try:
        poll_until(
            lambda: True if not terminating(api, selector) else None,
            what="the namespaces of earlier checks to be gone",
            timeout=timeout,
            every=1.0,
        )
    except WaitTimeout:
        return f"namespaces still terminating after {timeout:.0f}s: {', '.join(terminating(api, selector))}"
    return ""
