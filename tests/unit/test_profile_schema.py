"""The typed profile schema: every key with a wrong type, unknown keys, enums, all problems at once."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import profiles
from conformance.errors import EXIT_USAGE, UsageError
from conformance.profiles import schema
from conformance.profiles.problems import ProfileError

BASE = yaml.safe_load((profiles.BUNDLED / "default.yaml").read_text())
# The optional sections too, so every key the schema knows is tried.
BASE["exposure"] = {"head_service_type": "ClusterIP"}


def _leaves(data: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict) and data:
        return [leaf for key, value in data.items() for leaf in _leaves(value, (*path, key))]
    return [path]


def _wrong(value: Any) -> Any:
    """A value of another type than `value`, as a careless user would write it."""
    if isinstance(value, bool):
        return "no"
    if isinstance(value, int | float):
        return "soon"
    if isinstance(value, str):
        return 1.5
    if isinstance(value, list):
        return "2.58.0"
    return "none"  # an empty mapping (feature_gates: {})


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _set(data: dict, path: tuple, value: Any) -> dict:
    changed = copy.deepcopy(data)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def test_the_base_document_is_valid(tmp_path: Path) -> None:
    assert profiles.load(str(_write(tmp_path, BASE))).name == "default"


@pytest.mark.parametrize("key", _leaves(BASE), ids=_dotted)
def test_every_key_with_a_wrong_type_is_one_problem_naming_it(tmp_path: Path, key: tuple) -> None:
    original = _leaves_value(BASE, key)
    path = _write(tmp_path, _set(BASE, key, _wrong(original)))
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(path))
    error = caught.value
    assert error.exit_code == EXIT_USAGE
    assert len(error.problems) == 1, error.one_line()
    line = error.one_line()
    assert "\n" not in line
    assert f", {_dotted(key)}" in line and "line " in line
    assert error.fix  # every problem says what to do


def _leaves_value(data: dict, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


@pytest.mark.parametrize("section", [(), ("images",), ("kuberay",), ("thresholds",), ("gpu",), ("exposure",)])
def test_an_unknown_key_is_refused_with_the_known_ones(tmp_path: Path, section: tuple) -> None:
    path = _write(tmp_path, _set(BASE, (*section, "colour"), "blue"))
    with pytest.raises(ProfileError, match="unknown key") as caught:
        profiles.load(str(path))
    assert _dotted((*section, "colour")) in caught.value.one_line()
    assert "known here:" in caught.value.fix


def test_a_mistyped_threshold_is_no_longer_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, _set(BASE, ("thresholds", "scale_down_bound"), 60))
    with pytest.raises(ProfileError, match=r"scale_down_bound: unknown key") as caught:
        profiles.load(str(path))
    assert "scale_down_slack_s" in caught.value.fix


@pytest.mark.parametrize(
    ("key", "value", "choices"),
    [
        (("kuberay", "install"), "kustomize", "local-build, helm, existing, source"),
        (("gateway", "install"), "nginx", "local-build, istio, envoy-gateway, existing"),
        (("images", "pull_policy"), "Sometimes", "Always, IfNotPresent, Never"),
        (("exposure", "head_service_type"), "Public", "ClusterIP, NodePort, LoadBalancer"),
    ],
)
def test_an_unknown_mode_lists_the_choices(tmp_path: Path, key: tuple, value: str, choices: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(_write(tmp_path, _set(BASE, key, value))))
    assert f"{_dotted(key)}: {value!r} is not one of the choices" in caught.value.one_line()
    assert caught.value.fix == f"use one of {choices}"


def test_quoted_no_and_yaml_1_1_yes_are_not_booleans(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    text = (profiles.BUNDLED / "default.yaml").read_text()
    path.write_text(
        text.replace("{RayServiceIncrementalUpgrade: true}", '{RayServiceIncrementalUpgrade: "no"}').replace(
            "simulated: true", "simulated: yes"
        )
    )
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(path))
    lines = caught.value.one_line().splitlines()
    assert "has 2 problems" in lines[0]
    assert "kuberay.feature_gates.RayServiceIncrementalUpgrade: 'no' is not a boolean" in lines[1]
    assert "gpu.simulated: 'yes' is not a boolean" in lines[2]


def test_an_unquoted_version_is_refused_with_quote_it(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    text = (profiles.BUNDLED / "default.yaml").read_text()
    path.write_text(text.replace('ray_versions: ["2.58.0"]', "ray_versions: [2.10]"))
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(path))
    assert caught.value.one_line().endswith(
        'line 4, ray_versions[0]: 2.10 is a number, not a string; quote it: "2.10"'
    )


def test_every_problem_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    data = _set(_set(_set(BASE, ("gpu", "count"), "two"), ("timeouts", "ready"), "soon"), ("x",), 1)
    with pytest.raises(ProfileError) as caught:
        profiles.load(str(_write(tmp_path, data)))
    assert [p.where.split(", ")[1] for p in caught.value.problems] == ["timeouts.ready", "gpu.count", "x"]
    assert all(p.where.startswith("line ") for p in caught.value.problems)


def test_a_ray_image_template_must_name_the_version_once(tmp_path: Path) -> None:
    data = _set(BASE, ("images", "ray"), "rayproject/ray:{version}")
    with pytest.raises(ProfileError, match=r"images\.ray: .* must name the Ray version as \{ray_version\}"):
        profiles.load(str(_write(tmp_path, data)))


def test_a_ray_version_the_template_cannot_make_an_image_of_is_refused() -> None:
    profile = profiles.load("default")
    profile.check_ray_versions(("2.58.0", "2.9.0rc1"))
    with pytest.raises(UsageError, match=r"makes the image 'localhost/kuberay-conformance/ray:2\.58\+"):
        profile.check_ray_versions(("2.58+local build",))


def test_thresholds_answer_by_key_and_list_exactly_the_bundled_keys() -> None:
    keys = set()
    for name in profiles.available():
        loaded = profiles.load(name)
        data = yaml.safe_load(loaded.source.read_text())
        keys |= set(data.get("thresholds", {}))
        for key, value in data.get("thresholds", {}).items():
            assert loaded.thresholds[key] == value
    assert set(schema.Thresholds.model_fields) == keys
    with pytest.raises(KeyError, match="no threshold 'nope'"):
        profiles.load("default").thresholds["nope"]


def test_the_published_json_schema_is_the_models() -> None:
    published = (profiles.BUNDLED / "profile.schema.json").read_text()
    assert json.loads(published) == json.loads(schema.json_schema()), (
        "regenerate it: kuberay-conformance profile schema > conformance/profiles/profile.schema.json"
    )
