"""What runs, read back from the cluster: waiting until the operator is ready and holds its
lease (`wait_ready`), and the facts of the operator that runs (`OperatorFacts`,
`observed_operator`), whichever way it was installed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.errors import ProvisioningError
from conformance.install.operator_args import (
    effective_feature_gates,
    holder_pod,
    lease_is_held,
    parse_operator_args,
    served_versions,
    version_from_image,
)
from conformance.install.operator_spec import LEASE_NAME, NAME, POD_SELECTOR, RAY_KINDS, OperatorSpec
from conformance.kube.rollout import deployment_available, describe_deployment
from conformance.kube.wait import WaitTimeout, wait_for


class OperatorNotReady(ProvisioningError):
    """The operator's Deployment did not become available, or no pod of it took the lease.

    While the environment is prepared this is the environment's problem; where a check changes
    the operator on purpose (an upgrade), the check turns it into a failure of the version under test.
    """


def _operator_pods(core: client.CoreV1Api, namespace: str, selector: str, image: str = "") -> set[str]:
    """Current (not terminating) pods, of `image` when given."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return {
        pod.metadata.name
        for pod in pods
        if pod.metadata.deletion_timestamp is None and (not image or image in _images(pod))
    }


def _images(pod: Any) -> list[str]:
    return [c.image for c in pod.spec.containers]


def lease_held_by(lease: Any, pods: set[str]) -> bool:
    # After a restart the old pod's lease looks fresh until it expires: the holder must be a current pod.
    return _lease_held_now(lease) and holder_pod(lease.spec.holder_identity or "") in pods


def _lease_held_now(lease: Any) -> bool:
    spec = lease.spec
    return lease_is_held(
        spec.holder_identity or "", spec.renew_time, spec.lease_duration_seconds, datetime.now(UTC)
    )


def _pod_problems(core: client.CoreV1Api, namespace: str) -> str:
    """Why operator pods are not ready, from their container states (for the error's cause)."""
    problems = []
    selector = _deployment_selector(client.AppsV1Api(core.api_client), namespace)
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        for status in pod.status.container_statuses or []:
            waiting = status.state.waiting if status.state else None
            if waiting:
                problems.append(f"{pod.metadata.name}: {waiting.reason} {waiting.message or ''}".strip())
            elif status.restart_count:
                problems.append(f"{pod.metadata.name}: restarted {status.restart_count} times")
        if not pod.status.container_statuses:
            problems.append(f"{pod.metadata.name}: {pod.status.phase}")
    return "; ".join(problems) or "no operator pod"


def wait_ready(api_client: client.ApiClient, spec: OperatorSpec, timeout: float, image: str = "") -> None:
    """Wait until the Deployment is available and, with leader election, the lease is held (by a
    pod running `image`, when given: after a version change the old pod may still hold it).

    The lease matters: controllers start only after the operator becomes the leader.
    """
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    deadline = _now_s() + timeout
    fix = f"see `kubectl -n {spec.namespace} logs deploy/{NAME}` and `kubectl -n {spec.namespace} get events`"
    try:
        wait_for(
            apps.list_namespaced_deployment,
            deployment_available,
            what=f"deployment {spec.namespace}/{NAME} available",
            timeout=timeout,
            describe=describe_deployment,
            namespace=spec.namespace,
            field_selector=f"metadata.name={NAME}",
        )
        selector = _deployment_selector(apps, spec.namespace)  # the chart's labels, or kustomize's
        if spec.leader_election:
            wait_for(
                client.CoordinationV1Api(api_client).list_namespaced_lease,
                lambda lease: lease_held_by(lease, _operator_pods(core, spec.namespace, selector, image)),
                what=f"lease {spec.namespace}/{LEASE_NAME} held",
                timeout=max(1.0, deadline - _now_s()),
                describe=lambda lease: f"holder {lease.spec.holder_identity or 'none'}",
                namespace=spec.namespace,
                field_selector=f"metadata.name={LEASE_NAME}",
            )
    except WaitTimeout as exc:
        raise OperatorNotReady(
            f"the KubeRay operator was not ready within {timeout:.0f}s ({exc.last_seen}; "
            f"{_pod_problems(core, spec.namespace)})",
            fix,
        ) from exc


def _now_s() -> float:
    return time.monotonic()


