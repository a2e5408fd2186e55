"""Install the Gateway API (CRDs, standard channel) and Traefik as its implementation.

Used on clusters without a registry (the local provider): the CRDs come from the
`sigs.k8s.io/gateway-api` Go module at the version KubeRay's go.mod requires, and Traefik is
built from its Go module and run as one Deployment that is both the controller and the data
plane. Clusters that pull public images install Istio or Envoy Gateway from their Helm charts
instead (`gateway_charts.py`), or name a GatewayClass that already exists (profile
`gateway.install: existing`), and nothing is installed.

Idempotent: a second call re-applies the same objects; a rebuilt binary rolls the pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from conformance.build import gobuild, image_cache, pins, small_images
from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError
from conformance.install import kuberay
from conformance.kube import apply, rollout
from conformance.kube.gateway import GROUP, condition_true, describe_conditions
from conformance.kube.manifests import render_all
from conformance.kube.wait import WaitTimeout, wait_for
from conformance.progress import progress

GATEWAY_API_MODULE = "sigs.k8s.io/gateway-api"
NAMESPACE = "kuberay-conformance-gateway"
TEMPLATE = "gateway/traefik.yaml"
TRAEFIK_CONTROLLER = "traefik.io/gateway-controller"  # controllerName in Traefik's Gateway provider


@dataclass(frozen=True)
class GatewayFacts:
    """What was installed, for the run's environment notes."""

    implementation: str
    version: str
    crd_version: str
    class_name: str
    address: str


def crd_documents(version: str = pins.GATEWAY_API) -> list[dict[str, Any]]:
    """The standard-channel CRDs shipped in the gateway-api module at `version`."""
    crd_dir = gobuild.module_dir(GATEWAY_API_MODULE, version) / "config" / "crd" / "standard"
    docs = [doc for path in sorted(crd_dir.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    crds = [doc for doc in docs if doc and doc.get("kind") == "CustomResourceDefinition"]
    if not crds:
        raise ProvisioningError(
            f"no CRDs in {crd_dir}", f"check that {GATEWAY_API_MODULE}@{version} ships config/crd/standard"
        )
    return crds


def traefik_image() -> image_cache.ImageArchive:
    tool = pins.TOOLS["traefik"]
    bin_dir = gobuild.ensure_built(tool, cache_dir())
    return small_images.binary_image(cache_dir(), "traefik", tool.version, bin_dir / "traefik", ["/traefik"])


def render_traefik(class_name: str, image: str, status_ip: str, image_build: str) -> list[dict[str, Any]]:
    return render_all(
        TEMPLATE,
        namespace=NAMESPACE,
        image=image,
        version=pins.TRAEFIK,
        managed_by=apply.MANAGED_BY,
        status_ip=status_ip,
        class_name=class_name,
        controller_name=TRAEFIK_CONTROLLER,
        image_build=image_build,
    )


def install_local(
    provider: kuberay.ImageLoader, api_client: client.ApiClient, class_name: str, timeout: float
) -> GatewayFacts:
    """CRDs, then Traefik; returns once the Deployment is available and the class Accepted."""
    apply.apply_crds(api_client, crd_documents(), what="Gateway API")
    archive = traefik_image()
    provider.load_image(archive)
    core = client.CoreV1Api(api_client)
    apply.ensure_namespace(core, NAMESPACE)
    dynamic = DynamicClient(api_client)
    build = archive.path.parent.name
    # The Service goes first: its ClusterIP is the address Traefik publishes on every Gateway.
    service = _only(render_traefik(class_name, archive.ref, "0.0.0.0", build), "Service")
    apply.apply_object(dynamic, service)
    status_ip = core.read_namespaced_service(service["metadata"]["name"], NAMESPACE).spec.cluster_ip
    with progress(f"applying Traefik {pins.TRAEFIK} to {NAMESPACE}") as line:
        for doc in render_traefik(class_name, archive.ref, status_ip, build):
            line.update(f"{doc['kind']}/{doc['metadata']['name']}")
            apply.apply_object(dynamic, doc)
    wait_ready(api_client, class_name, timeout)
    return GatewayFacts("traefik", pins.TRAEFIK, pins.GATEWAY_API, class_name, status_ip)


def _only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(doc for doc in docs if doc["kind"] == kind)


def wait_ready(api_client: client.ApiClient, class_name: str, timeout: float) -> None:
    rollout.wait_rolled_out(api_client, NAMESPACE, "traefik", timeout)
    wait_class_accepted(
        api_client, class_name, timeout, f"the logs of deployment/traefik in namespace {NAMESPACE}"
    )


def wait_class_accepted(api_client: client.ApiClient, class_name: str, timeout: float, where: str) -> None:
    """Wait until GatewayClass `class_name` is Accepted; `where` says what to read if it never is."""
    custom = client.CustomObjectsApi(api_client)
    try:
        wait_for(
            lambda **kw: custom.list_cluster_custom_object(GROUP, "v1", "gatewayclasses", **kw),
            lambda gc: condition_true(gc, "Accepted"),
            what=f"GatewayClass {class_name} Accepted",
            timeout=timeout,
            describe=describe_conditions,
            field_selector=f"metadata.name={class_name}",
        )
    except WaitTimeout as exc:
        raise ProvisioningError(
            f"the Gateway implementation did not become ready: {exc.last_seen}", f"see {where}"
        ) from exc


def note(facts: GatewayFacts) -> str:
    return (
        f"Gateway API: CRDs {facts.crd_version} (standard channel) and {facts.implementation} "
        f"{facts.version} built on this machine, GatewayClass {facts.class_name}, address {facts.address}"
    )
