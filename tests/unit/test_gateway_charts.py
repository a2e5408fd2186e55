"""Istio and Envoy Gateway from their Helm charts (kind, eks, existing), without a cluster.

The pure parts (the plan, helm's argv and values, profile validation, the refusals) are checked
directly. The helm and kind calls run against recording stand-in programs on PATH, in the style
of test_terraform_orchestration_only.py; in the install-sequence test the Kubernetes-side steps
(CRDs, GatewayClass, waits) are replaced by recorders, so it shows the order and the record of
what was made, not that Istio or Envoy Gateway works: that needs a kind runner
(docs/gateway-and-load.md, "Untested here").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import standins as standin_tools
import yaml
from kubernetes import client

from conformance import profiles
from conformance.build import pins
from conformance.environment import Environment, RunOptions
from conformance.errors import ProvisioningError, UsageError
from conformance.install import gateway, gateway_charts
from conformance.kube import apply as kube_apply
from conformance.kube.rayservice import address
from conformance.kube.target import KubeTarget

# A context that is not the kubeconfig's current one: every helm call must name it.
TARGET = KubeTarget(Path("/tmp/krc-test-kubeconfig"), "krc-test-context")

# Records argv (and the values file's content) as one JSON line per call; `status` answers 0 for
# the releases named in STANDIN_EXISTING; `template` prints one CRD; STANDIN_FAIL fails a verb.
STANDIN = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
entry = {{"tool": os.path.basename(sys.argv[0]), "args": args}}
if "--values" in args:
    entry["values"] = json.load(open(args[args.index("--values") + 1]))
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\\n")
verb = args[0] if args else ""
if verb == os.environ.get("STANDIN_FAIL"):
    print("Error: simulated " + verb + " failure", file=sys.stderr)
    sys.exit(1)
if verb == "status":
    sys.exit(0 if args[1] in os.environ.get("STANDIN_EXISTING", "").split(",") else 1)
if verb == "template":
    print("---\\napiVersion: apiextensions.k8s.io/v1\\nkind: CustomResourceDefinition\\n"
          "metadata: {{name: envoyproxies.gateway.envoyproxy.io}}\\n---\\n"
          "apiVersion: v1\\nkind: ConfigMap\\nmetadata: {{name: not-a-crd}}")
"""


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return standin_tools.install(tmp_path, monkeypatch, STANDIN, "helm", "go")


# --- the plan and helm's argv (pure) ------------------------------------------------------------


def test_istio_is_base_then_istiod_from_istios_chart_repo_with_clusterip_gateways() -> None:
    steps = gateway_charts.plan("istio", "istio")
    assert [(r.name, r.chart, r.version, r.namespace) for r in steps.releases] == [
        ("istio-base", "base", "1.28.3", "istio-system"),
        ("istiod", "istiod", "1.28.3", "istio-system"),
    ]
    assert {r.repo for r in steps.releases} == {"https://istio-release.storage.googleapis.com/charts"}
    # The istiod chart's per-class defaults: every Gateway of the class gets a ClusterIP Service.
    assert steps.releases[1].values == {
        "gatewayClasses": {"istio": {"service": {"spec": {"type": "ClusterIP"}}}}
    }
    assert steps.crd_chart is None and steps.extra_docs == ()
    assert steps.gateway_class["spec"] == {"controllerName": "istio.io/gateway-controller"}


def test_envoy_gateway_gets_its_own_crds_skips_the_bundled_ones_and_a_clusterip_class() -> None:
    steps = gateway_charts.plan("envoy-gateway", "eg")
    (release,) = steps.releases
    assert (release.chart, release.version, release.skip_crds) == (
        "oci://docker.io/envoyproxy/gateway-helm",
        "v1.7.5",
        True,
    )
    assert steps.crd_chart is not None
    assert steps.crd_chart.chart == "oci://docker.io/envoyproxy/gateway-crds-helm"
    assert steps.crd_chart.values == {
        "crds": {"gatewayAPI": {"enabled": False}, "envoyGateway": {"enabled": True}}
    }
    (proxy,) = steps.extra_docs
    assert proxy["spec"]["provider"]["kubernetes"]["envoyService"]["type"] == "ClusterIP"
    spec = steps.gateway_class["spec"]
    assert spec["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"
    assert spec["parametersRef"] == {
        "group": "gateway.envoyproxy.io",
        "kind": "EnvoyProxy",
        "name": proxy["metadata"]["name"],
        "namespace": proxy["metadata"]["namespace"],
    }
    assert steps.gateway_class["metadata"]["name"] == "eg"


def test_helm_argv_waits_and_names_the_repo_only_for_a_chart_repository() -> None:
    istiod = gateway_charts.plan("istio", "istio").releases[1]
    argv = gateway_charts.upgrade_argv(istiod, TARGET, Path("/v.json"), 600)
    assert argv[:5] == ["helm", "upgrade", "--install", "istiod", "istiod"]
    assert argv[argv.index("--repo") + 1] == gateway_charts.ISTIO_REPO
    assert argv[argv.index("--version") + 1] == "1.28.3"
    assert argv[-3:] == ["--wait", "--timeout", "600s"]
    assert "--skip-crds" not in argv
    eg = gateway_charts.plan("envoy-gateway", "eg").releases[0]
    argv = gateway_charts.upgrade_argv(eg, TARGET, Path("/v.json"), 90.5)
    assert "--repo" not in argv and argv[-1] == "--skip-crds" and "90s" in argv


def test_an_unknown_implementation_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="traefik"):
        gateway_charts.plan("traefik", "x")


