"""The timeline format suites write for the report: recording, writing, reading back, refusing bad files."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance.report import timelines
from conformance.report.timelines import Recorder, TimelineError, parse


class FakeClock:
    """Seconds that advance only when told: recorded times are then exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_recorder_stamps_samples_with_seconds_since_its_start_and_saves_them(tmp_path: Path) -> None:
    clock = FakeClock()
    recorder = Recorder(tmp_path, "conformance/suites/test_autoscaling.py::test_up[ray2.58.0]", clock)
    workers = recorder.autoscaling("workers under 20 queued tasks")
    workers.replicas("small", 1)
    clock.now += 4.5
    workers.event("load started")
    workers.replicas("small", 3, desired=4)
    upgrade = recorder.upgrade("blue/green")
    upgrade.second(t=0, requests=50, errors={"http_503": 2}, p50_ms=11.0, p99_ms=80.0, traffic={"old": 100})
    paths = recorder.save()
    assert [p.name for p in paths] == [
        "conformance-suites-test-autoscaling-py-test-up-ray2-58-0-1.json",
        "conformance-suites-test-autoscaling-py-test-up-ray2-58-0-2.json",
    ]
    loaded, problems = timelines.load_all(tmp_path)
    assert problems == []
    scaling, traffic = loaded
    assert scaling.series == {"small": [(0.0, 1), (4.5, 3)]}
    assert scaling.desired == {"small": [(4.5, 4)]}
    assert [(e.t, e.label) for e in scaling.events] == [(4.5, "load started")]
    assert traffic.seconds[0].error_total == 2
    assert traffic.seconds[0].traffic == {"old": 100.0}


@dataclass
class LoadSecond:
    """The shape of conformance.load.analysis.Second, which `from_load` takes."""

    t: int
    requests: int
    errors: dict = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    backends: dict = field(default_factory=dict)


def test_load_analysis_seconds_become_a_traffic_split_in_percent(tmp_path: Path) -> None:
    upgrade = Recorder(tmp_path, "t.py::test_u").upgrade("incremental")
    upgrade.from_load([LoadSecond(0, 40, {}, 10.0, 20.0, {"old": 30, "new": 10}), LoadSecond(1, 0)])
    first, idle = upgrade.timeline.seconds
    assert first.traffic == {"old": 75.0, "new": 25.0}
    assert idle.traffic == {} and idle.p50_ms is None  # a second without answers has no split


def test_a_timeline_round_trips_through_json() -> None:
    data = {
        "schema": 1,
        "kind": "upgrade",
        "check": "t.py::test_u",
        "title": "x",
        "events": [{"t": 3, "label": "spec changed"}],
        "seconds": [
            {"t": 0, "requests": 10, "errors": {}, "p50_ms": None, "p99_ms": None},
            {
                "t": 1,
                "requests": 10,
                "errors": {"timeout": 1},
                "p50_ms": 5,
                "p99_ms": 9,
                "traffic": {"a": 50},
            },
        ],
    }
    assert parse(json.loads(json.dumps(parse(data).to_json()))).to_json() == parse(data).to_json()


def _autoscaling(**changes: object) -> dict:
    data = {
        "schema": 1,
        "kind": "autoscaling",
        "check": "t.py::test_a",
        "title": "",
        "series": {"g": [[0, 1]]},
    }
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema": 2}, "schema must be 1"),
        ({"kind": "chaos"}, "kind must be one of autoscaling, upgrade"),
        ({"check": ""}, "check must be a non-empty string"),
        ({"series": {"g": [[0, -1]]}}, "replicas must be a whole number"),
        ({"series": {"g": [[0, 1.5]]}}, "replicas must be a whole number"),
        ({"series": {"g": [[0, True]]}}, "must be a number"),
        ({"series": {"g": [[5, 1], [2, 1]]}}, "t goes back from 5.0 to 2.0"),
        ({"series": {"g": [[0]]}}, "each point is [t, replicas]"),
        ({"events": [{"t": "soon", "label": "x"}]}, "events[].t must be a number"),
        ({"series": None}, "series must be an object"),
    ],
)
def test_a_malformed_timeline_is_refused_with_the_field_named(changes: dict, message: str) -> None:
    with pytest.raises(TimelineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(_autoscaling(**changes))


def test_upgrade_seconds_must_be_numbers_in_order() -> None:
    base = {"schema": 1, "kind": "upgrade", "check": "t.py::u", "title": ""}
    with pytest.raises(TimelineError, match=r"seconds\[0\]\.requests must be a number"):
        parse({**base, "seconds": [{"t": 0, "requests": "many"}]})
    with pytest.raises(TimelineError, match="seconds: t goes back"):
        parse({**base, "seconds": [{"t": 2, "requests": 1}, {"t": 1, "requests": 1}]})
    with pytest.raises(TimelineError, match="errors and traffic are objects"):
        parse({**base, "seconds": [{"t": 0, "requests": 1, "errors": [1]}]})


def test_unreadable_files_are_reported_and_the_rest_still_load(tmp_path: Path) -> None:
    folder = tmp_path / "timelines"
    folder.mkdir()
    (folder / "a.json").write_text("{not json")
    (folder / "b.json").write_text(json.dumps(_autoscaling(kind="nope")))
    (folder / "c.json").write_text(json.dumps(_autoscaling()))
    loaded, problems = timelines.load_all(tmp_path)
    assert [t.check for t in loaded] == ["t.py::test_a"]
    assert [p.split(":")[0] for p in problems] == ["a.json", "b.json"]


def test_writing_refuses_what_the_report_could_not_read(tmp_path: Path) -> None:
    recording = Recorder(tmp_path, "t.py::test_a").autoscaling("x")
    recording.replicas("g", 2, t=5)
    recording.replicas("g", 1, t=1)
    with pytest.raises(TimelineError, match="t goes back"):
        timelines.write(tmp_path, recording.timeline)
    assert not (tmp_path / "timelines").exists() or not list((tmp_path / "timelines").iterdir())
