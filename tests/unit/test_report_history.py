"""History across runs: regressions, fixes, flip-flops, area trends, and where earlier runs come from."""

import json
from pathlib import Path

from conformance.report import history
from conformance.report.history import RunPoint, check_key, compare
from conformance.report.summary import Summary
from conformance.report.summary import TestResult as Result


def _point(run_id: str, started: str, **outcomes: str) -> RunPoint:
    return RunPoint(
        run_id=run_id,
        started=started,
        outcomes={f"test_m.py::{k}": v for k, v in outcomes.items()},
        areas={f"test_m.py::{k}": "rayjob" for k in outcomes},
    )


def test_check_keys_ignore_where_the_suites_were_checked_out() -> None:
    assert (
        check_key("conformance/suites/test_rayjob.py::test_x[ray2.58.0]")
        == "test_rayjob.py::test_x[ray2.58.0]"
    )
    assert check_key("other/root/test_rayjob.py::test_x[ray2.58.0]") == "test_rayjob.py::test_x[ray2.58.0]"


def test_regressions_fixes_and_new_errors_compare_with_the_last_run_each_check_ran_in() -> None:
    earlier = [
        _point("r1", "2026-01-01T00:00:00+00:00", a="passed", b="failed", c="passed", d="passed", e="failed"),
        # r2 did not run a or b, and d was not applicable: the comparison looks further back.
        _point("r2", "2026-01-02T00:00:00+00:00", c="passed", d="not_applicable", e="error"),
    ]
    now = _point("r3", "2026-01-03T00:00:00+00:00", a="failed", b="passed", c="error", d="failed", e="passed")
    changes = compare(now, earlier)
    assert changes.regressions == ["test_m.py::a", "test_m.py::d"]
    assert changes.new_errors == ["test_m.py::c"]
    assert changes.fixed == ["test_m.py::b", "test_m.py::e"]
    assert changes.previous["test_m.py::d"] == "not_applicable"


def test_a_check_new_in_this_run_is_neither_regressed_nor_fixed() -> None:
    changes = compare(_point("r2", "2026-01-02", new="failed"), [_point("r1", "2026-01-01", old="passed")])
    assert (changes.regressions, changes.fixed, changes.new_errors) == ([], [], [])


def test_flips_count_pass_fail_changes_and_flaky_needs_two_and_a_pass_now() -> None:
    outcomes = ["passed", "failed", "passed", "error"]
    earlier = [_point(f"r{i}", f"2026-01-0{i + 1}", x=o) for i, o in enumerate(outcomes)]
    changes = compare(_point("now", "2026-01-09", x="passed", y="passed"), earlier)
    assert changes.flips == {"test_m.py::x": 4}
    assert history.is_flaky(changes.flips["test_m.py::x"], "passed")
    assert not history.is_flaky(1, "passed")  # once broken, now fixed: that is "fixed", not flaky
    assert not history.is_flaky(4, "failed")  # failing now is a failure, whatever came before
    assert "test_m.py::y" not in changes.flips


def test_area_trend_counts_only_checks_that_ran() -> None:
    point = _point("r1", "2026-01-01", a="passed", b="failed", c="not_applicable", d="skipped")
    point.areas["test_m.py::z"] = "gpu"
    point.outcomes["test_m.py::z"] = "passed"
    [trend] = history.area_trend([point])
    assert trend["areas"] == {"rayjob": {"passed": 1, "ran": 2}, "gpu": {"passed": 1, "ran": 1}}


def _summary(run_id: str, started: str, outcome: str) -> Summary:
    summary = Summary(run_id=run_id, started=started, provider="local", profile="default", versions={})
    summary.add(Result(id="conformance/suites/test_m.py::x", area="rayjob", outcome=outcome, duration_s=1))
    return summary


def test_collect_reads_run_folders_oldest_first_without_the_current_or_later_runs(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    for run_id, started in [("b", "2026-01-02T00:00:00+00:00"), ("a", "2026-01-01T00:00:00+00:00")]:
        _summary(run_id, started, "passed").write(reports / run_id)
    _summary("now", "2026-01-03T00:00:00+00:00", "failed").write(reports / "now")
    _summary("later", "2026-01-04T00:00:00+00:00", "failed").write(reports / "later")
    (reports / "broken").mkdir()
    (reports / "broken" / "summary.json").write_text("{")
    points, problems = history.collect([reports], exclude_run="now", before="2026-01-03T00:00:00+00:00")
    assert [p.run_id for p in points] == ["a", "b"]  # not "later", and "latest" (a symlink) not twice
    assert len(problems) == 1 and "broken" in problems[0]


def test_collect_keeps_a_window_of_the_newest_runs(tmp_path: Path) -> None:
    for day in range(1, history.WINDOW + 6):
        _summary(f"r{day:02}", f"2026-01-{day:02}T00:00:00+00:00", "passed").write(tmp_path / f"r{day:02}")
    points, _ = history.collect([tmp_path])
    assert len(points) == history.WINDOW
    assert points[-1].run_id == f"r{history.WINDOW + 5:02}"


def _allure_line(timestamp_ms: int, status: str, message: str = "") -> str:
    item = {
        "name": "test_x[ray2.58.0]",
        "fullName": "conformance.suites.test_rayjob#test_x",
        "status": status,
        "message": message,
        "labels": [{"name": "epic", "value": "rayjob"}, {"name": "feature", "value": "test_rayjob"}],
    }
    return json.dumps({"name": "KubeRay conformance", "timestamp": timestamp_ms, "testResults": {"h1": item}})


def test_an_allure_history_file_becomes_runs_with_our_outcomes(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    lines = [
        _allure_line(1_767_225_600_000, "broken"),
        "",
        _allure_line(1_767_312_000_000, "skipped", "Skipped: not applicable: no GPUs"),
        _allure_line(1_767_398_400_000, "passed"),
    ]
    path.write_text("\n".join(lines) + "\n")
    points, problems = history.collect([path])
    assert problems == []
    key = "test_rayjob.py::test_x[ray2.58.0]"
    assert [p.outcomes[key] for p in points] == ["error", "not_applicable", "passed"]
    assert points[0].areas[key] == "rayjob"
    assert points[0].started == "2026-01-01T00:00:00+00:00"


def test_a_broken_allure_history_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(_allure_line(1_767_225_600_000, "passed") + '\n{"timestamp": 1}\n')
    points, problems = history.collect([path, tmp_path / "missing"])
    assert points == []
    assert "line 2" in problems[0] and "no such file" in problems[1]
