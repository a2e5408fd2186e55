"""The load generator's pure logic: records, error kinds, the rate self-check, the timeline."""

import base64
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conformance.errors import HarnessError
from conformance.load import analysis, generator
from conformance.load.analysis import LoadShortfall
from conformance.load.generator import BIN_DIR, Delivery, LoadSpec, Target, render, targets_text
from conformance.load.records import BEGIN_MARK, END_MARK, Record, error_kind, extract_block, from_vegeta

T0 = 1_800_000_000.0


def vegeta_line(seq: int, t: str, code: int = 200, error: str = "", body: dict | None = None) -> str:
    raw = json.dumps(body).encode() if body is not None else b""
    return json.dumps(
        {
            "attack": "load",
            "seq": seq,
            "code": code,
            "timestamp": t,
            "latency": 12_500_000,
            "bytes_out": 0,
            "bytes_in": len(raw),
            "error": error,
            "body": base64.b64encode(raw).decode(),
            "method": "GET",
            "url": "http://10.215.0.9/",
            "headers": {},
        }
    )


def steady(rate: float, seconds: float, start: float = T0, **fields: object) -> list[Record]:
    count = int(rate * seconds)
    return [
        Record(sent=start + i / rate, latency_s=0.01, status=200, error="", **fields)  # type: ignore[arg-type]
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (200, "", ""),
        (302, "", ""),
        (503, "503 Service Unavailable", "http_503"),
        (404, "404 Not Found", "http_404"),
        (0, 'Get "http://x/": dial tcp 10.0.0.1:80: connect: connection refused', "connection_refused"),
        (0, "read tcp 1->2: read: connection reset by peer", "connection_reset"),
        (0, 'Get "http://x/": context deadline exceeded (Client.Timeout exceeded)', "timeout"),
        (0, 'Get "http://x/": EOF', "eof"),
        (0, "something new", "other"),
        (0, "", "no_response"),
    ],
)
def test_error_kinds_are_named(status: int, error: str, kind: str) -> None:
    assert error_kind(status, error) == kind


def test_a_vegeta_record_keeps_time_to_the_nanosecond_and_the_backend() -> None:
    answer = {"cluster": "svc-a", "version": "v2"}
    record = from_vegeta(json.loads(vegeta_line(0, "2027-01-15T08:00:00.123456789Z", body=answer)))
    whole = datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert record.sent == pytest.approx(whole + 0.123456789, abs=1e-6)
    assert record.latency_s == pytest.approx(0.0125)
    assert (record.status, record.error, record.backend, record.version) == (200, "", "svc-a", "v2")


def test_an_error_page_has_no_backend() -> None:
    line = json.loads(vegeta_line(0, "2027-01-15T08:00:00Z", code=503, error="503 Service Unavailable"))
    line["body"] = base64.b64encode(b"no healthy upstream").decode()
    record = from_vegeta(line)
    assert (record.error, record.backend, record.detail) == ("http_503", "", "no healthy upstream")
    summary = analysis.summarize([record])
    assert "'http_503: no healthy upstream' x1" in summary.describe()


def test_records_come_back_from_the_generators_log_in_send_order() -> None:
    lines = [vegeta_line(1, "2027-01-15T08:00:01+00:00"), vegeta_line(0, "2027-01-15T08:00:00+00:00")]
    payload = base64.b64encode(gzip.compress("\n".join(lines).encode())).decode()
    wrapped = "\n".join(payload[i : i + 76] for i in range(0, len(payload), 76))
    log = f"attack started\nattack ended: exit 0\n{BEGIN_MARK}\n{wrapped}\n{END_MARK}\n"
    records = extract_block(log)
    assert [r.sent for r in records] == sorted(r.sent for r in records)
    assert len(records) == 2


def test_a_cut_off_block_is_an_error_not_zero_failures() -> None:
    with pytest.raises(ValueError, match="no complete block"):
        extract_block(f"attack started\n{BEGIN_MARK}\nH4sIAAAA")


def test_achieved_rate_of_a_steady_attack_is_its_rate() -> None:
    assert analysis.achieved_rate(steady(40, 10)) == pytest.approx(40)
    assert analysis.achieved_rate(steady(40, 10)[:1]) == 0.0


def test_the_rate_self_check_allows_five_percent_and_no_more() -> None:
    assert analysis.check_rate(steady(38.5, 10), 40) == pytest.approx(38.5)
    with pytest.raises(LoadShortfall, match="more than 5% short"):
        analysis.check_rate(steady(37.5, 10), 40)


def test_a_shortfall_is_a_harness_error() -> None:
    assert issubclass(LoadShortfall, HarnessError)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert analysis.percentile(values, 50) == 50
    assert analysis.percentile(values, 99) == 99
    assert analysis.percentile([3.0], 99) == 3.0
    assert analysis.percentile([], 50) is None


