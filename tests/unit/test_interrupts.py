"""An interrupt never lands inside threading's own lock handling (where it turns into
"release unlocked lock"), and is still handled right after."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from conformance import interrupts
from conformance.progress import progress


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    interrupts.install()
    yield
    interrupts._received = None
    signal.signal(signal.SIGTERM, before)


def test_a_sigterm_inside_held_off_is_handled_right_after(sigterm_raises: None) -> None:
    reached_the_end_of_the_block = False
    with pytest.raises(interrupts.Interrupted), interrupts.held_off():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes of the main thread
            pass
        assert interrupts._pending is not None
        reached_the_end_of_the_block = True
    assert reached_the_end_of_the_block
    assert interrupts._pending is None


def test_a_sigterm_the_kernel_gives_another_thread_is_held_off_too(sigterm_raises: None) -> None:
    """A thread that does not block SIGTERM may take it; Python still runs the handler in the main
    thread, and held_off must hold it there."""
    other = threading.Thread(target=lambda: threading.Event().wait(0.5), daemon=True)
    other.start()
    with pytest.raises(interrupts.Interrupted), interrupts.held_off():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # only `other` can take it now
            other.join()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for _ in range(1000):
            pass
        assert interrupts._pending is not None


def test_progress_starts_and_joins_its_thread_with_interrupts_held_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, int] = {}
    start, join = threading.Thread.start, threading.Thread.join

    def recording_start(thread: threading.Thread) -> None:
        seen["start"] = interrupts._holding
        start(thread)

    def recording_join(thread: threading.Thread, timeout: float | None = None) -> None:
        seen["join"] = interrupts._holding
        join(thread, timeout)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    monkeypatch.setattr(threading.Thread, "join", recording_join)
    with progress("a wait", stream=io.StringIO()):
        assert interrupts._holding == 0
    assert seen == {"start": 1, "join": 1}


def test_an_event_wait_is_ended_by_a_sigterm(sigterm_raises: None) -> None:
    never = threading.Event()
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    with pytest.raises(interrupts.Interrupted):
        interrupts.wait_event(never, timeout=30)
    timer.join()


def test_an_event_wait_returns_when_set_or_when_the_time_is_up() -> None:
    event = threading.Event()
    assert interrupts.wait_event(event, timeout=0.1) is False
    event.set()
    assert interrupts.wait_event(event, timeout=30) is True