# --- profiles and refusals ------------------------------------------------------------------------


def _profile(tmp_path: Path, base: str, gateway_section: dict) -> Path:
    data = yaml.safe_load((profiles.BUNDLED / f"{base}.yaml").read_text())
    data["gateway"] = gateway_section
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_profiles_name_the_implementation() -> None:
    kind = profiles.load("kind")
    assert (kind.gateway_install, kind.gateway_class) == ("istio", "istio")  # as KubeRay's CI
    assert profiles.load("eks-gpu").gateway_install == "istio"  # the EKS module installs none


def test_a_bad_gateway_install_lists_the_choices(tmp_path: Path) -> None:
    path = _profile(tmp_path, "kind", {"class_name": "eg", "install": "envoy-gateway"})
    assert profiles.load(str(path)).gateway_install == "envoy-gateway"
    with pytest.raises(UsageError, match="local-build, istio, envoy-gateway, existing"):
        profiles.load(str(_profile(tmp_path, "kind", {"class_name": "x", "install": "nginx"})))


def test_istio_on_the_local_provider_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="cannot be built on this machine") as caught:
        gateway_charts.check_usable("istio", "local", "kind")
    assert "\n" not in str(caught.value)


def test_missing_helm_is_refused_before_anything_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="helm and go is not on PATH"):
        gateway_charts.check_usable("envoy-gateway", "kind", "kind")


def _environment(provider: str, profile: profiles.Profile, tmp_path: Path) -> Environment:
    return Environment(RunOptions(provider=provider, profile=profile, run_dir=tmp_path, run_id="r1"))


def test_the_environment_refuses_before_its_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kind provider's preflight would ask for terraform and Docker: the profile is refused first.
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="istio"):
        _environment("local", profiles.load("kind"), tmp_path).check_input()
    # kind loads images built here only when made as root (buildah); an ordinary user is refused.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="builds the Gateway implementation on this machine"):
        _environment("kind", profiles.load("default"), tmp_path).check_input()


# --- helm calls against the stand-in --------------------------------------------------------------


def _record(implementation: str = "envoy-gateway", class_name: str = "eg") -> gateway_charts.Installed:
    return gateway_charts.begin(implementation, class_name, TARGET)


