"""SIGTERM as an exception, so that cleanup blocks run as they do for Ctrl-C.

Raising from a signal handler can land in code that swallows exceptions (an at-fork
hook, a __del__): "Exception ignored in ...". The signal is therefore also remembered,
and long loops call `check()` at safe points to raise it again.

It can also land inside `threading`'s own lock handling (a Condition between waking and
re-taking its lock while a thread starts), which then fails with "release unlocked lock"
instead of the interrupt. Thread starts, joins and event waits in the main thread therefore
go through the helpers below, which hold interrupts off for their few milliseconds: a handler
installed with `on()` that fires meanwhile is run when the block ends. (Blocking the signal in
the main thread would not do: the kernel then hands it to any other thread, and Python runs the
handler in the main thread all the same.)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

# How long an event wait holds interrupts off at a time.
_EVENT_SLICE_S = 0.5


class Interrupted(BaseException):
    """SIGTERM arrived; what the command created is being cleaned up."""


_received: str | None = None
_holding = 0  # nesting depth of held_off() in the main thread (signal handlers run only there)
_pending: tuple[Callable[[int, Any], Any], int, Any] | None = None


def _on_signal(signum: int, _frame: object) -> NoReturn:
    global _received  # noqa: PLW0603 - one process-wide flag, set by the handler
    _received = signal.Signals(signum).name
    raise Interrupted(_received)


def on(signum: int, handler: Callable[[int, Any], Any]) -> None:
    """Install `handler` for `signum`, run at once unless interrupts are held off, then when they no
    longer are."""

    def deferring(sig: int, frame: Any) -> None:
        global _pending  # noqa: PLW0603 - the one signal waiting for held_off() to end
        if _holding:
            _pending = _pending or (handler, sig, frame)
            return
        handler(sig, frame)

    signal.signal(signum, deferring)


def install() -> None:
    on(signal.SIGTERM, _on_signal)
    on(signal.SIGINT, signal.default_int_handler)


def check() -> None:
    """Raise Interrupted if a signal came in, even if its first raise was swallowed."""
    if _received is not None:
        raise Interrupted(_received)


@contextmanager
def held_off() -> Iterator[None]:
    """Run the block with interrupts held off; one that came meanwhile is handled right after it,
    in the caller's code. In other threads (no handler runs there) it does nothing."""
    global _holding, _pending  # noqa: PLW0603 - see above
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if not _holding and _pending is not None:
            (handler, sig, frame), _pending = _pending, None
            handler(sig, frame)


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
