"""Install the KubeRay operator without its chart, the way the chart does by default, and remove it.

The hand-made imitation of the chart: `manifests/kuberay/operator.yaml` rendered for an
`OperatorSpec` (`operator_spec`), with the CRDs and the ClusterRole and leader-election Role
taken from `ray-operator/config/crd/bases/*.yaml` and `config/rbac/` (the files its
kustomization.yaml lists) of the Go module the operator binary is built from, so that objects and
binary always match.

`install_local` is for clusters without a registry (the local provider): the operator image is
built here from the binary `gobuild` made and imported into the node; `operator_facts.wait_ready`
waits for it. The Helm chart itself (from a checkout or from the KubeRay Helm repository) is
installed by `kuberay_chart`.
"""

from __future__ import annotations

import json
import string
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from conformance import resources
from conformance.build import gobuild, image_cache, pins, small_images
from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError
from conformance.install.operator_facts import operator_selector
from conformance.install.operator_spec import (
    LEADER_ELECTION_ROLE,
    LEASE_NAME,
    NAME,
    OPERATOR_MODULE,
    RAY_KINDS,
    OperatorSpec,
    chart_args,
)
from conformance.kube.apply import MANAGED_BY, api_reason, apply_crds, apply_object, ensure_namespace
from conformance.kube.wait import WaitTimeout, wait_gone
from conformance.progress import progress

MANIFEST = resources.path("manifests") / "kuberay" / "operator.yaml"


class ImageLoader(Protocol):
    """What `install_local` needs of a provider: a way to put a locally built image on the node."""

    def load_image(self, archive: image_cache.ImageArchive) -> None: ...


# --- rendering (pure) -----------------------------------------------------------------------


def render_operator(
    spec: OperatorSpec, image: str, image_build: str = "", manifest: Path = MANIFEST
) -> list[dict]:
    """The ServiceAccount, bindings, Service and Deployment of manifests/kuberay/operator.yaml."""
    if not manifest.is_file():
        raise ProvisioningError(
            f"the operator template {manifest} is missing", "run from a checkout of the repo"
        )
    text = string.Template(manifest.read_text()).substitute(
        NAMESPACE=spec.namespace,
        IMAGE=image,
        VERSION=spec.version,
        MANAGED_BY=MANAGED_BY,
        ARGS=json.dumps(chart_args(spec)),  # a JSON list is a YAML flow sequence
    )
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    for doc in docs:
        if doc["kind"] == "Deployment" and spec.env:
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["env"] = [{"name": name, "value": value} for name, value in spec.env.items()]
    if image_build:
        # A rebuilt binary keeps its tag; a changed annotation makes the Deployment roll anyway.
        for doc in docs:
            if doc["kind"] == "Deployment":
                template_meta = doc["spec"]["template"]["metadata"]
                template_meta.setdefault("annotations", {})["kuberay-conformance.io/image-build"] = (
                    image_build
                )
    return docs


def _labelled(doc: dict, spec: OperatorSpec) -> dict:
    labels = doc.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/version": spec.version})
    return doc


def rbac_roles(rbac_dir: Path, spec: OperatorSpec) -> list[dict]:
    """The ClusterRole and Role of the module's config/rbac, as its kustomization.yaml lists them.

    Bindings and the ServiceAccount come from our template, bound to our namespace.
    """
    kustomization = yaml.safe_load((rbac_dir / "kustomization.yaml").read_text())
    roles: list[dict] = []
    for resource in kustomization.get("resources", []):
        for doc in yaml.safe_load_all((rbac_dir / resource).read_text()):
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            if doc["kind"] == "Role":
                doc["metadata"]["namespace"] = spec.namespace
            elif doc["metadata"]["name"] == NAME and spec.feature_gates.get("KubernetesWAS"):
                # The chart adds this rule when the gate is on (role.consistentRules in _helpers.tpl).
                doc["rules"].append(
                    {
                        "apiGroups": ["scheduling.k8s.io"],
                        "resources": ["podgroups", "workloads"],
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    }
                )
            roles.append(_labelled(doc, spec))
    return roles


