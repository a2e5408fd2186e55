"""A conformance run on pytest-xdist: one controller process, several worker processes.

The controller takes the cluster lock, prepares the environment once (before any worker
starts), hands each worker what it needs to attach to it (`workerinput`), collects every
check's result from the reports the workers send, writes the run's files once and tears
the environment down once. A worker attaches without installing anything, runs checks, and
sends each result with its report: xdist carries a report's extra attributes to the
controller as they are (they must be JSON-serializable).

On an interrupt the controller asks every worker to stop (SIGTERM: a worker's check then
ends as it does on Ctrl-C, its fixtures removing what it made) and waits for them before
xdist's own teardown, which kills a worker that has not exited within 10 s.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import signal
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from conformance import interrupts
from conformance.report.summary import TestResult

# How xdist hands out checks: one at a time, in collection order (the exclusive checks last).
# Not worksteal, which splits the whole list between the workers up front: the worker holding
# the tail then reaches the exclusive checks while the others still have many ordinary ones, and
# every exclusive check stops them all, so the two phases interleave and run nearly serially
# (seen on 2026-12-02 with 2 workers). `load` keeps about two checks queued per worker.
DISTRIBUTION = ("--dist", "load", "--maxschedchunk", "1")
# `--workers auto` before the cluster exists (kind, eks): xdist starts with one worker in the
# arguments; the controller sets the real count after it made the cluster (set_worker_count).
RECOUNT_OPTION = "--conformance-recount-workers"


def set_worker_count(config: pytest.Config, count: int) -> None:
    """Make xdist start `count` workers. xdist reads its `tx` specs when its own sessionstart
    (trylast) creates the nodes, after the run's controller prepared the cluster (tryfirst)."""
    config.option.numprocesses = count
    config.option.tx = ["popen"] * count


WORKERINPUT_KEY = "kuberay_conformance"
RESULT_ATTR = "kuberay_conformance_result"
SECRETS_ATTR = "kuberay_conformance_secrets"
STOP_GRACE_S = 120  # a check's fixtures delete its namespace and stop what it started


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config: pytest.Config) -> bool:
    """True in the process that distributes checks to workers (pytest -n N, N > 0)."""
    return (
        not is_worker(config)
        and bool(getattr(config.option, "numprocesses", None))
        and (getattr(config.option, "dist", "no") != "no")
    )


def worker_id(config: pytest.Config) -> str:
    return str(config.workerinput.get("workerid", "")) if is_worker(config) else ""


# -- controller -> worker ---------------------------------------------------------------


def pack(state: dict[str, Any]) -> str:
    """What a worker needs, as a string xdist can carry (its channel takes only simple types).

    Pickle, since both ends run this very code: the state holds the harness's own dataclasses.
    """
    return base64.b64encode(pickle.dumps(state)).decode()


def unpack(config: pytest.Config) -> dict[str, Any]:
    """The controller's state in a worker; empty where the controller runs no conformance run."""
    packed = config.workerinput.get(WORKERINPUT_KEY)
    return pickle.loads(base64.b64decode(packed)) if packed else {}


# -- worker -> controller ---------------------------------------------------------------


def attach_result(report: pytest.TestReport, result: TestResult, secrets: dict[str, str]) -> None:
    setattr(report, RESULT_ATTR, asdict(result))
    if secrets:
        setattr(report, SECRETS_ATTR, dict(secrets))


def result_of(report: pytest.TestReport) -> TestResult | None:
    data = getattr(report, RESULT_ATTR, None)
    return TestResult(**data) if data else None


def secrets_of(report: pytest.TestReport) -> dict[str, str]:
    return dict(getattr(report, SECRETS_ATTR, None) or {})


# -- stopping workers -------------------------------------------------------------------


def stop(pids: list[int], folder: Path, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM each worker once and wait until it has cleaned up (`mark_done`) or exited.

    Returns the PIDs that did neither within `grace_s`. A worker that finished its session
    stays alive until xdist closes its channel, so its mark, not its exit, is what counts.
    """
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s

    def busy(pid: int) -> bool:
        return running(pid) and not (folder / f"done-{pid}").exists()

    left = [pid for pid in pids if busy(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)  # poll-interval: there is no event for another process's cleanup
        left = [pid for pid in left if busy(pid)]
    return left


def mark_done(folder: Path) -> None:
    """In a worker, once its session is over (every fixture torn down): nothing of it is left to wait for."""
    (folder / f"done-{os.getpid()}").touch()


def running(pid: int) -> bool:
    """Alive and not a zombie (a worker that exited stays one until xdist reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def stop_once_on_signal() -> None:
    """In a worker: the first SIGINT or SIGTERM ends the check; later ones do not cut its cleanup short.

    Ctrl-C reaches every process of the terminal's group, and the controller sends SIGTERM
    besides; a second interrupt in the middle of a fixture's teardown would leave its namespace.
    """

    def first(signum: int, _frame: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        interrupts.on(sig, first)
