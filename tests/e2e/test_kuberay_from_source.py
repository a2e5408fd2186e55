"""`--kuberay-source`: KubeRay built from a checkout and installed its own way, on the real cluster.

- The kustomize path runs in every `make test`: the Go module of a served ray-operator release
  (v1.6.2, from the module cache) has the layout of a checkout without helm-chart/, so a folder
  holding a copy of it as ray-operator/ is a checkout the harness must build and deploy.
- The Helm-chart path needs a real checkout (nothing of one is committed): it runs when
  KRC_KUBERAY_CHECKOUT names one (the `real_checkout` fixture of tests/conftest.py),
  e.g. ray-project/kuberay at tag ray-operator/v1.7.0.

Each leaves the shared operator installed the default way (local-build), as other runs expect.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import checkouts
import pytest
from cli_runs import run_cli
from kubernetes import client, config

from conformance.install import crd_drift, kuberay, kuberay_chart, operator_facts, operator_spec
from conformance.install.source_install import SourceInstall
from conformance.kube.target import KubeTarget
from conformance.profiles import load
from conformance.providers.base import Cluster
from conformance.providers.local.provider import LocalProvider

NAMESPACE = load("default").kuberay.namespace
MODULE_VERSION = checkouts.OLDER_MODULE
# The operator checks that read what runs, and one that makes a RayCluster and waits until Ready.
CHECKS = (
    "crds_are_served or feature_gates_match or leader_election or served_crds_match "
    "or ray_version_alone_does_not_change_the_image"
)


def _run(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=2400)


def _run_operator_checks(checkout: Path, run_dir: Path) -> subprocess.CompletedProcess:
    return _run("--kuberay-source", str(checkout), "--area", "operator", "-k", CHECKS, "--keep-cluster",
                "--run-dir", str(run_dir))  # fmt: skip


def _outcomes(summary: dict) -> dict[str, str]:
    return {t["id"].rsplit("::", 1)[-1]: t["outcome"] for t in summary["tests"]}


def _restore_local_build(local_provider: LocalProvider, api: client.ApiClient, kubeconfig: Path) -> None:
    """The default install again (what other runs expect): the other install is removed first."""
    profile = load("default")
    spec = operator_spec.OperatorSpec(
        version=MODULE_VERSION,
        namespace=NAMESPACE,
        feature_gates={**operator_spec.chart_feature_gates(MODULE_VERSION), **profile.kuberay.feature_gates},
    )
    target = KubeTarget(kubeconfig)
    kuberay_chart.clear_other_installs(target, api, NAMESPACE, kuberay_chart.LOCAL_BUILD, 300)
    kuberay.install_local(local_provider, api, spec)
    operator_facts.wait_ready(api, spec, 300)


@pytest.fixture(scope="module")
def cluster_api(local_cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(str(local_cluster.kubeconfig))


@pytest.fixture
def module_checkout(tmp_path: Path) -> Path:
    """The v1.6.2 module laid out as a checkout: ray-operator/ only, no .git, no chart."""
    return checkouts.module_as_checkout(MODULE_VERSION, tmp_path)


def test_a_checkout_without_a_chart_is_built_and_deployed_with_kustomize(
    local_provider: LocalProvider,
    local_cluster: Cluster,
    cluster_api: client.ApiClient,
    module_checkout: Path,
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    try:
        done = _run_operator_checks(module_checkout, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        outcomes = _outcomes(summary)
        assert set(outcomes.values()) == {"passed"}, f"{summary['tests']}\n{done.stdout[-3000:]}"
        assert done.returncode == 0, done.stderr
        assert len(outcomes) == 5, outcomes  # the RayCluster check made a cluster Ready under it
        env = summary["environment"]
        assert summary["versions"]["kuberay"] == MODULE_VERSION
        assert env["kuberay_install"] == "source"
        assert env["kuberay_source"]["layout"] == "kustomize"
        assert env["kuberay_source"]["version_from"].endswith("kustomization.yaml images.newTag")
        assert env["kuberay_source"]["ref"].startswith(f"{MODULE_VERSION}, tree ")
        assert any("built from source at" in note for note in env["notes"]), env["notes"]
        assert "built from source at" in (run_dir / "index.html").read_text()
        dep = client.AppsV1Api(cluster_api).read_namespaced_deployment(operator_spec.NAME, NAMESPACE)
        assert dep.metadata.labels[kuberay_chart.INSTALL_LABEL] == kuberay_chart.KUSTOMIZE
        assert (
            dep.spec.selector.match_labels["app.kubernetes.io/name"] == "kuberay"
        )  # config/manager's labels
        assert dep.spec.template.spec.containers[0].image.endswith(
            f"{MODULE_VERSION}-src." + env["kuberay_source"]["tree_sha256"][:12]
        )
    finally:
        _restore_local_build(local_provider, cluster_api, local_cluster.kubeconfig)
    dep = client.AppsV1Api(cluster_api).read_namespaced_deployment(operator_spec.NAME, NAMESPACE)
    assert kuberay_chart.installed_mode(cluster_api, NAMESPACE) == kuberay_chart.LOCAL_BUILD
    assert dep.spec.selector.match_labels == {
        "app.kubernetes.io/name": operator_spec.NAME,
        "app.kubernetes.io/instance": operator_spec.NAME,
    }


def test_an_unchanged_checkout_is_not_rebuilt_and_an_edited_one_is(
    module_checkout: Path, tmp_path: Path
) -> None:
    first = SourceInstall(str(module_checkout), NAMESPACE, {}, LocalProvider().cache)
    first.check()
    again = SourceInstall(str(module_checkout), NAMESPACE, {}, LocalProvider().cache)
    again.check()
    assert first.image and again.image and again.image.ref == first.image.ref
    assert again.image.path == first.image.path
    main = module_checkout / "ray-operator" / "main.go"
    main.write_text(main.read_text() + "\n// an edit that changes the tree\n")
    edited = SourceInstall(str(module_checkout), NAMESPACE, {}, LocalProvider().cache)
    edited.check()
    assert edited.image and edited.image.ref != first.image.ref


# --- the Helm chart of a real checkout ---------------------------------------------------------


def test_a_checkout_with_its_chart_is_installed_with_helm_and_its_facts_can_fail(
    real_checkout: Path,
    local_provider: LocalProvider,
    local_cluster: Cluster,
    cluster_api: client.ApiClient,
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    try:
        done = _run_operator_checks(real_checkout, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        outcomes = _outcomes(summary)
        assert set(outcomes.values()) == {"passed"}, f"{summary['tests']}\n{done.stdout[-3000:]}"
        env = summary["environment"]
        assert env["kuberay_source"]["layout"] == "helm-chart"
        assert env["kuberay_promised"]["origin"].startswith("helm-chart/kuberay-operator/values.yaml")
        assert kuberay_chart.installed_mode(cluster_api, NAMESPACE) == kuberay_chart.HELM
        assert kuberay_chart.helm_release_secrets(cluster_api, NAMESPACE)
        _the_facts_checks_fail_when_what_runs_differs(
            real_checkout, local_provider, cluster_api, local_cluster
        )
    finally:
        _restore_local_build(local_provider, cluster_api, local_cluster.kubeconfig)
    assert not kuberay_chart.helm_release_secrets(cluster_api, NAMESPACE), "the Helm release was left behind"
    assert kuberay_chart.installed_mode(cluster_api, NAMESPACE) == kuberay_chart.LOCAL_BUILD


def _the_facts_checks_fail_when_what_runs_differs(
    checkout: Path, provider: LocalProvider, api: client.ApiClient, cluster: Cluster
) -> None:
    """Behind the harness's back: a gate flipped in the Deployment Helm made, a description added to
    a served CRD. The comparisons the checks make must see both; a new install repairs both."""
    source = SourceInstall(
        str(checkout), NAMESPACE, dict(load("default").kuberay.feature_gates), provider.cache
    )
    source.check()
    spec, promised = source.install(provider, api, KubeTarget(cluster.kubeconfig), 300)
    apps = client.AppsV1Api(api)
    dep = apps.read_namespaced_deployment(operator_spec.NAME, NAMESPACE)
    args = list(dep.spec.template.spec.containers[0].args)
    flipped = kuberay_chart.with_gates(args, {"RayCronJob": not promised.feature_gates["RayCronJob"]})
    apps.patch_namespaced_deployment(
        operator_spec.NAME,
        NAMESPACE,
        {"spec": {"template": {"spec": {"containers": [{"name": operator_spec.NAME, "args": flipped}]}}}},
    )
    facts = operator_facts.observed_operator(api, NAMESPACE)
    mismatched = kuberay_chart.gate_mismatches(
        kuberay_chart.running_gates(facts, promised.binary_gates), promised.feature_gates
    )
    assert list(mismatched) == ["RayCronJob"], mismatched
    ext = client.ApiextensionsV1Api(api)
    ext.patch_custom_resource_definition(
        "rayclusters.ray.io",
        [
            {
                "op": "add",
                "path": "/spec/versions/0/schema/openAPIV3Schema/description",
                "value": "edited by hand",
            }
        ],
    )
    served = {
        c.metadata.name: operator_facts.api_to_dict(c)
        for c in ext.list_custom_resource_definition().items
        if c.spec.group == "ray.io"
    }
    assert "rayclusters.ray.io" in crd_drift.drift(served, promised.crds)
    source.install(provider, api, KubeTarget(cluster.kubeconfig), 300)  # helm's 3-way merge repairs
    facts = operator_facts.observed_operator(api, NAMESPACE)
    assert not kuberay_chart.gate_mismatches(
        kuberay_chart.running_gates(facts, promised.binary_gates), promised.feature_gates
    )
    served = {
        c.metadata.name: operator_facts.api_to_dict(c)
        for c in ext.list_custom_resource_definition().items
        if c.spec.group == "ray.io"
    }
    assert not crd_drift.drift(served, promised.crds)
    del spec