def crd_documents(crd_dir: Path) -> list[dict]:
    docs = [
        doc for path in sorted(crd_dir.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc
    ]
    return [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]


# --- where the binary, the image and the module files come from --------------------------------


def operator_tool(version: str) -> pins.GoTool:
    """The build recipe of `version`: the pinned one, with another version where asked."""
    tool = pins.TOOLS["kuberay"]
    return tool if tool.version == version else replace(tool, version=version)


def operator_image(version: str) -> image_cache.ImageArchive:
    """The operator image for `version`, built from the Go build cache (built first if missing)."""
    cache = cache_dir()
    bin_dir = gobuild.ensure_built(operator_tool(version), cache)
    return small_images.binary_image(cache, NAME, version, bin_dir / "kuberay-operator", ["/manager"])


def module_dir(version: str) -> Path:
    """Where the Go module cache holds the operator module's files (CRDs, RBAC) for `version`."""
    return gobuild.module_dir(OPERATOR_MODULE, version)


# --- applying ----------------------------------------------------------------------------------


def install_local(provider: ImageLoader, api_client: client.ApiClient, spec: OperatorSpec) -> None:
    """Install the operator from an image built on this machine; `wait_ready` waits for it.

    Idempotent: a second call re-applies the same objects, and a rebuilt binary rolls the pod.
    """
    archive = operator_image(spec.version)
    provider.load_image(archive)
    module = module_dir(spec.version)
    ensure_namespace(client.CoreV1Api(api_client), spec.namespace)
    apply_crds(api_client, crd_documents(module / "config" / "crd" / "bases"))
    dynamic = DynamicClient(api_client)
    objects = rbac_roles(module / "config" / "rbac", spec)
    objects += render_operator(spec, archive.ref, image_build=archive.path.parent.name)
    with progress(f"applying the KubeRay {spec.version} operator to {spec.namespace}") as line:
        for doc in objects:
            line.update(f"{doc['kind']}/{doc['metadata']['name']}")
            apply_object(dynamic, doc)


# --- removing ----------------------------------------------------------------------------------


def _delete(call: Any, *args: str, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        if exc.status != 404:
            raise ProvisioningError(
                f"deleting {args[0]} failed: {api_reason(exc)}", "check the kubeconfig user's RBAC and retry"
            ) from exc


def uninstall_local(
    api_client: client.ApiClient, spec: OperatorSpec, *, remove_crds: bool = False, timeout: float = 120.0
) -> None:
    """Remove what `install_local` made; the CRDs only when asked (that deletes every Ray object)."""
    core = client.CoreV1Api(api_client)
    ns = spec.namespace
    remove_operator_objects(api_client, ns, timeout)
    if remove_crds:
        ext = client.ApiextensionsV1Api(api_client)
        for plural in RAY_KINDS:
            _delete(ext.delete_custom_resource_definition, f"{plural}.ray.io")
    try:
        labels = core.read_namespace(ns).metadata.labels or {}
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    if labels.get("app.kubernetes.io/managed-by") == MANAGED_BY:
        _delete(core.delete_namespace, ns)
        # A namespace still terminating refuses new objects: the next install must find it gone.
        try:
            wait_gone(
                core.list_namespace,
                what=f"namespace {ns}",
                timeout=timeout,
                field_selector=f"metadata.name={ns}",
            )
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"namespace {ns} was not removed: {exc.last_seen}", "see its finalizers"
            ) from exc


def remove_operator_objects(api_client: client.ApiClient, ns: str, timeout: float = 120.0) -> None:
    """Delete the operator's Deployment (waiting for its pods), Service, RBAC, lease and
    ServiceAccount by their names, which the hand-made objects and a kustomize deploy share;
    the CRDs, the namespace and the Ray objects stay."""
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    selector = operator_selector(api_client, ns)
    _delete(apps.delete_namespaced_deployment, NAME, ns, propagation_policy="Foreground")
    try:
        wait_gone(
            core.list_namespaced_pod,
            what="the operator pods",
            timeout=timeout,
            namespace=ns,
            label_selector=selector,
        )
    except WaitTimeout as exc:
        raise ProvisioningError(
            f"operator pods in {ns} were not removed: {exc.last_seen}", "see the node"
        ) from exc
    _delete(core.delete_namespaced_service, NAME, ns)
    _delete(rbac.delete_namespaced_role_binding, LEADER_ELECTION_ROLE, ns)
    _delete(rbac.delete_namespaced_role, LEADER_ELECTION_ROLE, ns)
    # A stopped operator keeps its lease until it expires; the next install should not wait for that.
    _delete(client.CoordinationV1Api(api_client).delete_namespaced_lease, LEASE_NAME, ns)
    _delete(core.delete_namespaced_service_account, NAME, ns)
    _delete(rbac.delete_cluster_role_binding, NAME)
    _delete(rbac.delete_cluster_role, NAME)
