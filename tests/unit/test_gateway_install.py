"""Building Traefik from its module and rendering its install: the parts that need no cluster."""

from pathlib import Path

import pytest
import yaml

from conformance import profiles
from conformance.build import pins
from conformance.build.gobuild import (
    build_module,
    carried_excludes,
    recipe_key,
    write_local_modules,
)
from conformance.errors import UsageError
from conformance.install.gateway import TRAEFIK_CONTROLLER, render_traefik
from conformance.kube.gateway import condition_true

TRAEFIK_LIKE_GOMOD = """module github.com/traefik/traefik/v3

go 1.25.0

replace github.com/traefik/traefik/dynamic/ext => ./pkg/config/dynamic/ext

replace (
	github.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
)

// ambiguous import
exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible

exclude (
	github.com/a/b v1.0.0 // why
)
"""


def test_excludes_are_carried_from_both_forms() -> None:
    assert carried_excludes(TRAEFIK_LIKE_GOMOD) == [
        "exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible",
        "exclude github.com/a/b v1.0.0",
    ]


def test_a_local_module_is_written_and_replaced(tmp_path: Path) -> None:
    tool = pins.GoTool(
        name="t",
        module="example.com/t",
        version="v1.0.0",
        packages=("example.com/t",),
        go_directive="1.25.0",
        local_modules={
            "example.com/t/ext": {"go.mod": "module example.com/t/ext\n", "ext.go": "package ext\n"}
        },
    )
    gomod = build_module(tool, [], ["exclude example.com/x v1.0.0"])
    assert "replace example.com/t/ext => ./local/example.com_t_ext" in gomod
    assert gomod.rstrip().endswith("exclude example.com/x v1.0.0")
    write_local_modules(tool, tmp_path)
    assert (tmp_path / "local/example.com_t_ext/ext.go").read_text() == "package ext\n"


def test_tools_without_local_modules_keep_their_cache_keys() -> None:
    # Adding the field must not rebuild every cached tool: an empty one keys nothing.
    tool = pins.TOOLS["etcd"]
    assert recipe_key(tool) == recipe_key(pins.GoTool(**{**tool.__dict__, "local_modules": {}}))


def test_traefik_listens_where_kuberays_gateway_listener_points_and_publishes_the_service_ip() -> None:
    docs = render_traefik("traefik", "localhost/kuberay-conformance/traefik:v3", "10.215.0.80", "b1")
    kinds = [doc["kind"] for doc in docs]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "Deployment",
        "GatewayClass",
    ]
    deployment = docs[kinds.index("Deployment")]
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--entryPoints.web.address=:80" in args  # KubeRay's Gateway listener is http:80
    assert "--providers.kubernetesgateway.statusAddress.ip=10.215.0.80" in args
    assert {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"} in pod["securityContext"]["sysctls"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert docs[kinds.index("GatewayClass")]["spec"]["controllerName"] == TRAEFIK_CONTROLLER
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_a_condition_counts_only_for_the_current_generation() -> None:
    obj = {
        "metadata": {"generation": 2},
        "status": {"conditions": [{"type": "Programmed", "status": "True", "observedGeneration": 1}]},
    }
    assert not condition_true(obj, "Programmed")
    assert condition_true(obj, "Programmed", generation=False)
    obj["status"]["conditions"][0]["observedGeneration"] = 2
    assert condition_true(obj, "Programmed")
    assert not condition_true(obj, "Accepted")


def _profile_with_gateway(tmp_path: Path, gateway: dict) -> Path:
    data = yaml.safe_load((profiles.BUNDLED / "default.yaml").read_text())
    data["gateway"] = gateway
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_gateway_install_defaults_to_existing_and_is_checked(tmp_path: Path) -> None:
    assert profiles.load("default").gateway_install == "local-build"
    assert profiles.load(str(_profile_with_gateway(tmp_path, {"class_name": "istio"}))).gateway_install == (
        "existing"
    )
    with pytest.raises(UsageError, match=r"gateway\.install"):
        profiles.load(str(_profile_with_gateway(tmp_path, {"class_name": "x", "install": "helm"})))
