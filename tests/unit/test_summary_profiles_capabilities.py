import json
from pathlib import Path

import pytest
import yaml

from conformance import profiles
from conformance.capabilities import Capabilities, version_tuple
from conformance.errors import UsageError
from conformance.report.summary import Summary, load
from conformance.report.summary import TestResult as Result


def _summary(*outcomes: str, complete: bool = True) -> Summary:
    summary = Summary(
        run_id="r1",
        started="t0",
        provider="local",
        profile="default",
        versions={"kubernetes": "v1.35.4", "kuberay": "v1.6.2", "ray": "2.58.0"},
        complete=complete,
    )
    for index, outcome in enumerate(outcomes):
        summary.add(Result(id=f"t{index}", area="raycluster", outcome=outcome, duration_s=1.0))
    return summary


@pytest.mark.parametrize(
    ("outcomes", "complete", "verdict", "code"),
    [
        (("passed", "not_applicable"), True, "conformant", 0),
        (("passed", "failed", "error"), True, "not conformant", 1),
        (("passed", "error"), True, "incomplete", 2),
        (("passed",), False, "incomplete", 2),
        ((), True, "incomplete", 2),
    ],
)
def test_verdict_and_exit_code_keep_failures_and_errors_apart(outcomes, complete, verdict, code) -> None:
    summary = _summary(*outcomes, complete=complete)
    assert summary.verdict() == verdict
    assert summary.exit_code() == code


def test_summary_json_follows_the_contract_and_round_trips(tmp_path: Path) -> None:
    summary = _summary("passed", "failed", "not_applicable")
    summary.tests[0].metrics = {"head_ready_s": 3.5}
    path = summary.write(tmp_path / "r1")
    data = json.loads(path.read_text())
    assert set(data) >= {"run_id", "started", "finished", "provider", "profile", "versions", "areas", "tests"}
    assert data["areas"]["raycluster"] == {
        "passed": 1,
        "failed": 1,
        "errors": 0,
        "not_applicable": 1,
        "skipped": 0,
    }
    assert data["tests"][0]["metrics"] == {"head_ready_s": 3.5}
    assert (tmp_path / "latest").resolve() == (tmp_path / "r1").resolve()
    assert load(path).to_json() == data


def test_unknown_areas_and_outcomes_are_refused() -> None:
    summary = _summary()
    with pytest.raises(ValueError, match="area"):
        summary.add(Result(id="x", area="nope", outcome="passed", duration_s=0))
    with pytest.raises(ValueError, match="outcome"):
        summary.add(Result(id="x", area="gpu", outcome="meh", duration_s=0))


def test_bundled_profiles_load() -> None:
    for name in profiles.available():
        profile = profiles.load(name)
        assert profile.name == name
        version = profile.ray_versions[0]
        assert version in profile.ray_image(version)


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(UsageError, match="unknown profile 'nope'") as caught:
        profiles.load("nope")
    assert "default" in caught.value.fix


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nimages: [unclosed\n")
    with pytest.raises(UsageError, match="not valid YAML at line"):
        profiles.load(str(bad))


def test_a_wrongly_typed_field_is_named(tmp_path: Path) -> None:
    text = (profiles.BUNDLED / "default.yaml").read_text().replace("count: 2", "count: two")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"gpu\.count must be a whole number"):
        profiles.load(str(path))


def test_capabilities_explain_what_is_missing() -> None:
    caps = Capabilities(
        kubernetes_version="v1.35.4",
        kuberay_version="v1.6.2",
        feature_gates={"RayCronJob": False},
        gpu_capacity=0,
        gateway_api=True,
        gateway_classes=("traefik",),
    )
    assert caps.missing("gpu") == "the cluster has no allocatable GPUs"
    assert caps.missing("gateway_api", "traefik") == ""
    assert "istio" in caps.missing("gateway_api", "istio")
    assert "RayCronJob" in caps.missing("gate:RayCronJob")
    assert caps.missing("kuberay>=1.7.0") == "kuberay v1.6.2 is older than 1.7.0"
    assert caps.missing("kubernetes>=1.30") == ""
    assert version_tuple("v1.35.4-dispatcher") == (1, 35, 4)


def test_an_upper_version_bound_is_not_applicable_from_that_version_on() -> None:
    older = Capabilities(kubernetes_version="v1.35.4", kuberay_version="v1.6.2")
    newer = Capabilities(kubernetes_version="v1.35.4", kuberay_version="v1.7.0")
    assert older.missing("kuberay<1.7.0") == ""
    assert newer.missing("kuberay<1.7.0") == "kuberay v1.7.0 is 1.7.0 or newer"
    assert newer.missing("kuberay>=1.7.0") == ""
    assert older.missing("kuberay>=1.6.1") == ""
    assert older.missing("kubernetes<1.35") == "kubernetes v1.35.4 is 1.35 or newer"


def test_simulated_gpus_serve_scheduling_checks_but_not_cuda_ones() -> None:
    simulated = Capabilities(
        kubernetes_version="v1.35.4",
        kuberay_version="v1.6.2",
        feature_gates={},
        gpu_capacity=2,
        simulated_gpus=True,
    )
    assert simulated.missing("gpu") == ""
    assert "simulated" in simulated.missing("real_gpu")
    real = Capabilities(
        kubernetes_version="v1.35.4", kuberay_version="v1.6.2", feature_gates={}, gpu_capacity=1
    )
    assert real.missing("real_gpu") == ""


def test_a_profile_keeps_the_head_inside_unless_it_says_otherwise(tmp_path: Path) -> None:
    assert not profiles.load("default").exposes_head
    path = tmp_path / "exposed.yaml"
    path.write_text(
        (profiles.BUNDLED / "default.yaml").read_text() + "exposure: {head_service_type: NodePort}\n"
    )
    exposed = profiles.load(str(path))
    assert (exposed.head_service_type, exposed.exposes_head) == ("NodePort", True)
    path.write_text(
        (profiles.BUNDLED / "default.yaml").read_text() + "exposure: {head_service_type: Public}\n"
    )
    with pytest.raises(UsageError, match=r"exposure\.head_service_type is 'Public'") as caught:
        profiles.load(str(path))
    assert "NodePort" in caught.value.fix


def test_a_profile_may_set_operator_env_and_extra_args(tmp_path: Path) -> None:
    healthy = profiles.load("default").kuberay
    assert (healthy.env, healthy.extra_args) == ({}, ())
    data = yaml.safe_load((profiles.BUNDLED / "default.yaml").read_text())
    data["kuberay"].update(env={"ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": True}, extra_args=["--qps=5"])
    path = tmp_path / "seeded.yaml"
    path.write_text(yaml.safe_dump(data))
    seeded = profiles.load(str(path)).kuberay
    assert (seeded.env, seeded.extra_args) == ({"ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": "true"}, ("--qps=5",))
    data["kuberay"]["extra_args"] = "--qps=5"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UsageError, match=r"kuberay\.extra_args must be a non-empty list"):
        profiles.load(str(path))
