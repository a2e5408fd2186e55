"""Checks over an upgrade's status samples and request records (conformance/load/traffic.py)."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from conformance import profiles
from conformance.errors import HarnessError
from conformance.kube.rayservice import RayServiceReading
from conformance.load import traffic
from conformance.load.records import Record

T0 = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()


def stamp(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample(
    at: float, new_percent: int | None, new_cap: int = 0, old_cap: int = 100, **kw: object
) -> RayServiceReading:
    percent = {"old": 100 - (new_percent or 0)}
    weights = {"old": 100 - (new_percent or 0)}
    migrated: dict[str, str] = {}
    if new_percent is not None:
        percent["new"] = new_percent
        weights["new"] = new_percent
        migrated["new"] = stamp(at)
    fields = {
        "at": T0 + at,
        "active": "old",
        "pending": "new",
        "percent": percent,
        "capacity": {"old": old_cap, "new": new_cap},
        "migrated_at": migrated,
        "conditions": {"Ready": "True", "UpgradeInProgress": "True"},
        "weights": weights,
    }
    fields.update(kw)
    return RayServiceReading(**fields)  # type: ignore[arg-type]


def gradual(step: int, interval: float) -> list[RayServiceReading]:
    return [sample(i * interval, p, new_cap=100) for i, p in enumerate(range(0, 101, step))]


def test_a_gradual_shift_by_the_step_and_interval_passes() -> None:
    found = traffic.check_steps(gradual(25, 5), "new", step=25, interval_s=5)
    assert found.violations == []
    assert found.max_step == 25
    assert found.min_interval_s == 5


def test_a_jump_larger_than_the_step_is_found() -> None:
    samples = [sample(0, 0, 100), sample(5, 25, 100), sample(10, 75, 100)]
    found = traffic.check_steps(samples, "new", step=25, interval_s=5)
    assert found.max_step == 50
    assert any("jumped 25 -> 75" in v for v in found.violations)


def test_traffic_going_back_is_found() -> None:
    samples = [sample(0, 0, 100), sample(5, 25, 100), sample(10, 20, 100)]
    assert any("went back" in v for v in traffic.check_steps(samples, "new", 25, 5).violations)


def test_steps_sooner_than_the_interval_are_found_with_a_second_of_slack() -> None:
    assert traffic.check_steps(gradual(25, 4), "new", step=25, interval_s=5).violations == []
    found = traffic.check_steps(gradual(25, 3), "new", step=25, interval_s=5)
    assert found.min_interval_s == 3
    assert any("sooner than intervalSeconds=5" in v for v in found.violations)


def test_capacity_over_the_surge_and_traffic_over_capacity_are_found() -> None:
    fine = [sample(0, 0, new_cap=25), sample(5, 25, new_cap=25), sample(6, 25, new_cap=25, old_cap=75)]
    assert traffic.check_capacity(fine, max_surge=25).violations == []
    over = [sample(0, 0, new_cap=50, old_cap=100)]
    assert any("over 100 + maxSurgePercent=25" in v for v in traffic.check_capacity(over, 25).violations)
    jump = [sample(0, 0, new_cap=0), sample(1, 0, new_cap=50, old_cap=50)]
    assert any("moved 0 -> 50" in v for v in traffic.check_capacity(jump, 25).violations)
    ahead = [sample(0, 30, new_cap=25, old_cap=75)]
    assert any("30% of traffic, capacity 25" in v for v in traffic.check_capacity(ahead, 25).violations)


def test_promotion_must_follow_a_full_shift() -> None:
    samples = [*gradual(50, 1), sample(3, 100, new_cap=100, old_cap=0)]
    samples.append(sample(4, None, active="new", pending="", percent={"new": 100}, capacity={"new": 100}))
    promotion = traffic.promotion(samples, "new")
    assert promotion.at == T0 + 4
    assert traffic.promoted_at_full_shift(promotion, "old", "new") == ""
    early = [sample(0, 50, new_cap=50, old_cap=50), sample(1, None, active="new", pending="")]
    problem = traffic.promoted_at_full_shift(traffic.promotion(early, "new"), "old", "new")
    assert "trafficRoutedPercent 50 on old and 50 on new, not 0/100" in problem
    assert traffic.promotion(early[:1], "new").at is None


def answers(start: float, seconds: float, backend: object, rate: int = 20) -> list[Record]:
    """`rate` answers a second from `start` (seconds after T0); `backend(i)` or a name says who."""
    pick = backend if callable(backend) else (lambda _i: backend)
    return [
        Record(sent=T0 + start + i / rate, latency_s=0.01, status=200, error="", backend=str(pick(i)))
        for i in range(int(seconds * rate))
    ]


def test_the_served_share_is_compared_per_stretch_of_constant_weights() -> None:
    samples = [sample(0, 0), sample(10, 50)]
    records = answers(0, 10, "old") + answers(10, 10, lambda i: "new" if i % 2 else "old")
    windows = traffic.share_windows(records, samples, "new", allowance_s=1.0)
    assert [(w.weight_percent, round(w.served_percent or 0)) for w in windows] == [(0, 0), (50, 50)]
    assert all(180 >= w.requests >= 170 for w in windows)  # the second after each change is skipped
    assert traffic.max_share_deviation(windows) is not None
    assert traffic.max_share_deviation(windows) < 2
    assert traffic.check_shares(windows, tolerance=15, allowance_s=1.0).violations == []


def lagging_switch(lag_s: float) -> tuple[list[Record], list[RayServiceReading]]:
    """The step plan 100/1: every answer from old until the route moves all weight to new at 10 s,
    the data plane applying it `lag_s` later; a status-only change 1.05 s after the switch (what
    KubeRay writes next), then answers from new to 30 s."""
    samples = [
        sample(0, 0),
        sample(10, 100, new_cap=100),
        sample(11.05, 100, new_cap=100, old_cap=0),
    ]
    return answers(0, 10 + lag_s, "old") + answers(10 + lag_s, 20 - lag_s, "new"), samples


def test_answers_before_the_propagation_allowance_are_not_judged() -> None:
    """The false alarm of issue 22: a data plane that applies the switch 1.9 s after it is written
    failed a check that judged the stretch up to KubeRay's next status change from 1 s after the
    switch. Judged from the allowance on, over the whole stretch the split held, it passes."""
    records, samples = lagging_switch(1.9)
    windows = traffic.share_windows(records, samples, "new", allowance_s=3.0)
    assert [(w.weight_percent, w.served_percent) for w in windows] == [(0, 0), (100, 100)]
    assert windows[1].requests == 17 * 20  # from 13 s to the end: the status change cuts nothing
    assert traffic.check_shares(windows, tolerance=15, allowance_s=3.0).violations == []
    assert traffic.propagation_delays(records, samples, "new") == [1.9]


def test_a_data_plane_far_slower_than_the_allowance_still_fails() -> None:
    records, samples = lagging_switch(10.0)  # old answers for 7 of the 17 judged seconds
    found = traffic.check_shares(traffic.share_windows(records, samples, "new", 3.0), 15, 3.0)
    assert found.violations == ["59% served at weight 100% (340 answers from 3s after the change)"]
    assert traffic.propagation_delays(records, samples, "new") == [10.0]


def test_answers_that_never_follow_the_weights_fail() -> None:
    samples = [sample(0, 0), sample(10, 100, new_cap=100)]
    records = answers(0, 30, "old")
    found = traffic.check_shares(traffic.share_windows(records, samples, "new", 3.0), 15, 3.0)
    assert found.violations == ["0% served at weight 100% (340 answers from 3s after the change)"]
    assert traffic.propagation_delays(records, samples, "new") == []  # never followed: nothing to measure


def test_a_stretch_shorter_than_the_allowance_is_not_judged() -> None:
    samples = [sample(0, 0), sample(10, 25), sample(12, 50), sample(20, 100)]
    records = answers(0, 12, lambda i: "new" if i >= 200 and i % 4 == 0 else "old")
    records += answers(12, 8, lambda i: "new" if i % 2 else "old") + answers(20, 10, "new")
    windows = traffic.share_windows(records, samples, "new", allowance_s=3.0)
    assert [w.requests for w in windows] == [140, 0, 100, 140]
    assert [w.weight_percent for w in traffic.judged(windows)] == [0, 50, 100]
    assert traffic.check_shares(windows, 15, 3.0).violations == []
    assert traffic.propagation_delays(records, samples, "new") == [0.0, 0.0]  # 0 -> 25 and 50 -> 100


def test_too_few_answers_is_a_failure_of_evidence_not_a_pass() -> None:
    samples = [sample(0, 0), sample(10, 100, new_cap=100)]
    records = answers(0, 2, "old") + answers(10, 3.5, "new")  # 10 answers past the allowance
    windows = traffic.share_windows(records, samples, "new", allowance_s=3.0)
    assert [w.requests for w in windows] == [0, 10]
    with pytest.raises(traffic.TooFewAnswers, match=r"no stretch of constant weights had 20 answers") as err:
        traffic.check_shares(windows, 15, 3.0)
    assert isinstance(err.value, HarnessError)  # an error of the run, never a conformance failure
    with pytest.raises(traffic.TooFewAnswers, match="no route weights seen"):
        traffic.check_shares([], 15, 3.0)


def test_the_share_in_force_follows_weight_changes_only() -> None:
    same_split = sample(5, 50, weights={"old": 1, "new": 1})
    samples = [sample(0, 50), same_split, sample(7, 50, conditions={"Ready": "False"}), sample(9, 100)]
    assert traffic.weight_shares(samples, "new") == [(T0, 50.0), (T0 + 9, 100.0)]
    assert traffic.weight_shares([sample(0, 0, weights={})], "new") == []


def test_weight_in_force_is_the_latest_sample_before() -> None:
    samples = [sample(0, 0), sample(10, 50)]
    assert traffic.weight_at(samples, "new", T0 - 1) is None
    assert traffic.weight_at(samples, "new", T0 + 9.9) == 0
    assert traffic.weight_at(samples, "new", T0 + 10) == 50


def test_the_timeline_has_seconds_traffic_and_condition_events(tmp_path: Path) -> None:
    samples = [sample(0, 0), sample(2, 100, conditions={"Ready": "True", "UpgradeInProgress": "False"})]
    records = [
        Record(sent=T0 + i / 5, latency_s=0.02, status=200, error="", backend="old" if i < 10 else "new")
        for i in range(20)
    ]
    records.append(Record(sent=T0 + 3.5, latency_s=1.0, status=503, error="http_503"))
    data = traffic.timeline("t::x", "title", records, samples, T0, {"old": "old", "new": "new"})
    seconds = data["seconds"]
    assert isinstance(seconds, list) and [s["t"] for s in seconds] == [0, 1, 2, 3]
    assert seconds[0]["traffic"] == {"old": 100, "new": 0} and seconds[3]["traffic"] == {"old": 0, "new": 100}
    assert seconds[2]["served"] == {"old": 0.0, "new": 100.0}
    assert seconds[3]["errors"] == {"http_503": 1}
    assert {"t": 2.0, "label": "UpgradeInProgress=False"} in data["events"]
    status = data["status"]
    assert isinstance(status, list) and status[-1]["route_weights"] == {"old": 0, "new": 100}
    assert status[0]["active"] == "old" and status[0]["t"] == 0
    written = traffic.write_timeline(tmp_path, "t-x", data)
    assert json.loads(written.read_text())["kind"] == "upgrade"


def test_a_held_upgrade_moves_nothing_while_held() -> None:
    held = [sample(0, 0), sample(3, 0, conditions={"Ready": "True"}), sample(9, 0)]
    assert traffic.held_while_paused(held, "old", "new", T0 + 1, T0 + 10).violations == []
    # Already at 25% when held: staying there is fine, rising is not.
    at_25 = [sample(0, 25), sample(4, 25), sample(6, 50)]
    found = traffic.held_while_paused(at_25, "old", "new", T0 + 1, T0 + 10).violations
    assert found == ["trafficRoutedPercent of new rose 25 -> 50", "route weight of new rose 25 -> 50"]
    # What happens after the hold ends is not the hold's business.
    assert traffic.held_while_paused(at_25, "old", "new", T0 + 1, T0 + 5).violations == []


def test_a_held_upgrade_keeps_its_active_cluster_and_starts_no_rollback() -> None:
    rollback = {"Ready": "True", "UpgradeInProgress": "True", "RollbackInProgress": "True"}
    samples = [sample(0, 0), sample(2, 0, conditions=rollback), sample(3, 0, active="new", pending="")]
    found = traffic.held_while_paused(samples, "old", "new", T0 + 1, T0 + 10).violations
    assert found == ["RollbackInProgress=True", "the active cluster changed to new"]
    assert traffic.held_while_paused([], "old", "new", T0, T0 + 1).violations == [
        "no status was sampled while the upgrade was held up"
    ]


def test_the_timeline_shows_what_the_check_did_among_the_events() -> None:
    samples = [sample(0, 0), sample(2, 100, conditions={"Ready": "True", "UpgradeInProgress": "False"})]
    records = [
        Record(sent=T0 + i / 5, latency_s=0.02, status=200, error="", backend="old") for i in range(10)
    ]
    marks = [(T0 + 1.5, "rayClusterConfig.suspend=true")]
    data = traffic.timeline("t::x", "title", records, samples, T0, {"old": "old", "new": "new"}, marks)
    labels = [event["label"] for event in data["events"]]  # type: ignore[index]
    assert labels.index("rayClusterConfig.suspend=true") < labels.index("UpgradeInProgress=False")
    assert {"t": 1.5, "label": "rayClusterConfig.suspend=true"} in data["events"]  # type: ignore[operator]


def test_nothing_sampled_is_a_finding_not_a_pass() -> None:
    found = traffic.check_steps([], "new", step=25, interval_s=5)
    assert any("no trafficRoutedPercent of new was sampled" in v for v in found.violations)
    assert any("no route weight of new was sampled" in v for v in found.violations)
    assert traffic.check_capacity([], 25).violations == ["no targetCapacity of a pending cluster was sampled"]


def test_a_first_sample_past_one_step_means_the_first_step_was_missed() -> None:
    samples = [sample(10, 50, 100), sample(15, 75, 100), sample(20, 100, 100)]
    found = traffic.check_steps(samples, "new", step=25, interval_s=5)
    assert any("first seen at 50" in v for v in found.violations)


def test_a_plan_of_several_steps_needs_two_migrations_to_check_the_interval() -> None:
    found = traffic.check_steps([sample(0, 0, 100)], "new", step=25, interval_s=5)
    assert any("intervalSeconds unchecked" in v for v in found.violations)
    # One step of 100 has one migration only; nothing to check there.
    assert traffic.check_steps([sample(0, 0, 100), sample(1, 100, 100)], "new", 100, 1).violations == []


def test_every_bundled_profile_states_its_propagation_allowance() -> None:
    for name in profiles.available():
        # The file must state it: the schema's default would satisfy a read through the profile.
        stated = yaml.safe_load((profiles.BUNDLED / f"{name}.yaml").read_text())["thresholds"]
        assert stated["route_propagation_allowance_s"] > 0, name


# --- a suspend and resume under load ---------------------------------------------------------

SUSPENSION = traffic.Suspension(asked=T0 + 10, suspended=T0 + 15, resumed=T0 + 40, ready=T0 + 70, new="new")


def _requests(start: float, end: float, ok: bool, backend: str = "old") -> list[Record]:
    return [
        Record(T0 + at, 0.01, 200 if ok else 503, "" if ok else "http_503", backend if ok else "")
        for at in range(int(start), int(end))
    ]


def _suspend_and_resume(**changes: list[Record]) -> list[Record]:
    parts = {
        "baseline": _requests(0, 10, ok=True),
        "going": _requests(10, 15, ok=False),
        "dark": _requests(15, 70, ok=False),
        "serving": _requests(70, 90, ok=True, backend="new"),
    }
    parts.update(changes)
    return [r for part in parts.values() for r in part]


def test_a_clean_suspend_and_resume_has_no_findings() -> None:
    records = _suspend_and_resume()
    assert traffic.served_through_suspension(records, SUSPENSION, allowance=3).violations == []
    assert traffic.outage_s(records) == 59.0


def test_answers_while_suspended_are_a_finding() -> None:
    leak = _requests(15, 30, ok=False) + _requests(30, 40, ok=True) + _requests(40, 70, ok=False)
    found = traffic.served_through_suspension(_suspend_and_resume(dark=leak), SUSPENSION, allowance=3)
    assert found.violations == ["10 of 22 requests answered while Suspended, by ['old']"]


def test_failures_after_ready_beyond_the_allowance_are_a_finding() -> None:
    late = _requests(70, 76, ok=False) + _requests(76, 90, ok=True, backend="new")
    found = traffic.served_through_suspension(_suspend_and_resume(serving=late), SUSPENSION, allowance=3)
    assert len(found.violations) == 1
    assert found.violations[0].startswith("after the resumed RayService was Ready: 3 of 17 requests failed")
    within = _requests(70, 73, ok=False) + _requests(73, 90, ok=True, backend="new")
    clean = traffic.served_through_suspension(_suspend_and_resume(serving=within), SUSPENSION, allowance=3)
    assert clean.violations == []


def test_answers_from_the_old_cluster_after_the_resume_are_a_finding() -> None:
    old = _requests(70, 90, ok=True, backend="old")
    found = traffic.served_through_suspension(_suspend_and_resume(serving=old), SUSPENSION, allowance=3)
    assert found.violations == ["after the resume, answers came from ['old'], not only new"]


def test_a_load_that_missed_a_phase_is_a_finding_not_a_pass() -> None:
    found = traffic.served_through_suspension(_requests(0, 10, ok=True), SUSPENSION, allowance=3)
    assert found.violations == [
        "no requests were sent while the RayService was Suspended",
        "no requests were sent after the resumed RayService was Ready",
    ]


def test_silence_is_the_longest_stretch_without_any_answer_not_the_failures_beside_answers() -> None:
    # Half the requests failing (a lost proxy still behind the Service) is no silence...
    halves = [
        Record(T0 + i / 2, 0.01, 200 if i % 2 else 503, "" if i % 2 else "http_503", "c") for i in range(40)
    ]
    assert traffic.longest_silence_s(halves) == 1.0
    # ... 12 s in which nothing answered is.
    dark = _requests(0, 10, ok=True) + _requests(10, 22, ok=False) + _requests(22, 30, ok=True)
    assert traffic.longest_silence_s(dark) == 13.0
    # An app that never answers again, or never answered, is silent to the end.
    assert traffic.longest_silence_s(_requests(0, 10, ok=True) + _requests(10, 30, ok=False)) == 20.0
    assert traffic.longest_silence_s(_requests(0, 5, ok=False)) == 4.0
