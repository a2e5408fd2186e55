"""Deployments rolled out: available with every pod of the current spec, read from watches."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from conformance.errors import ProvisioningError
from conformance.kube.wait import WaitTimeout, wait_for


def deployment_available(dep: Any) -> bool:
    status, wanted = dep.status, dep.spec.replicas or 0
    rolled_out = (status.observed_generation or 0) >= (dep.metadata.generation or 0)
    available = any(c.type == "Available" and c.status == "True" for c in (status.conditions or []))
    return (
        rolled_out
        and available
        and (status.updated_replicas or 0) == wanted
        and (status.available_replicas or 0) >= wanted
    )


def describe_deployment(dep: Any) -> str:
    status = dep.status
    return f"{status.ready_replicas or 0}/{dep.spec.replicas} ready, {status.updated_replicas or 0} updated"


def wait_rolled_out(api_client: client.ApiClient, namespace: str, name: str, timeout: float) -> None:
    """Wait until Deployment `name` is available with every pod of its current spec (an add-on
    the harness installs: Traefik, the local-path provisioner); ProvisioningError if not."""
    try:
        wait_for(
            client.AppsV1Api(api_client).list_namespaced_deployment,
            _rolled_out,
            what=f"{name} available",
            timeout=timeout,
            describe=describe_deployment,
            namespace=namespace,
            field_selector=f"metadata.name={name}",
        )
    except WaitTimeout as exc:
        raise ProvisioningError(
            f"{name} did not become ready: {exc.last_seen}",
            f"see the logs of deployment/{name} in namespace {namespace}",
        ) from exc


def _rolled_out(dep: Any) -> bool:
    # Available alone holds mid-rollout (the old pod still serves): also no pods of the old spec.
    wanted = dep.spec.replicas or 0
    return deployment_available(dep) and (dep.status.replicas or 0) == wanted
