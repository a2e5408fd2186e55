"""Waits built on watches: read the current state, then follow changes until a condition holds.

A wait that runs out raises `WaitTimeout` (a harness-side outcome: the behaviour could
not be observed in time), carrying what was last seen so the report can say why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from conformance.kube.target import CONNECT_TIMEOUT_S, WATCH_GRACE_S
from conformance.progress import progress
from conformance.stopwatch import HOLD, KUBERAY, spent

T = TypeVar("T")

# Watches are re-opened at most this often; the server ends them on its own schedule too.
_WATCH_CHUNK_S = 30
# A watch connection that broke or went silent: resumed from a fresh list.
_CONNECTION_LOST = (ReadTimeoutError, ProtocolError, ConnectionError)


class WaitTimeout(Exception):
    def __init__(self, what: str, timeout: float, last_seen: str) -> None:
        self.what = what
        self.timeout = timeout
        self.last_seen = last_seen
        super().__init__(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last_seen}")


def wait_for(
    list_fn: Callable[..., Any],
    predicate: Callable[[Any], bool],
    *,
    what: str,
    timeout: float,
    describe: Callable[[Any], str] = lambda obj: "present",
    **list_kwargs: Any,
) -> Any:
    """Wait until some object returned by `list_fn(**list_kwargs)` satisfies `predicate`; return it.

    `list_fn` is a kubernetes client list call (list_namespaced_pod, list_node, a custom
    object list); narrow it with field_selector/label_selector in `list_kwargs`.
    """
    deadline = time.monotonic() + timeout
    last_seen = "nothing yet"
    with spent(KUBERAY), progress(f"waiting for {what}") as line:
        while True:
            listing = list_fn(**list_kwargs)
            items = _items(listing)
            for item in items:
                last_seen = describe(item)
                if predicate(item):
                    return item
            line.update(last_seen)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(what, timeout, last_seen)
            for event in _watch(list_fn, _resource_version(listing), remaining, **list_kwargs):
                obj = event["object"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    last_seen = describe(obj)
                    line.update(last_seen)
                    if predicate(obj):
                        return obj
            if time.monotonic() >= deadline:
                raise WaitTimeout(what, timeout, last_seen)


def wait_gone(list_fn: Callable[..., Any], *, what: str, timeout: float, **list_kwargs: Any) -> None:
    """Wait until `list_fn(**list_kwargs)` returns no objects."""
    deadline = time.monotonic() + timeout
    with spent(KUBERAY), progress(f"waiting for {what} to be gone") as line:
        while True:
            listing = list_fn(**list_kwargs)
            remaining_items = _items(listing)
            if not remaining_items:
                return
            line.update(f"{len(remaining_items)} left")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"{what} to be gone", timeout, f"{len(remaining_items)} left")
            for event in _watch(list_fn, _resource_version(listing), remaining, **list_kwargs):
                if event["type"] == "DELETED":
                    break  # list again to see whether anything is left


def _watch(list_fn: Callable[..., Any], version: str, remaining: float, **list_kwargs: Any) -> Iterator[Any]:
    """Events of one watch from `version`, at most `_WATCH_CHUNK_S` long, with a client-side timeout.

    It ends quietly, for the caller to list again and resume, when the server says 410 Gone (the
    resource version expired) or the connection is lost or stays silent past its timeout: without
    that a dropped connection hangs a wait forever (the kubernetes client has no read timeout of
    its own). Stopping the iteration early closes the connection.
    """
    seconds = max(1, int(min(remaining, _WATCH_CHUNK_S)))
    stream = watch.Watch()
    try:
        yield from stream.stream(
            list_fn,
            resource_version=version,
            timeout_seconds=seconds,
            _request_timeout=(CONNECT_TIMEOUT_S, seconds + WATCH_GRACE_S),
            **list_kwargs,
        )
    except ApiException as exc:
        if exc.status != 410:
            raise
    except _CONNECTION_LOST:
        return
    finally:
        stream.stop()


def _items(listing: Any) -> list[Any]:
    return list(listing["items"] if isinstance(listing, dict) else listing.items)


def _resource_version(listing: Any) -> str:
    if isinstance(listing, dict):
        return listing["metadata"]["resourceVersion"]
    return listing.metadata.resource_version


def poll_until(
    check: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    every: float = 2.0,
    retry_on: tuple[type[Exception], ...] = (),
    describe: Callable[[], str] | None = None,
) -> T:
    """Ask `check` every `every` seconds until it returns something; WaitTimeout otherwise.

    Only for states no watch shows: what Ray reports about its nodes, what an app answers.
    `check` returns None for "not yet"; an exception in `retry_on` (say, while a head
    restarts) also counts as "not yet", any other ends the wait. `describe` says what a "not
    yet" saw, for the progress line and the timeout's last observed state.
    """
    deadline = time.monotonic() + timeout
    last_seen = "not yet"
    with spent(KUBERAY), progress(f"waiting for {what}") as line:
        while True:
            try:
                found = check()
            except retry_on as exc:
                found, last_seen = None, f"{type(exc).__name__}: {str(exc)[:200]}"
            if found is not None:
                return found
            if describe is not None:
                last_seen = describe()
            if time.monotonic() > deadline:
                raise WaitTimeout(what, timeout, last_seen)
            line.update(last_seen)
            time.sleep(every)  # poll-interval: the state asked about has no watch


@contextmanager
def behaviour(what: str) -> Iterator[None]:
    """Around a wait that *is* the behaviour under test: running out of time is a conformance failure.

    Outside it, a timed-out wait is a precondition that could not be observed (a harness error).
    """
    try:
        yield
    except WaitTimeout as exc:
        raise AssertionError(f"{what}: {exc}") from exc


def holds_for(
    list_fn: Callable[..., Any],
    predicate: Callable[[Any], bool],
    *,
    what: str,
    duration: float,
    **list_kwargs: Any,
) -> str:
    """Watch for `duration` seconds that every matching object keeps satisfying `predicate`.

    For checks that something does *not* happen (a cluster is not deleted): the window is
    the observation itself. Returns "" if it held, else what broke it.
    """
    listing = list_fn(**list_kwargs)
    items = _items(listing)
    if not items:
        return "no object matched at the start"
    broken = [_name_of(item) for item in items if not predicate(item)]
    if broken:
        return f"{', '.join(broken)} did not hold at the start"
    names = {_name_of(item) for item in items}
    deadline = time.monotonic() + duration
    with spent(HOLD), progress(f"watching that {what} for {duration:.0f}s"):
        version = _resource_version(listing)
        while (remaining := deadline - time.monotonic()) > 0:
            for event in _watch(list_fn, version, remaining, **list_kwargs):
                obj = event["object"]
                version = _resource_version_of(obj) or version
                if event["type"] == "DELETED":
                    return f"{_name_of(obj)} was deleted"
                if not predicate(obj):
                    return f"{_name_of(obj)} stopped holding ({event['type']})"
            if deadline - time.monotonic() <= 0:
                break
            # The watch ended (its chunk, 410 Gone or a lost connection): what changed in the gap
            # is in a fresh list, from whose version the next watch resumes.
            listing = list_fn(**list_kwargs)
            now_items = _items(listing)
            gone = names - {_name_of(item) for item in now_items}
            if gone:
                return f"{', '.join(sorted(gone))} was deleted"
            broken = [_name_of(item) for item in now_items if not predicate(item)]
            if broken:
                return f"{', '.join(broken)} stopped holding"
            version = _resource_version(listing)
    return ""


def stays_absent(list_fn: Callable[..., Any], *, what: str, duration: float, **list_kwargs: Any) -> str:
    """Watch for `duration` seconds that no object matches `list_fn(**list_kwargs)`.

    For checks that KubeRay makes nothing (a suspended or externally managed object): returns ""
    if nothing existed or appeared, else the first object seen.
    """
    listing = list_fn(**list_kwargs)
    deadline = time.monotonic() + duration
    with spent(HOLD), progress(f"watching that no {what} appears for {duration:.0f}s"):
        while True:
            present = _items(listing)
            if present:
                return f"{_name_of(present[0])} exists"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ""
            for event in _watch(list_fn, _resource_version(listing), remaining, **list_kwargs):
                if event["type"] == "ADDED":
                    return f"{_name_of(event['object'])} appeared"
            # The watch ended early: a fresh list covers the gap.
            listing = list_fn(**list_kwargs)


def _name_of(obj: Any) -> str:
    if isinstance(obj, dict):
        meta = obj.get("metadata", {})
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return f"{obj.metadata.namespace}/{obj.metadata.name}"


def _resource_version_of(obj: Any) -> str:
    if isinstance(obj, dict):
        return obj.get("metadata", {}).get("resourceVersion", "")
    return obj.metadata.resource_version
