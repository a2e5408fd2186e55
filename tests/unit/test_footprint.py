"""The harness's footprint figures: read from /proc for real processes, growth from a series."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from conformance import footprint
from conformance.footprint import Reading


def test_this_process_is_read_with_its_memory_files_and_connections() -> None:
    before = footprint.read(os.getpid(), "controller", 0.0)
    assert before is not None and before.rss_mib > 0 and before.fds > 0 and before.threads >= 1
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        during = footprint.read(os.getpid(), "controller", 1.0)
        client.close()
        accepted.close()
    assert during is not None
    assert during.tcp_connections == before.tcp_connections + 2  # both ends are this process's
    assert during.fds >= before.fds + 3  # the listener and both ends


def test_a_process_that_is_gone_gives_no_reading() -> None:
    assert footprint.read(2**22 + 1, "worker", 0.0) is None


def _series(pid: int, rss: list[float]) -> list[Reading]:
    return [Reading(float(i), pid, "worker", value, 20, 2, 5) for i, value in enumerate(rss)]


def test_growth_compares_the_last_quarter_with_the_first_per_process() -> None:
    steady = _series(1, [100, 101, 99, 100, 100, 102, 100, 101])
    leaking = _series(2, [100, 110, 120, 130, 140, 150, 160, 170])
    figures = footprint.figures(steady + leaking)
    worker = figures["worker"]
    assert isinstance(worker, dict)
    assert worker["peak_rss_mib"] == 170
    assert worker["growth"]["rss_mib"] == 60.0  # median(160, 170) - median(100, 110)
    assert footprint.figures(steady)["worker"]["growth"]["rss_mib"] == 0.0


def test_the_sampler_writes_its_samples_beside_the_run(tmp_path: Path) -> None:
    sampler = footprint.Sampler(tmp_path, lambda: [], every_s=0.05).start()
    figures = sampler.stop()
    lines = (tmp_path / footprint.FILE).read_text().splitlines()
    assert lines and figures["samples"] == len(lines)
    assert "controller" in figures
