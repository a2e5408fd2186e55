"""Pure logic of the KubeRay install: chart defaults, rendered args, reading args and facts back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from conformance.build import pins
from conformance.errors import UsageError
from conformance.install import kuberay, kuberay_chart, operator_args, operator_spec
from conformance.install.operator_spec import OperatorSpec

CHART_1_7_0_GATES = (
    "RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true,"
    "RayServiceIncrementalUpgrade=true,RayCronJob=false,RayClusterMTLS=false,"
    "RayClusterNetworkPolicy=false,RayClusterHistoryServer=false"
)
CHART_1_7_0_ARGS = [
    "--log-stdout-encoder", "json",
    "--log-file-encoder", "json",
    "--enable-leader-election=true",
    "--enable-metrics=true",
    "--reconcile-concurrency=1",
    "--qps=100",
    "--burst=200",
    f"--feature-gates={CHART_1_7_0_GATES}",
]  # fmt: skip


# --- the spec ---------------------------------------------------------------------------------


def test_default_spec_is_the_chart_1_7_0_default() -> None:
    spec = OperatorSpec()
    assert spec.version == "v1.7.0"
    assert spec.namespace == "kuberay-system"
    assert spec.leader_election is True
    assert spec.watch_namespaces == ()
    assert list(spec.feature_gates.items()) == [
        ("RayClusterStatusConditions", True),
        ("RayJobDeletionPolicy", True),
        ("RayMultiHostIndexing", True),
        ("RayServiceIncrementalUpgrade", True),
        ("RayCronJob", False),
        ("RayClusterMTLS", False),
        ("RayClusterNetworkPolicy", False),
        ("RayClusterHistoryServer", False),
    ]


def test_default_gates_are_a_fresh_copy_per_spec() -> None:
    first = OperatorSpec()
    first.feature_gates["RayCronJob"] = True
    assert OperatorSpec().feature_gates["RayCronJob"] is False


def test_previous_version_gets_its_own_chart_defaults() -> None:
    spec = OperatorSpec(version="v1.6.1")
    assert spec.feature_gates == {
        "RayClusterStatusConditions": True,
        "RayJobDeletionPolicy": True,
        "RayMultiHostIndexing": True,
        "RayServiceIncrementalUpgrade": False,
        "RayCronJob": False,
    }


def test_spec_is_hashable_and_with_gates_changes_only_the_gates() -> None:
    spec = OperatorSpec()
    changed = spec.with_gates(RayCronJob=True)
    assert hash(spec) == hash(changed)  # the gates are left out of the hash, not out of equality
    assert changed != spec
    assert changed.feature_gates["RayCronJob"] is True
    assert spec.feature_gates["RayCronJob"] is False
    assert list(changed.feature_gates) == list(spec.feature_gates)


def test_a_gate_the_binary_does_not_know_is_refused_before_it_crashes_the_operator() -> None:
    with pytest.raises(UsageError, match="RayClusterMTLS"):
        OperatorSpec(version="v1.6.1", feature_gates={"RayClusterMTLS": True})
    with pytest.raises(UsageError, match="NoSuchGate"):
        OperatorSpec().with_gates(NoSuchGate=True)


def test_unknown_version_needs_explicit_gates() -> None:
    with pytest.raises(UsageError, match=r"v9\.9\.9"):
        OperatorSpec(version="v9.9.9")
    assert OperatorSpec(version="v9.9.9", feature_gates={"Anything": True}).feature_gates == {
        "Anything": True
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"version": "1.7.0"},
        {"version": "latest"},
        {"namespace": "Kuberay"},
        {"namespace": "a_b"},
        {"watch_namespaces": ("ok", "-bad")},
    ],
)
def test_spec_rejects_bad_names(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        OperatorSpec(**kwargs)


def test_every_chart_gate_is_known_to_the_binary_of_the_same_version() -> None:
    for version, gates in operator_spec.CHART_FEATURE_GATES.items():
        assert {name for name, _ in gates} <= set(operator_spec.BINARY_FEATURE_GATES[version])


# --- rendered args ----------------------------------------------------------------------------


def test_chart_args_are_what_the_chart_renders_by_default() -> None:
    assert operator_spec.chart_args(OperatorSpec()) == CHART_1_7_0_ARGS


def test_watch_namespaces_come_first_comma_joined_as_in_the_chart() -> None:
    args = operator_spec.chart_args(OperatorSpec(watch_namespaces=("team-a", "team-b")))
    assert args[:2] == ["--watch-namespace", "team-a,team-b"]
    assert args[2:] == CHART_1_7_0_ARGS


def test_leader_election_off_and_no_gates() -> None:
    args = operator_spec.chart_args(OperatorSpec(leader_election=False, feature_gates={}))
    assert "--enable-leader-election=false" in args
    assert not any(arg.startswith("--feature-gates") for arg in args)


# --- reading args back ------------------------------------------------------------------------


def test_parsing_the_chart_args_gives_the_spec_back() -> None:
    spec = OperatorSpec(watch_namespaces=("x", "y"), leader_election=False).with_gates(RayCronJob=True)
    parsed = operator_args.parse_operator_args(operator_spec.chart_args(spec))
    assert parsed.feature_gates == spec.feature_gates
    assert parsed.leader_election is False
    assert parsed.watch_namespaces == ("x", "y")
    assert parsed.flags["qps"] == "100"
    assert parsed.config_file == ""


def test_absent_flags_take_main_go_defaults() -> None:
    parsed = operator_args.parse_operator_args([])
    assert parsed.leader_election is True
    assert parsed.watch_namespaces == ()
    assert parsed.feature_gates == {}
    assert parsed.leader_election_namespace == ""


def test_go_flag_syntax() -> None:
    flags = operator_args.parse_flags(
        [
            "-enable-leader-election",
            "--watch-namespace",
            "a,b",
            "-qps=5",
            "--enable-metrics",
            "x",
            "--burst=9",
        ]
    )
    # A bool flag never takes the next argument; parsing stops at the first non-flag.
    assert flags == {
        "enable-leader-election": "true",
        "watch-namespace": "a,b",
        "qps": "5",
        "enable-metrics": "true",
    }
    assert operator_args.parse_flags(["--reconcile-concurrency=2", "--", "--qps=1"]) == {
        "reconcile-concurrency": "2"
    }


def test_bool_flag_with_explicit_value() -> None:
    assert operator_args.parse_operator_args(["--enable-leader-election=F"]).leader_election is False
    assert operator_args.parse_operator_args(["--enable-leader-election=1"]).leader_election is True


def test_feature_gates_parse_like_featuregate_set() -> None:
    assert operator_args.parse_feature_gates(" A=true, B=False ,C=0,") == {"A": True, "B": False, "C": False}
    assert operator_args.parse_feature_gates("") == {}
    with pytest.raises(ValueError):
        operator_args.parse_feature_gates("A")
    with pytest.raises(ValueError):
        operator_args.parse_feature_gates("A=yes")


def test_the_last_feature_gates_flag_wins() -> None:
    parsed = operator_args.parse_operator_args(["--feature-gates=A=true", "--feature-gates=B=true"])
    assert parsed.feature_gates == {"B": True}


def test_effective_gates_fill_in_the_binary_defaults() -> None:
    effective = operator_args.effective_feature_gates("v1.7.0", {"RayCronJob": True})
    assert effective["RayCronJob"] is True
    assert effective["SidecarSubmitterRestart"] is False
    assert effective["GCSFaultToleranceEmbeddedStorage"] is False
    assert effective["KubernetesWAS"] is False
    assert effective["RayServiceIncrementalUpgrade"] is True
    assert len(effective) == 11
    assert operator_args.effective_feature_gates("v9.9.9", {"A": True}) == {"A": True}


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("quay.io/kuberay/operator:v1.7.0", "v1.7.0"),
        ("localhost/kuberay-conformance/kuberay-operator:v1.7.0", "v1.7.0"),
        ("localhost:5000/kuberay/operator:1.6.1", "v1.6.1"),
        ("quay.io/kuberay/operator:v1.7.0-rc.0@sha256:" + "a" * 64, "v1.7.0-rc.0"),
        ("localhost:5000/kuberay/operator", ""),
        ("quay.io/kuberay/operator:latest", ""),
        ("quay.io/kuberay/operator@sha256:" + "b" * 64, ""),
    ],
)
def test_version_from_image(image: str, version: str) -> None:
    assert operator_args.version_from_image(image) == version


def test_served_versions_skip_versions_not_served() -> None:
    crd = {"spec": {"versions": [{"name": "v1", "served": True}, {"name": "v1alpha1", "served": False}]}}
    assert operator_args.served_versions(crd) == ("v1",)
    assert operator_args.served_versions({}) == ()


def test_lease_is_held_only_while_renewed() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    assert operator_args.lease_is_held("pod_1", now - timedelta(seconds=5), 15, now)
    assert not operator_args.lease_is_held("pod_1", now - timedelta(seconds=20), 15, now)
    assert not operator_args.lease_is_held("", now, 15, now)
    assert not operator_args.lease_is_held("pod_1", None, 15, now)


# --- rendering --------------------------------------------------------------------------------


def _rendered(spec: OperatorSpec | None = None) -> dict[str, dict]:
    docs = kuberay.render_operator(spec or OperatorSpec(namespace="ops"), "localhost/k/op:v1.7.0", "build-1")
    return {doc["kind"]: doc for doc in docs}


def test_template_renders_every_object_in_the_namespace() -> None:
    docs = _rendered()
    assert set(docs) == {"ServiceAccount", "ClusterRoleBinding", "RoleBinding", "Service", "Deployment"}
    for kind in ("ServiceAccount", "RoleBinding", "Service", "Deployment"):
        assert docs[kind]["metadata"]["namespace"] == "ops"
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert docs[kind]["subjects"] == [
            {"kind": "ServiceAccount", "name": "kuberay-operator", "namespace": "ops"}
        ]
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == "kuberay-operator"
    assert docs["RoleBinding"]["roleRef"]["name"] == "kuberay-operator-leader-election"


def test_deployment_runs_the_local_image_with_the_chart_args() -> None:
    deployment = _rendered()["Deployment"]
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == "localhost/k/op:v1.7.0"
    assert container["imagePullPolicy"] == "Never"
    assert container["command"] == ["/manager"]
    assert container["args"] == CHART_1_7_0_ARGS
    assert container["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "http"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8080, "health": 8082}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert pod["spec"]["serviceAccountName"] == "kuberay-operator"
    assert pod["metadata"]["annotations"] == {"kuberay-conformance.io/image-build": "build-1"}
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert _rendered()["Service"]["spec"]["selector"] == selector


def test_template_has_no_placeholder_left(tmp_path: Path) -> None:
    text = yaml.safe_dump_all(kuberay.render_operator(OperatorSpec(), "img:v1"))
    assert "${" not in text
    with pytest.raises(Exception, match="missing"):
        kuberay.render_operator(OperatorSpec(), "img:v1", manifest=tmp_path / "absent.yaml")


def _write(path: Path, *docs: dict) -> None:
    path.write_text(yaml.safe_dump_all(docs))


def _fake_rbac(directory: Path) -> Path:
    directory.mkdir()
    listed = ["role.yaml", "role_binding.yaml", "leader_election_role.yaml", "service_account.yaml"]
    _write(directory / "kustomization.yaml", {"resources": listed})
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    _write(
        directory / "role.yaml",
        {"kind": "ClusterRole", "metadata": {"name": "kuberay-operator"}, "rules": [rule]},
    )
    _write(
        directory / "role_binding.yaml",
        {"kind": "ClusterRoleBinding", "metadata": {"name": "kuberay-operator"}},
    )
    leader = {"kind": "Role", "metadata": {"name": "kuberay-operator-leader-election"}, "rules": []}
    _write(directory / "leader_election_role.yaml", leader)
    _write(
        directory / "service_account.yaml",
        {"kind": "ServiceAccount", "metadata": {"name": "kuberay-operator"}},
    )
    # Not in the kustomization: user-facing roles the operator does not need.
    _write(
        directory / "ray_rayjob_editor_role.yaml",
        {"kind": "ClusterRole", "metadata": {"name": "rayjob-editor"}},
    )
    return directory


def test_rbac_takes_only_the_roles_the_kustomization_lists(tmp_path: Path) -> None:
    roles = kuberay.rbac_roles(_fake_rbac(tmp_path / "rbac"), OperatorSpec(namespace="ops"))
    assert [(r["kind"], r["metadata"]["name"]) for r in roles] == [
        ("ClusterRole", "kuberay-operator"),
        ("Role", "kuberay-operator-leader-election"),
    ]
    assert roles[1]["metadata"]["namespace"] == "ops"
    assert roles[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kuberay-conformance"
    assert len(roles[0]["rules"]) == 1


def test_rbac_adds_the_scheduling_rule_when_kubernetes_was_is_on(tmp_path: Path) -> None:
    spec = OperatorSpec().with_gates(KubernetesWAS=True)
    cluster_role = kuberay.rbac_roles(_fake_rbac(tmp_path / "rbac"), spec)[0]
    assert cluster_role["rules"][-1]["apiGroups"] == ["scheduling.k8s.io"]
    assert cluster_role["rules"][-1]["resources"] == ["podgroups", "workloads"]


def test_crd_documents_keep_only_crds(tmp_path: Path) -> None:
    (tmp_path / "ray.io_rayclusters.yaml").write_text(
        "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n"
        "  name: rayclusters.ray.io\n"
    )
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    assert [d["metadata"]["name"] for d in kuberay.crd_documents(tmp_path)] == ["rayclusters.ray.io"]


def test_operator_tool_is_the_pin_or_the_pin_at_another_version() -> None:
    pinned = kuberay.operator_tool(pins.KUBERAY)
    assert pinned is pins.TOOLS["kuberay"]
    other = kuberay.operator_tool("v1.6.1")
    assert other.version == "v1.6.1"
    assert other.module == pinned.module
    assert other.binaries == ("kuberay-operator",)


def test_holder_pod_is_the_part_before_the_uuid() -> None:
    identity = "kuberay-operator-66847b99b9-z6vh8_1afc003c-1013-4ec6-9020-c36e651f2c47"
    assert operator_args.holder_pod(identity) == "kuberay-operator-66847b99b9-z6vh8"
    assert operator_args.holder_pod("") == ""


def test_seeded_env_and_extra_args_reach_the_deployment_after_the_chart_args() -> None:
    """The sensitivity suite's seeds: operator environment and arguments as KubeRay reads them."""
    spec = OperatorSpec(env={"ENABLE_GCS_FT_REDIS_CLEANUP": "false"}, extra_args=("--watch-namespace=x",))
    (deployment,) = [d for d in kuberay.render_operator(spec, "img:v1") if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "ENABLE_GCS_FT_REDIS_CLEANUP", "value": "false"}]
    assert container["args"] == [*CHART_1_7_0_ARGS, "--watch-namespace=x"]
    assert "env" not in _rendered()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert kuberay_chart.chart_values(OperatorSpec(env={"A": "1"}), {})["env"] == [
        {"name": "A", "value": "1"}
    ]
    with pytest.raises(UsageError, match="extra_args"):
        kuberay_chart.chart_values(spec, {})
