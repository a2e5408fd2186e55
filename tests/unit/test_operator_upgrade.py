"""The pure parts of moving the operator between versions: which version, which arguments."""

from __future__ import annotations

from conformance.build.gobuild import previous_minor_candidates
from conformance.install import operator_spec, operator_upgrade
from conformance.install.operator_spec import OperatorSpec


def test_previous_minor_candidates_are_that_minor_newest_first() -> None:
    listed = ["v1.4.2", "v1.5.0", "v1.5.1", "v1.5.2", "v1.6.0-rc.0", "v1.6.1", "v1.6.2"]
    candidates = previous_minor_candidates("v1.6.2", listed)
    assert candidates[:3] == ["v1.5.9", "v1.5.8", "v1.5.7"]  # unlisted patches are asked too
    assert candidates[-3:] == ["v1.5.2", "v1.5.1", "v1.5.0"]
    assert all(v.startswith("v1.5.") for v in candidates)


def test_a_first_minor_has_no_previous_one() -> None:
    assert previous_minor_candidates("v2.0.3", ["v1.9.0"]) == []


def test_charts_before_1_6_render_the_feature_gates_first() -> None:
    old = operator_spec.chart_args(OperatorSpec(version="v1.5.1"))
    new = operator_spec.chart_args(OperatorSpec(version="v1.6.2"))
    assert old[0].startswith("--feature-gates=") and not new[0].startswith("--feature-gates=")
    assert sorted(old[1:]) == sorted(a for a in new if not a.startswith("--feature-gates="))
    assert old[0] == (
        "--feature-gates=RayClusterStatusConditions=true,RayJobDeletionPolicy=false,"
        "RayMultiHostIndexing=false,RayServiceIncrementalUpgrade=false"
    )


def test_the_previous_spec_keeps_only_overrides_the_older_binary_knows() -> None:
    current = OperatorSpec(version="v1.6.2").with_gates(RayServiceIncrementalUpgrade=True, RayCronJob=True)
    overrides = {"RayServiceIncrementalUpgrade": True, "RayCronJob": True}
    previous = operator_upgrade.previous_spec(current, "v1.5.1", overrides)
    assert previous.version == "v1.5.1" and previous.namespace == current.namespace
    assert previous.feature_gates == {
        "RayClusterStatusConditions": True,
        "RayJobDeletionPolicy": False,
        "RayMultiHostIndexing": False,
        "RayServiceIncrementalUpgrade": True,
    }


def test_the_patch_changes_image_args_and_version_label_of_the_operator_container() -> None:
    spec = OperatorSpec(version="v1.5.1")
    target = operator_upgrade.OperatorVersion(spec, "localhost/op:v1.5.1", ("--a", "--b"))
    patch = operator_upgrade._patch(target)
    assert patch["metadata"]["labels"] == {"app.kubernetes.io/version": "v1.5.1"}
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    assert container == {"name": operator_spec.NAME, "image": "localhost/op:v1.5.1", "args": ["--a", "--b"]}
