"""SIGTERM as an exception, so that cleanup blocks run as they do for Ctrl-C.

Raising from a signal handler can land in code that swallows exceptions (an at-fork
hook, a __del__): "Exception ignored in ...". The signal is therefore also remembered,
and long loops call `check()` at safe points to raise it again.

It can also land inside `threading`'s own lock handling (a Condition between waking and
re-taking its lock while a thread starts), which then fails with "release unlocked lock"
instead of the interrupt. Thread starts, joins and event waits in the main thread therefore
go through the helpers below, which hold interrupts off for their few milliseconds.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# The signals that become exceptions (KeyboardInterrupt, Interrupted) in the main thread.
INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})
# How long an event wait holds interrupts off at a time.
_EVENT_SLICE_S = 0.5


class Interrupted(BaseException):
    """SIGTERM arrived; what the command created is being cleaned up."""


_received: str | None = None


def _on_signal(signum: int, _frame: object) -> NoReturn:
    global _received  # noqa: PLW0603 - one process-wide flag, set by the handler
    _received = signal.Signals(signum).name
    raise Interrupted(_received)


def install() -> None:
    signal.signal(signal.SIGTERM, _on_signal)


def check() -> None:
    """Raise Interrupted if a signal came in, even if its first raise was swallowed."""
    if _received is not None:
        raise Interrupted(_received)


@contextmanager
def held_off() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread for the block; one that came meanwhile is handled
    right after it, in the caller's code. Threads started inside inherit the block, which is
    what we want: only the main thread should take them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def start_thread(thread: threading.Thread) -> None:
    with held_off():
        thread.start()


def join_thread(thread: threading.Thread, timeout: float | None = None) -> None:
    with held_off():
        thread.join(timeout)


def wait_event(event: threading.Event, timeout: float) -> bool:
    """`event.wait(timeout)` that an interrupt ends within half a second, cleanly."""
    deadline = time.monotonic() + timeout
    while not event.is_set() and (left := deadline - time.monotonic()) > 0:
        with held_off():
            event.wait(min(left, _EVENT_SLICE_S))
    return event.is_set()
