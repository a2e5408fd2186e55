"""The per-check phase timers: only the outermost span and only the main thread count."""

from __future__ import annotations

import threading
import time

from conformance import stopwatch


def test_the_outermost_span_counts_once() -> None:
    stopwatch.reset()
    with stopwatch.spent(stopwatch.READY), stopwatch.spent(stopwatch.KUBERAY):
        time.sleep(0.05)  # poll-interval: the measured span itself
    taken = stopwatch.taken()
    assert set(taken) == {stopwatch.READY} and taken[stopwatch.READY] >= 0.05


def test_other_threads_do_not_count() -> None:
    stopwatch.reset()

    def sampler() -> None:
        with stopwatch.spent(stopwatch.KUBERAY):
            pass

    thread = threading.Thread(target=sampler)
    thread.start()
    thread.join()
    assert stopwatch.taken() == {}


def test_a_new_call_forgets_the_last() -> None:
    with stopwatch.spent(stopwatch.HOLD):
        pass
    stopwatch.reset()
    assert stopwatch.taken() == {}


def test_the_call_splits_into_ready_waits_and_the_behaviour() -> None:
    inside = {stopwatch.READY: 40.0, stopwatch.HOLD: 30.0, stopwatch.KUBERAY: 10.0}
    phases = stopwatch.call_phases(100.0, inside)
    assert phases == {"ready_wait_s": 40.0, "hold_s": 30.0, "kuberay_wait_s": 10.0, "behaviour_s": 60.0}


def test_the_behaviour_is_never_negative() -> None:
    assert stopwatch.call_phases(1.0, {stopwatch.READY: 1.0005})["behaviour_s"] == 0.0