@pytest.fixture
def kube_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Kubernetes-side steps of `install`, replaced by recorders (no cluster here)."""
    steps: list[str] = []
    monkeypatch.setattr(
        gateway_charts, "_read_class", lambda custom, name: steps.append("read class") or None
    )
    monkeypatch.setattr(gateway_charts, "_crd_exists", lambda ext, name: False)
    monkeypatch.setattr(
        gateway, "crd_documents", lambda: [{"metadata": {"name": "gateways.gateway.networking.k8s.io"}}]
    )
    monkeypatch.setattr(
        kube_apply, "apply_crds", lambda api, crds, what="": steps.append(f"crds {what} {len(crds)}")
    )
    monkeypatch.setattr(kube_apply, "apply_object", lambda dynamic, doc: steps.append(f"apply {doc['kind']}"))
    monkeypatch.setattr(gateway_charts, "DynamicClient", lambda api: None)
    monkeypatch.setattr(
        gateway_charts, "_create_class", lambda custom, doc: steps.append("create class") or True
    )
    monkeypatch.setattr(
        gateway, "wait_class_accepted", lambda api, name, timeout, where: steps.append(f"wait {name}")
    )
    return steps


def test_envoy_gateway_installs_in_order_and_records_what_it_made(
    standins: Path, kube_steps: list[str]
) -> None:
    done = gateway_charts.install(client.ApiClient(), _record(), 300)
    assert kube_steps == [
        "read class",
        "crds Gateway API 1",
        "crds envoy-gateway 1",  # the ConfigMap `helm template` also printed is no CRD
        "apply EnvoyProxy",
        "create class",
        "wait eg",
    ]
    helm = [c["args"][:2] for c in standin_tools.calls(standins)]
    assert helm == [["template", "eg-crds"], ["status", "eg"], ["upgrade", "--install"]]
    template = standin_tools.calls(standins)[0]
    assert template["values"]["crds"]["gatewayAPI"]["enabled"] is False
    assert [r.name for r in done.releases] == ["eg"] and done.class_made
    assert done.crds_made == ["gateways.gateway.networking.k8s.io", "envoyproxies.gateway.envoyproxy.io"]
    assert "installed by this run" in done.note()
    _assert_every_cluster_call_names_the_context(standin_tools.calls(standins))


def _assert_every_cluster_call_names_the_context(calls: list[dict]) -> None:
    """helm reaches the cluster in every verb but `template`: each names kubeconfig and context."""
    for call in calls:
        if call["args"][0] == "template":
            continue
        args = call["args"]
        assert args[args.index("--kubeconfig") + 1] == str(TARGET.kubeconfig), args
        assert args[args.index("--kube-context") + 1] == TARGET.context, args


def test_istio_passes_the_class_defaults_to_istiod(standins: Path, kube_steps: list[str]) -> None:
    gateway_charts.install(client.ApiClient(), _record("istio", "istio"), 300)
    upgrades = [c for c in standin_tools.calls(standins) if c["args"][0] == "upgrade"]
    assert [c["args"][2] for c in upgrades] == ["istio-base", "istiod"]
    assert upgrades[1]["values"]["gatewayClasses"]["istio"]["service"]["spec"]["type"] == "ClusterIP"


def test_a_release_that_existed_is_upgraded_but_never_recorded_as_ours(
    standins: Path, kube_steps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_EXISTING", "istio-base")
    done = gateway_charts.install(client.ApiClient(), _record("istio", "istio"), 300)
    assert [r.name for r in done.releases] == ["istiod"]


def test_a_failed_helm_install_leaves_a_record_teardown_can_undo(
    standins: Path, kube_steps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "upgrade")
    done = _record()
    with pytest.raises(ProvisioningError, match=r"install of eg v1\.7\.5 failed: Error: simulated"):
        gateway_charts.install(client.ApiClient(), done, 300)
    assert [r.name for r in done.releases] == ["eg"] and done.crds_made


def test_uninstall_removes_only_what_was_made_newest_first(standins: Path) -> None:
    done = _record("istio", "istio")
    done.releases = list(gateway_charts.plan("istio", "istio").releases)
    assert gateway_charts.uninstall(client.ApiClient(), done, 120) == []
    assert [c["args"][:2] for c in standin_tools.calls(standins)] == [
        ["uninstall", "istiod"],
        ["uninstall", "istio-base"],
    ]
    _assert_every_cluster_call_names_the_context(standin_tools.calls(standins))
    nothing = _record()
    assert gateway_charts.uninstall(client.ApiClient(), nothing, 120) == []
    assert len(standin_tools.calls(standins)) == 2


def test_a_failed_uninstall_is_reported_not_raised(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "uninstall")
    done = _record()
    done.releases = list(gateway_charts.plan("envoy-gateway", "eg").releases)
    assert gateway_charts.uninstall(client.ApiClient(), done, 120) == [
        "helm uninstall eg: Error: simulated uninstall failure"
    ]


def test_istios_hostname_address_is_used_when_there_is_no_ip() -> None:
    hostname = {"type": "Hostname", "value": "svc-gateway-istio.ns.svc.cluster.local"}
    assert address({"status": {"addresses": [hostname]}}) == hostname["value"]
    ip = {"type": "IPAddress", "value": "10.96.0.7"}
    assert address({"status": {"addresses": [hostname, ip]}}) == "10.96.0.7"
    assert address({"status": {}}) == ""


def test_the_crds_come_from_the_same_pin_as_on_the_local_provider() -> None:
    assert gateway_charts.begin("istio", "istio", TARGET).crd_version == pins.GATEWAY_API == "v1.4.1"
