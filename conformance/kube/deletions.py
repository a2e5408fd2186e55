"""When objects were deleted, observed side by side rather than one wait after another.

Waiting for A to go, then for B, measures B's deletion no sooner than A's: an order assertion
on such times holds by construction. Here one watch per selection runs in its own thread from
`start()` on, and each keeps the moment its objects were first marked for deletion:

- an object with a grace period or a finalizer shows `deletionTimestamp` (the API server's clock;
  for pods it is the request time plus `deletionGracePeriodSeconds`, which is taken off again);
- an object removed at once shows only its DELETED event: the time it arrived here.

Both are wall-clock epoch seconds, comparable with a status time such as a RayJob's endTime when
the harness and the cluster share a clock (the local provider) or keep theirs in sync. A watch
that fails keeps its error, and `at()` raises it: a dead watcher never reads as "not deleted".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from conformance import interrupts
from conformance.kube.wait import WaitTimeout

_WATCH_CHUNK_S = 30


def parse_time(text: str) -> float:
    """An RFC 3339 time of the API (second resolution) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _meta(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj.get("metadata", {})
    meta = obj.metadata
    return {
        "name": meta.name,
        "deletionTimestamp": meta.deletion_timestamp.isoformat() if meta.deletion_timestamp else None,
        "deletionGracePeriodSeconds": meta.deletion_grace_period_seconds,
    }


def _version(obj: Any) -> str:
    if isinstance(obj, dict):
        return obj.get("metadata", {}).get("resourceVersion", "")
    return obj.metadata.resource_version or ""


def marked_at(obj: Any) -> float | None:
    """When deletion of `obj` was asked for, from its own metadata (None: not marked)."""
    meta = _meta(obj)
    stamp = meta.get("deletionTimestamp")
    if not stamp:
        return None
    return parse_time(str(stamp)) - float(meta.get("deletionGracePeriodSeconds") or 0)


@dataclass
class _Selection:
    what: str
    list_fn: Callable[..., Any]
    kwargs: dict[str, Any]
    at: float | None = None
    error: BaseException | None = None
    names: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


class DeletionTimes:
    def __init__(self) -> None:
        self._selections: dict[str, _Selection] = {}
        self._stop = threading.Event()

    def watch(self, what: str, list_fn: Callable[..., Any], **list_kwargs: Any) -> None:
        """Follow the objects `list_fn(**list_kwargs)` returns; there must be some when `start` runs."""
        self._selections[what] = _Selection(what, list_fn, list_kwargs)

    def start(self) -> DeletionTimes:
        for selection in self._selections.values():
            interrupts.start_thread(
                threading.Thread(target=self._follow, args=(selection,), daemon=True, name=selection.what)
            )
        return self

    def stop(self) -> None:
        """Let the watches end (at their next chunk): for a check that is done with them."""
        self._stop.set()

    def __enter__(self) -> DeletionTimes:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def at(self, what: str, timeout: float) -> float:
        """Epoch seconds when `what` was first marked for deletion; WaitTimeout if not within `timeout`."""
        selection = self._selections[what]
        interrupts.wait_event(selection.done, timeout)
        if selection.error is not None:
            raise RuntimeError(f"the watch on {what} failed: {selection.error}") from selection.error
        if selection.at is None:
            raise WaitTimeout(f"{what} to be deleted", timeout, f"still there: {selection.names}")
        return selection.at

    def _follow(self, selection: _Selection) -> None:
        try:
            self._observe(selection)
        except Exception as exc:  # noqa: BLE001 - kept, and raised by at()
            selection.error = exc
        finally:
            selection.done.set()

    def _observe(self, selection: _Selection, first: bool = True) -> None:
        listing = selection.list_fn(**selection.kwargs)
        items = listing["items"] if isinstance(listing, dict) else listing.items
        if not items:
            if first:
                raise LookupError(f"nothing matched {selection.what} when the watch began")
            self._record(selection, [time.time()])  # gone while the watch was re-opened: an upper bound
            return
        selection.names = [_meta(i)["name"] for i in items]
        if self._record(selection, [marked_at(i) for i in items]):
            return
        version = _version(listing)
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    selection.list_fn,
                    resource_version=version,
                    timeout_seconds=_WATCH_CHUNK_S,
                    **selection.kwargs,
                ):
                    obj = event["object"]
                    version = _version(obj) or version
                    seen = time.time() if event["type"] == "DELETED" else None
                    if self._record(selection, [marked_at(obj) or seen]):
                        stream.stop()
                        return
            except ApiException as exc:
                if exc.status != 410:
                    raise
                self._observe(selection, first=False)  # the version expired: list again
                return

    @staticmethod
    def _record(selection: _Selection, times: list[float | None]) -> bool:
        known = [t for t in times if t is not None]
        if known:
            selection.at = min(known)
        return bool(known)