@dataclass(frozen=True)
class OperatorFacts:
    """What runs in the cluster, read back rather than trusted from the spec we asked for."""

    namespace: str
    deployment: str
    image: str
    version: str  # from the image tag; "" when the tag is not a version
    args: tuple[str, ...]
    feature_gates: dict[str, bool] = field(hash=False)  # as named in the args
    effective_feature_gates: dict[str, bool] = field(hash=False)  # binary defaults + args (known versions)
    leader_election: bool
    watch_namespaces: tuple[str, ...]  # empty: every namespace
    ready_replicas: int
    served_crd_versions: dict[str, tuple[str, ...]] = field(hash=False)  # "rayclusters" -> ("v1", ...)
    lease_holder: str  # the leader's identity, `<pod>_<uuid>`
    lease_held: bool  # renewed within its duration by a current pod of this Deployment


def _find_operator(apps: client.AppsV1Api, namespace: str) -> tuple[Any, Any]:
    for dep in apps.list_namespaced_deployment(namespace).items:
        for container in dep.spec.template.spec.containers:
            if container.name == NAME or "kuberay/operator" in (container.image or ""):
                return dep, container
    raise ProvisioningError(
        f"no KubeRay operator Deployment in namespace {namespace}",
        "install it first (install_local or kuberay_chart.install_chart), or name the namespace it runs in",
    )


def _selector(dep: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in (dep.spec.selector.match_labels or {}).items())


def _running_image(core: client.CoreV1Api, dep: Any, container: Any) -> str:
    """The image a ready operator pod runs, falling back to the Deployment's when none is up."""
    for pod in core.list_namespaced_pod(dep.metadata.namespace, label_selector=_selector(dep)).items:
        for status in pod.status.container_statuses or []:
            if status.name == container.name and status.ready:
                return status.image
    return container.image


def _served_crd_versions(ext: client.ApiextensionsV1Api) -> dict[str, tuple[str, ...]]:
    served: dict[str, tuple[str, ...]] = {}
    for plural in RAY_KINDS:
        try:
            crd = ext.read_custom_resource_definition(f"{plural}.ray.io")
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        served[plural] = served_versions(api_to_dict(crd))
    return served


def api_to_dict(obj: Any) -> dict:
    return client.ApiClient().sanitize_for_serialization(obj)


def _lease(coordination: client.CoordinationV1Api, namespace: str, pods: set[str]) -> tuple[str, bool]:
    try:
        lease = coordination.read_namespaced_lease(LEASE_NAME, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return "", False
        raise
    return lease.spec.holder_identity or "", lease_held_by(lease, pods)


def observed_operator(api_client: client.ApiClient, namespace: str) -> OperatorFacts:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    dep, container = _find_operator(apps, namespace)
    argv = [*(container.command or [])[1:], *(container.args or [])]
    parsed = parse_operator_args(argv)
    image = _running_image(core, dep, container)
    version = version_from_image(image) or version_from_image(container.image or "")
    pods = _operator_pods(core, namespace, _selector(dep))
    lease_namespace = parsed.leader_election_namespace or namespace
    holder, held = _lease(client.CoordinationV1Api(api_client), lease_namespace, pods)
    return OperatorFacts(
        namespace=namespace,
        deployment=dep.metadata.name,
        image=image,
        version=version,
        args=tuple(argv),
        feature_gates=parsed.feature_gates,
        effective_feature_gates=effective_feature_gates(version, parsed.feature_gates),
        leader_election=parsed.leader_election,
        watch_namespaces=parsed.watch_namespaces,
        ready_replicas=dep.status.ready_replicas or 0,
        served_crd_versions=_served_crd_versions(client.ApiextensionsV1Api(api_client)),
        lease_holder=holder,
        lease_held=held,
    )


def operator_selector(api_client: client.ApiClient, ns: str) -> str:
    return _deployment_selector(client.AppsV1Api(api_client), ns)


def _deployment_selector(apps: client.AppsV1Api, ns: str) -> str:
    """The selector of the operator Deployment's pods (the chart's, or kustomize's other labels)."""
    try:
        return _selector(apps.read_namespaced_deployment(NAME, ns))
    except ApiException as exc:
        if exc.status != 404:
            raise
    return POD_SELECTOR


def with_version(facts: OperatorFacts, version: str, binary_gates: Mapping[str, bool]) -> OperatorFacts:
    """`facts` of an operator whose version its image tag does not say plainly (a source build):
    the version and binary defaults come from its source."""
    effective = {**binary_gates, **facts.feature_gates}
    return replace(facts, version=version, effective_feature_gates=effective)
