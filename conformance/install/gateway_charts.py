"""Gateway API implementations installed from their Helm charts: `gateway.install: istio` or
`envoy-gateway`, for clusters that pull public images (kind, eks, existing). Never on the local
provider: both data planes are Envoy, a C++ proxy that cannot be built on that machine.

The order is the one KubeRay's own CI uses for its incremental-upgrade e2e tests: the Gateway API
CRDs (standard channel) first, then the implementation, then the GatewayClass, then a wait until
the class is Accepted. Facts, checked on 2026-11-29:

- KubeRay v1.7.0, `.buildkite/test-e2e.yml` ("Test RayService Incremental Upgrade E2E"): kind;
  `kubectl apply --server-side` of gateway-api v1.4.1 `standard-install.yaml`; Istio 1.28.3 via
  `istioctl install --set profile=minimal`; then `ray-operator/config/samples/gateway-api/
  istio-class.yaml` (GatewayClass `istio`, controllerName `istio.io/gateway-controller`).
  `ray-operator/test/e2eincrementalupgrade/support.go` annotates each Gateway
  `networking.istio.io/service-type: ClusterIP`, because on kind a LoadBalancer Service never gets
  an address and the Gateway never becomes Programmed. KubeRay v1.7.0's go.mod requires
  sigs.k8s.io/gateway-api v1.4.1, the version pins.GATEWAY_API names.
- Istio 1.28.3 (github.com/istio/istio, tag 1.28.3): the Helm charts `base` and `istiod` from
  https://istio-release.storage.googleapis.com/charts install what the minimal profile does; the
  istiod chart's `gatewayClasses` value (manifests/charts/istio-control/istio-discovery/values.yaml)
  writes a ConfigMap labelled `gateway.istio.io/defaults-for-class`, which sets the Service of every
  Gateway of that class: `{<class>: {service: {spec: {type: ClusterIP}}}}` does for all Gateways,
  KubeRay's included, what KubeRay's CI does per Gateway. istiod creates the GatewayClass `istio`
  itself; Gateways of the class report their Service's hostname as a Hostname address.
- Envoy Gateway v1.7.5 (github.com/envoyproxy/gateway, tag v1.7.5; the v1.7 line compiles in
  gateway-api v1.4.1 and supports Kubernetes 1.32-1.35, per its compatibility matrix): the chart
  oci://docker.io/envoyproxy/gateway-helm bundles the experimental-channel Gateway API CRDs in its
  crds/, so its own CRDs come from oci://docker.io/envoyproxy/gateway-crds-helm
  (`crds.envoyGateway.enabled=true`, `crds.gatewayAPI.enabled=false`, rendered by `helm template`
  and applied server-side, as its install guide says) and the chart is installed with
  `--skip-crds`. It makes no GatewayClass: ours names controllerName
  `gateway.envoyproxy.io/gatewayclass-controller` (api/v1alpha1/envoygateway_types.go) and, through
  parametersRef, an EnvoyProxy whose `provider.kubernetes.envoyService.type` is ClusterIP; with a
  ClusterIP Service the Gateway reports the cluster IP as its address.

What the harness made (a Helm release that did not exist, a GatewayClass it created, CRDs that
were absent) is recorded; `uninstall` removes exactly that, newest first. A class that already
exists with the expected controller and is Accepted is used as it is, and nothing is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from conformance.errors import ProvisioningError, UsageError
from conformance.kube import apply
from conformance.kube.gateway import condition_true
from conformance.kube.target import KubeTarget
from conformance.progress import progress

GROUP = "gateway.networking.k8s.io"
ISTIO = "istio"
ENVOY_GATEWAY = "envoy-gateway"
IMPLEMENTATIONS = (ISTIO, ENVOY_GATEWAY)

ISTIO_VERSION = "1.28.3"  # KubeRay v1.7.0 .buildkite/test-e2e.yml
ISTIO_REPO = "https://istio-release.storage.googleapis.com/charts"
ISTIO_NAMESPACE = "istio-system"  # where the charts' defaults expect istiod
ISTIO_CONTROLLER = "istio.io/gateway-controller"

ENVOY_GATEWAY_VERSION = "v1.7.5"  # the newest v1.7 patch; v1.7 compiles in gateway-api v1.4.1
ENVOY_GATEWAY_CHART = "oci://docker.io/envoyproxy/gateway-helm"
ENVOY_GATEWAY_CRDS_CHART = "oci://docker.io/envoyproxy/gateway-crds-helm"
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
ENVOY_GATEWAY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
ENVOY_PROXY_NAME = "kuberay-conformance"  # the EnvoyProxy our GatewayClass points at

GATEWAY_API_CRD = f"gateways.{GROUP}"


@dataclass(frozen=True)
class Release:
    """One `helm upgrade --install`."""

    name: str
    chart: str
    version: str
    namespace: str
    repo: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    skip_crds: bool = False


@dataclass(frozen=True)
class Plan:
    """Everything one implementation needs, in install order (pure: no cluster)."""

    implementation: str
    version: str
    namespace: str
    controller: str
    releases: tuple[Release, ...]
    # Rendered with `helm template` and applied as CRDs before the releases (Envoy Gateway's own).
    crd_chart: Release | None
    # Applied (server-side) before the GatewayClass: the EnvoyProxy its parametersRef names.
    extra_docs: tuple[dict[str, Any], ...]
    gateway_class: dict[str, Any]


def plan(implementation: str, class_name: str) -> Plan:
    if implementation == ISTIO:
        # Every Gateway of the class gets a ClusterIP Service (see the module's docstring).
        classes = {class_name: {"service": {"spec": {"type": "ClusterIP"}}}}
        return Plan(
            implementation=ISTIO,
            version=ISTIO_VERSION,
            namespace=ISTIO_NAMESPACE,
            controller=ISTIO_CONTROLLER,
            releases=(
                Release("istio-base", "base", ISTIO_VERSION, ISTIO_NAMESPACE, repo=ISTIO_REPO),
                Release(
                    "istiod",
                    "istiod",
                    ISTIO_VERSION,
                    ISTIO_NAMESPACE,
                    repo=ISTIO_REPO,
                    values={"gatewayClasses": classes},
                ),
            ),
            crd_chart=None,
            extra_docs=(),
            gateway_class=gateway_class(class_name, ISTIO_CONTROLLER),
        )
    if implementation == ENVOY_GATEWAY:
        proxy = envoy_proxy(ENVOY_PROXY_NAME, ENVOY_GATEWAY_NAMESPACE)
        ref = {
            "group": "gateway.envoyproxy.io",
            "kind": "EnvoyProxy",
            "name": ENVOY_PROXY_NAME,
            "namespace": ENVOY_GATEWAY_NAMESPACE,
        }
        return Plan(
            implementation=ENVOY_GATEWAY,
            version=ENVOY_GATEWAY_VERSION,
            namespace=ENVOY_GATEWAY_NAMESPACE,
            controller=ENVOY_GATEWAY_CONTROLLER,
            releases=(
                Release(
                    "eg",
                    ENVOY_GATEWAY_CHART,
                    ENVOY_GATEWAY_VERSION,
                    ENVOY_GATEWAY_NAMESPACE,
                    skip_crds=True,
                ),
            ),
            crd_chart=Release(
                "eg-crds",
                ENVOY_GATEWAY_CRDS_CHART,
                ENVOY_GATEWAY_VERSION,
                ENVOY_GATEWAY_NAMESPACE,
                values={"crds": {"gatewayAPI": {"enabled": False}, "envoyGateway": {"enabled": True}}},
            ),
            extra_docs=(proxy,),
            gateway_class=gateway_class(class_name, ENVOY_GATEWAY_CONTROLLER, parameters_ref=ref),
        )
    raise UsageError(
        f"gateway.install {implementation!r} is no Helm-installed implementation",
        f"use one of {', '.join(IMPLEMENTATIONS)}",
    )


def gateway_class(name: str, controller: str, parameters_ref: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": controller}
    if parameters_ref:
        spec["parametersRef"] = parameters_ref
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": apply.MANAGED_BY}},
        "spec": spec,
    }


def envoy_proxy(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyProxy",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": apply.MANAGED_BY},
        },
        "spec": {"provider": {"type": "Kubernetes", "kubernetes": {"envoyService": {"type": "ClusterIP"}}}},
    }


# --- helm argv (pure) ------------------------------------------------------------------------


def _chart_args(release: Release) -> list[str]:
    args = [release.chart]
    if release.repo:
        args += ["--repo", release.repo]
    return [*args, "--version", release.version]


def upgrade_argv(release: Release, target: KubeTarget, values_file: Path, timeout_s: float) -> list[str]:
    argv = [
        "helm", "upgrade", "--install", release.name, *_chart_args(release),
        "--namespace", release.namespace, "--create-namespace",
        *target.helm_args(), "--values", str(values_file),
        "--wait", "--timeout", f"{int(timeout_s)}s",
    ]  # fmt: skip
    if release.skip_crds:
        argv.append("--skip-crds")
    return argv


def template_argv(release: Release, values_file: Path) -> list[str]:
    return [
        "helm", "template", release.name, *_chart_args(release),
        "--namespace", release.namespace, "--values", str(values_file),
    ]  # fmt: skip


def status_argv(release: Release, target: KubeTarget) -> list[str]:
    return ["helm", "status", release.name, "--namespace", release.namespace, *target.helm_args()]


def uninstall_argv(release: Release, target: KubeTarget, timeout_s: float) -> list[str]:
    return [
        "helm", "uninstall", release.name, "--namespace", release.namespace,
        *target.helm_args(), "--wait", "--timeout", f"{int(timeout_s)}s",
    ]  # fmt: skip


# --- refusals before anything is provisioned --------------------------------------------------


def check_usable(implementation: str, provider: str, profile: str) -> None:
    """A one-line UsageError for combinations that cannot work; creates nothing."""
    if implementation not in IMPLEMENTATIONS:
        return
    if provider == "local":
        raise UsageError(
            f"profile {profile} installs {implementation}, whose Envoy data plane cannot be built "
            "on this machine and whose images the local provider cannot pull",
            "use gateway.install: local-build (Traefik, built here) with the local provider",
        )
    missing = [tool for tool in ("helm", "go") if shutil.which(tool) is None]
    if missing:
        raise UsageError(
            f"profile {profile} installs {implementation} with Helm and the Gateway API CRDs from the "
            f"Go module proxy, but {' and '.join(missing)} is not on PATH",
            "install Helm 3 and Go, or set gateway.install: existing and name the cluster's GatewayClass",
        )


# --- install and uninstall -------------------------------------------------------------------


@dataclass
class Installed:
    """What `install` found and made: the facts for the report and the record for `uninstall`."""

    implementation: str
    version: str
    class_name: str
    crd_version: str
    target: KubeTarget  # the cluster's kubeconfig and context, as the Python client uses them
    releases: list[Release] = field(default_factory=list)  # made by this run, in install order
    class_made: bool = False
    docs_made: list[dict[str, Any]] = field(default_factory=list)
    crds_made: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self) -> str:
        made = "installed by this run" if self.releases else "already installed"
        return (
            f"Gateway API: CRDs {self.crd_version} (standard channel), {self.implementation} "
            f"{self.version} from its Helm chart ({made}), GatewayClass {self.class_name}"
        )


def begin(implementation: str, class_name: str, target: KubeTarget) -> Installed:
    """The empty record `install` fills as it goes, so a failed install can still be undone."""
    from conformance.build import pins  # noqa: PLC0415

    return Installed(
        implementation, plan(implementation, class_name).version, class_name, pins.GATEWAY_API, target
    )


def install(api_client: client.ApiClient, done: Installed, timeout: float) -> Installed:
    from conformance.install import gateway  # noqa: PLC0415 - the CRD reader and the waits

    implementation, class_name, target = done.implementation, done.class_name, done.target
    steps = plan(implementation, class_name)
    custom = client.CustomObjectsApi(api_client)
    existing = _read_class(custom, class_name)
    if existing is not None and _served(existing, steps.controller):
        done.notes.append(
            f"GatewayClass {class_name} was already served by {steps.controller}; nothing installed"
        )
        return done
    ext = client.ApiextensionsV1Api(api_client)
    if _crd_exists(ext, GATEWAY_API_CRD):
        # Never replace the cluster's own CRDs (a newer version, or the experimental channel).
        done.crd_version = "(the cluster's own)"
    else:
        crds = gateway.crd_documents()
        done.crds_made += [crd["metadata"]["name"] for crd in crds]
        apply.apply_crds(api_client, crds, what="Gateway API")
    if steps.crd_chart is not None:
        crds = [doc for doc in render(steps.crd_chart) if doc.get("kind") == "CustomResourceDefinition"]
        done.crds_made += [
            crd["metadata"]["name"] for crd in crds if not _crd_exists(ext, crd["metadata"]["name"])
        ]
        apply.apply_crds(api_client, crds, what=steps.implementation)
    for release in steps.releases:
        if not release_exists(release, target):
            done.releases.append(release)
        helm_upgrade(release, target, timeout)
    dynamic = DynamicClient(api_client)
    for doc in steps.extra_docs:
        done.docs_made.append(doc)
        apply.apply_object(dynamic, doc)
    if existing is None:
        done.class_made = _create_class(custom, steps.gateway_class)
    gateway.wait_class_accepted(
        api_client, class_name, timeout, f"the {implementation} pods in {steps.namespace}"
    )
    return done


def uninstall(api_client: client.ApiClient, done: Installed, timeout: float) -> list[str]:
    """Remove what `install` made, newest first; returns what could not be removed."""
    problems: list[str] = []
    custom = client.CustomObjectsApi(api_client)
    if done.class_made:
        _try(problems, f"GatewayClass {done.class_name}", custom.delete_cluster_custom_object,
             GROUP, "v1", "gatewayclasses", done.class_name)  # fmt: skip
    for doc in reversed(done.docs_made):
        group, version = doc["apiVersion"].split("/")
        meta = doc["metadata"]
        _try(problems, f"{doc['kind']} {meta['name']}", custom.delete_namespaced_custom_object,
             group, version, meta["namespace"], "envoyproxies", meta["name"])  # fmt: skip
    for release in reversed(done.releases):
        result = _helm(uninstall_argv(release, done.target, timeout))
        if result.returncode != 0:
            problems.append(f"helm uninstall {release.name}: {_last_line(result)}")
    ext = client.ApiextensionsV1Api(api_client)
    for name in reversed(done.crds_made):
        _try(problems, f"CRD {name}", ext.delete_custom_resource_definition, name)
    return problems


def _try(problems: list[str], what: str, call: Any, *args: str) -> None:
    try:
        call(*args)
    except ApiException as exc:
        if exc.status != 404:
            problems.append(f"deleting {what}: {exc.status} {exc.reason}")


def render(release: Release) -> list[dict[str, Any]]:
    """`helm template` of `release`, parsed (Envoy Gateway's CRDs)."""
    with _values_file(release) as values:
        result = _helm(template_argv(release, values))
    if result.returncode != 0:
        raise ProvisioningError(
            f"helm template of {release.chart} {release.version} failed: {_last_line(result)}",
            "check that the chart's registry is reachable",
        )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def release_exists(release: Release, target: KubeTarget) -> bool:
    return _helm(status_argv(release, target)).returncode == 0


def helm_upgrade(release: Release, target: KubeTarget, timeout: float) -> None:
    with (
        _values_file(release) as values,
        progress(f"helm: {release.name} {release.version} in {release.namespace}"),
    ):
        result = _helm(upgrade_argv(release, target, values, timeout))
    if result.returncode != 0:
        raise ProvisioningError(
            f"helm install of {release.name} {release.version} failed: {_last_line(result)}",
            f"see `helm status {release.name} -n {release.namespace}` and the pods in {release.namespace}",
        )


@contextmanager
def _values_file(release: Release) -> Iterator[Path]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix=f"{release.name}-values-") as values:
        json.dump(release.values, values)
        values.flush()
        yield Path(values.name)


def _helm(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise ProvisioningError("helm is not installed", "install Helm 3 and put `helm` on PATH") from exc


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr.strip().splitlines() or ["no output"])[-1]


def _read_class(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    try:
        return custom.get_cluster_custom_object(GROUP, "v1", "gatewayclasses", name)
    except ApiException as exc:
        if exc.status == 404:
            return None  # no such class, or no Gateway API CRDs yet
        raise


def _served(gc: dict[str, Any], controller: str) -> bool:
    return gc.get("spec", {}).get("controllerName") == controller and condition_true(gc, "Accepted")


def _create_class(custom: client.CustomObjectsApi, doc: dict[str, Any]) -> bool:
    """Create the class unless it appeared meanwhile (istiod makes `istio` itself); True if we made it."""
    try:
        custom.create_cluster_custom_object(GROUP, "v1", "gatewayclasses", doc)
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise ProvisioningError(
            f"creating GatewayClass {doc['metadata']['name']} failed: {exc.status} {exc.reason}",
            "check the Gateway API CRDs",
        ) from exc
    return True


def _crd_exists(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