def test_the_timeline_has_every_second_including_silent_ones() -> None:
    records = steady(10, 2) + steady(10, 1, start=T0 + 4)
    records.append(Record(sent=T0 + 4.5, latency_s=5.0, status=0, error="timeout"))
    records.sort(key=lambda r: r.sent)
    seconds = analysis.per_second(records)
    assert [s.t for s in seconds] == [0, 1, 2, 3, 4]
    assert [s.requests for s in seconds] == [10, 10, 0, 0, 11]
    assert seconds[2].p50_ms is None
    assert seconds[4].errors == {"timeout": 1}
    assert seconds[4].p99_ms == 10.0  # failed requests do not count into latency


def test_backend_share_counts_successful_answers_only() -> None:
    records = steady(10, 1, backend="old") + steady(10, 1, start=T0 + 1, backend="new")
    records.append(Record(sent=T0 + 3, latency_s=0, status=503, error="http_503"))
    assert analysis.backend_share(records, "new") == pytest.approx(0.5)
    assert analysis.backend_share([], "new") is None
    seconds = analysis.per_second(records)
    assert seconds[0].backends == {"old": 10} and seconds[1].backends == {"new": 10}


def test_summary_metrics_carry_units() -> None:
    records = [*steady(20, 5), Record(sent=T0 + 5, latency_s=0.2, status=502, error="http_502")]
    summary = analysis.summarize(records)
    metrics = summary.metrics()
    assert metrics["requests_total"] == 101
    assert metrics["failed_requests"] == 1
    assert metrics["error_rate"] == pytest.approx(1 / 101, rel=1e-4)
    assert metrics["latency_p50_ms"] == 10.0
    assert "http_502: 1" in summary.describe()


RAY_IMAGE = Delivery("rayproject/ray:2.58.0-py312", "IfNotPresent", Path("/nowhere/vegeta"))


def test_the_generator_pod_has_guaranteed_qos_and_the_targets_name_the_host() -> None:
    targets = [Target("http://10.215.0.9:80/", host="svc.ns.test")]
    config_map, pod = render("load", "ns", RAY_IMAGE, targets, LoadSpec(rate=30, max_duration_s=600), "run1")
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert config_map["data"]["targets"] == "GET http://10.215.0.9:80/\nHost: svc.ns.test\n"
    script = config_map["data"]["run.sh"]
    assert "-rate=30/1s" in script and "-duration=600s" in script
    assert BEGIN_MARK in script and END_MARK in script
    assert pod["spec"]["restartPolicy"] == "Never"


def test_the_generator_runs_the_profiles_ray_image_and_waits_for_vegeta_to_be_copied_in() -> None:
    # Any provider's nodes run the Ray image the profile names: no image of the harness's own to load.
    _, pod = render("load", "ns", RAY_IMAGE, [Target("http://a/")], LoadSpec(rate=1, max_duration_s=5), "r")
    container = pod["spec"]["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == (RAY_IMAGE.image, "IfNotPresent")
    assert container["command"][-1].startswith(f"until [ -x {BIN_DIR}/vegeta ]")
    assert {"name": "bin", "mountPath": BIN_DIR} in container["volumeMounts"]
    assert {"name": "PATH", "value": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin"} in container["env"]


def test_the_copied_vegeta_is_gzip_then_base64_of_the_binary(tmp_path: Path) -> None:
    binary = tmp_path / "vegeta"
    binary.write_bytes(bytes(range(256)) * 100)
    payload = Delivery("img", "Never", binary).payload()
    assert gzip.decompress(base64.b64decode(payload)) == binary.read_bytes()
    assert payload.isascii() and len(payload) < len(binary.read_bytes())


def test_several_targets_are_separated_by_a_blank_line() -> None:
    assert targets_text([Target("http://a/"), Target("http://b/")]) == "GET http://a/\n\nGET http://b/\n"


def test_a_generator_that_fell_behind_its_schedule_is_a_harness_error() -> None:
    on_time = [Record(sent=T0 + i / 20, latency_s=0.01, status=200, error="", seq=i) for i in range(200)]
    assert analysis.schedule_lag(on_time, 20) == pytest.approx(0, abs=1e-9)
    assert analysis.check_rate(on_time, 20) == pytest.approx(20)
    # Stalled 1.5 s at request 100, then caught up in a burst: the average rate still looks right.
    stalled = [
        Record(sent=T0 + (i / 20 if i < 100 or i > 140 else 6.5), latency_s=0.01, status=200, error="", seq=i)
        for i in range(200)
    ]
    stalled.sort(key=lambda r: r.sent)
    assert analysis.schedule_lag(stalled, 20) == pytest.approx(1.5)
    with pytest.raises(LoadShortfall, match="behind its schedule"):
        analysis.check_rate(stalled, 20)


def test_what_must_precede_the_next_attack_runs_once_and_is_forgotten_after_the_check() -> None:
    """The plugin's wait for quiet (exclusive(quiet=BEFORE_LOAD)) runs before the first generator's
    pod, not before a second generator of the same check, nor in the next check."""
    ran: list[str] = []
    generator.before_next_attack(lambda: ran.append("settled"))
    generator._run_before_attack()
    generator._run_before_attack()
    assert ran == ["settled"]
    generator.before_next_attack(lambda: ran.append("not needed"))
    generator.forget_before_attack()
    generator._run_before_attack()
    assert ran == ["settled"]
