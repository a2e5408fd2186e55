"""CPU pressure (PSI): parsing, a check's figures, the starvation sentence, and admission's bounded wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conformance import node_pressure
from conformance.node_pressure import CheckPressure, Reading


def psi(avg10: float, total: int) -> str:
    return (
        f"some avg10={avg10:.2f} avg60=1.00 avg300=0.50 total={total}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )


def test_parse_reads_the_some_line() -> None:
    reading = node_pressure.parse(psi(66.33, 33956394), at=5.0)
    assert reading == Reading(66.33, 33956394, 5.0)


def test_parse_refuses_what_is_not_psi() -> None:
    with pytest.raises(ValueError, match="not a PSI file"):
        node_pressure.parse("cpu  123 0 456\n", at=0.0)


def test_this_kernel_has_psi() -> None:
    """The local provider names /proc/pressure/cpu: this machine's kernel must offer it."""
    assert node_pressure.read(node_pressure.PSI_CPU).avg10 >= 0


def test_figures_take_the_mean_from_the_running_total_and_the_highest_10s_figure() -> None:
    sampler = CheckPressure(Path("unused"))
    sampler.first = Reading(10.0, 1_000_000, at=100.0)
    sampler._take(sampler.first)
    sampler._take(Reading(90.0, 3_000_000, at=102.0))
    sampler._take(Reading(40.0, 6_000_000, at=110.0))
    # 5 s of waiting over 10 s of check: 50 %; the highest 10 s figure seen: 90 %.
    assert sampler.figures() == {"pressure_mean_percent": 50.0, "pressure_max_percent": 90.0}
    assert sampler.starved_s == pytest.approx(2.0)


def test_a_starved_check_gets_a_sentence_and_a_quiet_one_none() -> None:
    quiet = CheckPressure(Path("unused"))
    quiet._take(Reading(30.0, 0, at=0.0))
    assert quiet.starvation_note() == ""
    starved = CheckPressure(Path("unused"))
    starved._take(Reading(30.0, 0, at=0.0))
    starved._take(Reading(95.0, 0, at=1.0))
    starved._take(Reading(85.0, 0, at=3.0))
    note = starved.starvation_note()
    assert "CPU-starved" in note and "up to 95%" in note and "for 3 s" in note


def test_sampling_a_real_file_while_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "cpu"
    path.write_text(psi(20.0, 0))
    sampler = CheckPressure(path, every=0.05).start()
    time.sleep(0.2)  # poll-interval: the sampler's thread reads the file meanwhile
    path.write_text(psi(88.0, 500_000))
    time.sleep(0.2)  # poll-interval
    sampler.stop()
    figures = sampler.figures()
    assert figures["pressure_max_percent"] == 88.0
    assert 0 < figures["pressure_mean_percent"] <= 100.0
    assert sampler.starvation_note()


def test_admission_returns_at_once_when_there_is_room(tmp_path: Path) -> None:
    path = tmp_path / "cpu"
    path.write_text(psi(10.0, 0))
    assert node_pressure.wait_for_room(path, below=50, timeout=5) == (0.0, 10.0)


def test_admission_waits_until_the_pressure_falls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_pressure, "SAMPLE_EVERY_S", 0.05)
    path = tmp_path / "cpu"
    path.write_text(psi(90.0, 0))
    threading.Timer(0.3, lambda: path.write_text(psi(20.0, 0))).start()
    waited, pressure = node_pressure.wait_for_room(path, below=50, timeout=10)
    assert pressure == 20.0
    assert 0.2 <= waited < 5


def test_admission_gives_up_after_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_pressure, "SAMPLE_EVERY_S", 0.05)
    path = tmp_path / "cpu"
    path.write_text(psi(90.0, 0))
    waited, pressure = node_pressure.wait_for_room(path, below=50, timeout=0.3)
    assert pressure == 90.0
    assert 0.3 <= waited < 3


class _Item:
    """The one thing needs_room asks of a pytest item: its closest marker of a name."""

    def __init__(self, *markers: str) -> None:
        self._markers = {name: getattr(pytest.mark, name).mark for name in markers}

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self._markers.get(name)


def test_only_a_check_marked_no_pods_skips_the_wait_for_room() -> None:
    assert node_pressure.needs_room(_Item()) and node_pressure.needs_room(_Item("smoke"))
    assert not node_pressure.needs_room(_Item(node_pressure.NO_PODS_MARKER))
