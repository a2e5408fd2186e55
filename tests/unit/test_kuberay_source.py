"""A KubeRay checkout as the system under test: reading it, keying its build, and the gate facts
compared with what runs (pure logic; the build and the installs run in tests/e2e)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from conformance.build import gobuild
from conformance.errors import UsageError
from conformance.install import kuberay_chart, kuberay_source, operator_args, operator_spec
from conformance.install.operator_spec import OperatorSpec

# A features.go of the shape KubeRay's has (written for this test, not copied).
FEATURES_GO = """package features

const (
\tAlpha featuregate.Feature = "Alpha"
)

var defaultFeatureGates = map[featuregate.Feature]featuregate.FeatureSpec{
\tGateOn:  {Default: true, PreRelease: featuregate.Beta},
\tGateOff: {Default: false, PreRelease: featuregate.Alpha},
}

func other() { x := map[string]int{} }
"""


def make_checkout(
    root: Path,
    *,
    chart: dict | None = None,
    kustomize_tag: str = "v1.6.2",
    module: str = kuberay_source.OPERATOR_MODULE,
) -> Path:
    operator = root / "ray-operator"
    (operator / "pkg" / "features").mkdir(parents=True)
    (operator / "go.mod").write_text(f"module {module}\n\ngo 1.26.0\n")
    (operator / "main.go").write_text("package main\n\nfunc main() {}\n")
    (operator / "pkg" / "features" / "features.go").write_text(FEATURES_GO)
    default = operator / "config" / "default"
    default.mkdir(parents=True)
    images = [{"name": "kuberay/operator", "newName": "quay.io/kuberay/operator", "newTag": kustomize_tag}]
    (default / "kustomization.yaml").write_text(yaml.safe_dump({"images": images}))
    if chart is not None:
        chart_dir = root / "helm-chart" / "kuberay-operator"
        chart_dir.mkdir(parents=True)
        (chart_dir / "Chart.yaml").write_text(yaml.safe_dump(chart))
    return root


# --- is it a checkout ------------------------------------------------------------------------


def test_a_folder_that_is_no_checkout_is_a_usage_error_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such folder") as missing:
        kuberay_source.open_checkout(tmp_path / "nope")
    assert "--kuberay-source" in missing.value.fix
    with pytest.raises(UsageError, match=r"not a KubeRay checkout \(no ray-operator/go.mod\)"):
        kuberay_source.open_checkout(tmp_path)
    other = make_checkout(tmp_path / "other", module="example.com/not/kuberay")
    with pytest.raises(UsageError, match=r"declares example\.com/not/kuberay"):
        kuberay_source.open_checkout(other)


def test_the_layout_follows_the_chart(tmp_path: Path) -> None:
    with_chart = kuberay_source.open_checkout(make_checkout(tmp_path / "a", chart={"version": "1.7.0"}))
    without = kuberay_source.open_checkout(make_checkout(tmp_path / "b"))
    assert with_chart.layout == kuberay_source.LAYOUT_CHART
    assert without.layout == kuberay_source.LAYOUT_KUSTOMIZE and without.chart_dir is None


def test_neither_chart_nor_kustomize_config_is_refused(tmp_path: Path) -> None:
    root = make_checkout(tmp_path)
    (root / "ray-operator" / "config" / "default" / "kustomization.yaml").unlink()
    with pytest.raises(UsageError, match="nothing says how to install it"):
        kuberay_source.open_checkout(root)


# --- version and provenance ------------------------------------------------------------------


def test_version_from_the_chart_app_version_first_then_its_version(tmp_path: Path) -> None:
    app = kuberay_source.open_checkout(
        make_checkout(tmp_path / "a", chart={"version": "9.9.9", "appVersion": "v1.8.0"})
    )
    plain = kuberay_source.open_checkout(make_checkout(tmp_path / "b", chart={"version": "1.7.0"}))
    assert kuberay_source.provenance(app).version == "v1.8.0"
    assert kuberay_source.provenance(app).version_from.endswith("Chart.yaml appVersion")
    assert kuberay_source.provenance(plain).version == "v1.7.0"


def test_version_of_a_kustomize_tree_from_its_image_tag_and_a_ref_without_git(tmp_path: Path) -> None:
    checkout = kuberay_source.open_checkout(make_checkout(tmp_path, kustomize_tag="v1.6.2"))
    prov = kuberay_source.provenance(checkout)
    assert (prov.version, prov.commit, prov.describe) == ("v1.6.2", "", "")
    assert prov.ref.startswith("v1.6.2, tree ") and prov.ref.endswith("(no .git)")
    assert "built from source at v1.6.2" in prov.note() and "kustomize" in prov.note()


def test_an_unreadable_version_is_a_usage_error_naming_kuberay_version(tmp_path: Path) -> None:
    checkout = kuberay_source.open_checkout(make_checkout(tmp_path, kustomize_tag="latest"))
    with pytest.raises(UsageError) as error:
        kuberay_source.provenance(checkout)
    assert "--kuberay-version" in error.value.fix
    assert kuberay_source.provenance(checkout, explicit_version="1.9.0").version == "v1.9.0"
    assert kuberay_source.provenance(checkout, "1.9.0").version_from == "--kuberay-version"
    with pytest.raises(UsageError, match="not a version"):
        kuberay_source.provenance(checkout, explicit_version="main")


def _git(root: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


def test_git_describe_and_commit_make_the_ref_and_a_release_tag_the_version(tmp_path: Path) -> None:
    root = make_checkout(tmp_path, kustomize_tag="latest")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "x")
    _git(root, "tag", "ray-operator/v1.7.0")
    commit = _git(root, "rev-parse", "HEAD")
    prov = kuberay_source.provenance(kuberay_source.open_checkout(root))
    assert (prov.version, prov.version_from) == ("v1.7.0", "git describe")
    assert prov.describe == "ray-operator/v1.7.0" and prov.commit == commit
    assert prov.ref == f"ray-operator/v1.7.0 ({commit[:12]})"
    (root / "ray-operator" / "main.go").write_text("package main\n// edited\nfunc main() {}\n")
    edited = kuberay_source.provenance(kuberay_source.open_checkout(root))
    assert edited.describe == "ray-operator/v1.7.0-dirty"
    assert edited.version == "v1.7.0"  # a dirty tree of the tag is still that tag's code plus edits


def test_describe_version_only_on_a_release_tag() -> None:
    assert kuberay_source.describe_version("ray-operator/v1.7.0") == "v1.7.0"
    assert kuberay_source.describe_version("v1.6.2-dirty") == "v1.6.2"
    assert kuberay_source.describe_version("ray-operator/v1.7.0-3-gabcdef0") == ""
    assert kuberay_source.describe_version("abcdef0") == ""


# --- the build's cache key -------------------------------------------------------------------


def test_the_build_key_changes_with_the_tree_content_and_only_then(tmp_path: Path) -> None:
    root = make_checkout(tmp_path)
    operator = root / "ray-operator"
    first = kuberay_source.tree_sha256(operator)
    assert kuberay_source.tree_sha256(operator) == first
    (operator / "bin").mkdir()
    (operator / "bin" / "kustomize").write_text("a tool the Makefile downloaded")
    assert kuberay_source.tree_sha256(operator) == first, "bin/ does not shape the binary"
    (operator / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    edited = kuberay_source.tree_sha256(operator)
    assert edited != first
    assert gobuild.tree_key("kuberay-source", first) != gobuild.tree_key("kuberay-source", edited)
    assert gobuild.tree_key("kuberay-source", first) == gobuild.tree_key("kuberay-source", first)
    prov = kuberay_source.provenance(kuberay_source.open_checkout(root))
    assert kuberay_source.image_tag(prov) == f"v1.6.2-src.{edited[:12]}"
    # What a check reads back from the running image is the checkout's version (the scoped operator).
    assert (
        operator_args.version_from_image(f"localhost/x/kuberay-operator:{kuberay_source.image_tag(prov)}")
        == "v1.6.2"
    )
    assert operator_args.version_from_image("quay.io/kuberay/operator:v1.7.0-rc.1") == "v1.7.0-rc.1"


# --- gates -----------------------------------------------------------------------------------


def test_binary_gate_defaults_come_from_the_defaultfeaturegates_map() -> None:
    assert kuberay_source.binary_gate_defaults(FEATURES_GO) == {"GateOn": True, "GateOff": False}
    assert kuberay_source.binary_gate_defaults("package features\n") == {}


def test_an_unknown_gate_in_the_profile_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    checkout = kuberay_source.open_checkout(make_checkout(tmp_path))
    kuberay_source.check_gates(checkout, {"GateOff": True})
    with pytest.raises(UsageError, match="no feature gate Typo") as error:
        kuberay_source.check_gates(checkout, {"Typo": True})
    assert "GateOn, GateOff" in error.value.fix


def test_known_gates_of_a_source_spec_replace_the_tables() -> None:
    spec = OperatorSpec(version="v1.9.0", feature_gates={"NewGate": True}, known_gates=("NewGate",))
    assert spec.feature_gates == {"NewGate": True}
    with pytest.raises(UsageError, match="no feature gate Other"):
        OperatorSpec(version="v1.9.0", feature_gates={"Other": True}, known_gates=("NewGate",))


CHART_GATES = [{"name": "A", "enabled": True}, {"name": "B", "enabled": False}]


def test_the_chart_gate_list_keeps_its_order_with_overrides_and_new_gates_appended() -> None:
    merged = kuberay_chart.merged_gate_list(CHART_GATES, {"B": True, "C": False})
    assert merged == [
        {"name": "A", "enabled": True},
        {"name": "B", "enabled": True},
        {"name": "C", "enabled": False},
    ]


def test_chart_values_for_a_local_image_never_pull_and_roll_on_a_rebuild() -> None:
    spec = OperatorSpec(version="v1.7.0", feature_gates={"RayCronJob": True}, watch_namespaces=("a",))
    values = kuberay_chart.chart_values(
        spec, {"featureGates": CHART_GATES}, "localhost/k/kuberay-operator:v1.7.0-src.abc", "build-1"
    )
    assert values["image"] == {
        "repository": "localhost/k/kuberay-operator",
        "tag": "v1.7.0-src.abc",
        "pullPolicy": "Never",
    }
    assert values["annotations"] == {kuberay_chart.IMAGE_BUILD_ANNOTATION: "build-1"}
    assert values["resources"]["limits"]["cpu"] == "500m"  # as the hand-made install, on a small node
    assert values["watchNamespace"] == ["a"] and values["leaderElectionEnabled"] is True
    assert values["featureGates"][-1] == {"name": "RayCronJob", "enabled": True}
    released = kuberay_chart.chart_values(OperatorSpec(), {"featureGates": CHART_GATES})
    assert released["image"] == {"tag": "v1.7.0"} and "annotations" not in released
    assert "resources" not in released  # a released image on a real cluster: the chart's own


def test_chart_sources_give_helm_a_folder_or_a_repository_and_version(tmp_path: Path) -> None:
    assert kuberay_chart.ChartSource(directory=tmp_path).args() == [str(tmp_path)]
    repo = kuberay_chart.ChartSource.repository("v1.7.0")
    assert repo.args() == ["kuberay-operator", "--repo", operator_spec.HELM_REPO, "--version", "1.7.0"]


def test_kustomize_output_gets_the_gates_merged_our_label_and_never_pulls() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "kuberay-operator"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "kuberay-operator",
                            "args": ["--feature-gates=A=true", "--reconcile-concurrency=1"],
                        }
                    ]
                }
            }
        },
    }
    (doc,) = kuberay_chart.deploy_docs([deployment], {"B": True}, "build-2")
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--reconcile-concurrency=1", "--feature-gates=A=true,B=true"]
    assert container["imagePullPolicy"] == "Never" and container["resources"] == kuberay_chart.LOCAL_RESOURCES
    assert doc["metadata"]["labels"][kuberay_chart.INSTALL_LABEL] == kuberay_chart.KUSTOMIZE
    assert (
        doc["spec"]["template"]["metadata"]["annotations"][kuberay_chart.IMAGE_BUILD_ANNOTATION] == "build-2"
    )
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][0] == "--feature-gates=A=true"
    assert kuberay_chart.with_gates(["--x=1"], {}) == ["--x=1"]


def test_what_the_chart_and_the_manifest_promise() -> None:
    binary = {"A": False, "B": False, "Z": True}
    values = {"featureGates": CHART_GATES, "leaderElectionEnabled": False}
    gates, leader = kuberay_chart.promised_by_chart(values, {"B": True}, binary)
    assert gates == {"A": True, "B": True, "Z": True} and leader is False
    gates, leader = kuberay_chart.promised_by_manifest(["--feature-gates=A=true"], {}, binary)
    assert gates == {"A": True, "B": False, "Z": True} and leader is True  # main.go's default


def test_gate_mismatches_name_each_differing_gate_on_either_side() -> None:
    assert kuberay_chart.gate_mismatches({"A": True}, {"A": True}) == {}
    found = kuberay_chart.gate_mismatches({"A": True, "B": False}, {"A": False, "C": True})
    assert found == {
        "A": {"running": True, "promised": False},
        "B": {"running": False, "promised": None},
        "C": {"running": None, "promised": True},
    }


def test_the_reports_first_screen_says_where_kuberay_came_from() -> None:
    from conformance.report import html  # noqa: PLC0415
    from conformance.report.summary import Summary  # noqa: PLC0415

    prov = kuberay_source.Provenance(
        "v1.7.0",
        "Chart.yaml version",
        "ray-operator/v1.7.0 (59d663aeec13)",
        "59d663aeec13",
        "",
        "x" * 64,
        "helm-chart",
    )
    summary = Summary("r", "2026-12-01T00:00:00+00:00", "local", "default", {"kuberay": "v1.7.0"})
    summary.environment["kuberay_origin"] = prov.note()
    shown = dict(html.facts(summary))["KubeRay from"]
    assert shown.startswith("KubeRay v1.7.0 built from source at ray-operator/v1.7.0 (59d663aeec13)")
    assert "its own Helm chart" in shown
