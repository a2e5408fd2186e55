"""Applying objects the harness installs: server-side apply, namespaces, CRDs waited until Established.

Generic over what is applied (KubeRay, the Gateway API, add-ons): the installers in install/ use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError

from conformance.errors import ProvisioningError
from conformance.kube.wait import WaitTimeout, wait_for
from conformance.progress import progress

MANAGED_BY = "kuberay-conformance"  # the app.kubernetes.io/managed-by label of what the harness made
FIELD_MANAGER = "kuberay-conformance"


def apply_object(dynamic: DynamicClient, doc: dict) -> None:
    """Server-side apply: idempotent, and the CRDs are too big for client-side apply's annotation."""
    kind, name = doc["kind"], doc["metadata"]["name"]
    try:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=kind)
        dynamic.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    except (ApiException, DynamicApiError) as exc:
        raise ProvisioningError(
            f"server-side apply of {kind}/{name} failed: {api_reason(exc)}",
            "an operator installed another way (other selector labels) must be removed first",
        ) from exc


def api_reason(exc: Exception) -> str:
    body = getattr(exc, "body", None) or getattr(exc, "summary", lambda: "")()
    try:
        return json.loads(body).get("message", str(body))[:300]
    except (TypeError, ValueError):
        return str(body or exc)[:300]


def ensure_namespace(core: client.CoreV1Api, namespace: str) -> None:
    # Created, never applied: a namespace that already exists (default, a team's) is left as it is,
    # and only one carrying our label is removed when the harness uninstalls (install/kuberay.py).
    body = {"metadata": {"name": namespace, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}}}
    try:
        core.create_namespace(body)
    except ApiException as exc:
        if exc.status != 409:
            raise ProvisioningError(
                f"creating namespace {namespace} failed: {api_reason(exc)}",
                "check that the kubeconfig's user may create namespaces, or create it beforehand",
            ) from exc


def apply_crds(
    api_client: client.ApiClient, crds: Iterable[dict], timeout: float = 60.0, what: str = "KubeRay"
) -> None:
    """Apply the CRDs and wait until each is Established (served by the API server)."""
    dynamic = DynamicClient(api_client)
    crds = list(crds)
    with progress(f"applying {len(crds)} {what} CRDs") as line:
        for crd in crds:
            line.update(crd["metadata"]["name"])
            apply_object(dynamic, crd)
    ext = client.ApiextensionsV1Api(api_client)
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            wait_for(
                ext.list_custom_resource_definition,
                _crd_established,
                what=f"CRD {name} established",
                timeout=timeout,
                describe=_describe_crd,
                field_selector=f"metadata.name={name}",
            )
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"CRD {name} was not established: {exc.last_seen}", "see kube-apiserver logs"
            ) from exc


def _crd_established(crd: Any) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def _describe_crd(crd: Any) -> str:
    states = [f"{c.type}={c.status}" for c in (crd.status.conditions or [])]
    return ", ".join(states) or "no conditions yet"
