"""Where a check's time goes: the per-check phase timers of summary.json (`tests[].phases`).

The plugin times what surrounds a check (waiting for CPU room, for the exclusive turn, for
earlier namespaces to go; pytest's setup, call and teardown). Inside the call, the waits say
what they wait for through `spent`: a RayCluster or RayService becoming ready is the check
building what it observes (`ready_wait_s`), a wait for earlier checks' namespaces to go before its
load is `settle_wait_s`; the rest of the call is the behaviour under test
(`behaviour_s`), of which `hold_s` is time the check chose to watch that nothing happens and
`kuberay_wait_s` is waiting for KubeRay to do what the check asked. What is left after those
two is the harness's own work: applying, exec, load, reading.

Only the main thread counts, and only the outermost span: a sampler thread's waits or a wait
inside a ready wait would count the same seconds twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# Kinds a wait can declare (the keys of `tests[].phases` inside the call).
READY = "ready_wait_s"
SETTLE = "settle_wait_s"  # earlier checks' namespaces going, waited for inside the call (exclusive.py)
HOLD = "hold_s"
KUBERAY = "kuberay_wait_s"
IN_CALL = (READY, SETTLE, HOLD, KUBERAY)
NOT_BEHAVIOUR = (READY, SETTLE)


class _Ledger:
    """The seconds per kind of this process's current call; a worker runs one check at a time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.depth = 0


_ledger = _Ledger()


def reset() -> None:
    """A new call phase begins: forget what the previous one spent."""
    _ledger.seconds.clear()
    _ledger.depth = 0


def taken() -> dict[str, float]:
    """The seconds spent per kind since `reset`, rounded for the summary."""
    return {kind: round(seconds, 3) for kind, seconds in _ledger.seconds.items()}


@contextmanager
def spent(kind: str) -> Iterator[None]:
    """Count the time inside as `kind`, unless an enclosing span already counts it."""
    if threading.current_thread() is not threading.main_thread() or _ledger.depth:
        yield
        return
    _ledger.depth += 1
    started = time.monotonic()
    try:
        yield
    finally:
        _ledger.depth -= 1
        _ledger.seconds[kind] = _ledger.seconds.get(kind, 0.0) + time.monotonic() - started


def call_phases(call_s: float, inside: dict[str, float]) -> dict[str, float]:
    """The call as setup inside it (ready waits) and the behaviour under test, with the behaviour's
    chosen and KubeRay waits (never negative: the clocks differ by microseconds)."""
    phases = {kind: inside[kind] for kind in IN_CALL if inside.get(kind)}
    phases["behaviour_s"] = round(max(call_s - sum(inside.get(k, 0.0) for k in NOT_BEHAVIOUR), 0.0), 3)
    return phases
