"""Move the installed KubeRay operator to another version in place, as an upgrade with Helm does.

The order is the one KubeRay documents and its own e2eupgrade test follows: the CRDs of the
target version first (Helm never upgrades a chart's crds/), then its ClusterRole and Role and
the Deployment's image and arguments, after which its pod is recreated (strategy Recreate, as in
the chart). Only for operators installed from an image built here (`local-build`, or `source`):
the other version's image is built the same way, from the Go module proxy.

With `--kuberay-source` the way up is the real one: the previous minor runs in the Deployment of
the checkout's Helm release (its image, arguments, CRDs and RBAC, as `switch_to` puts them), then
`helm_upgrade` applies the chart's crds/ server-side and runs `helm upgrade`, whose three-way
merge brings every field back to what the checkout's chart renders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from conformance.build import gobuild
from conformance.build.cache import cache_dir
from conformance.install import kuberay, operator_facts, operator_spec
from conformance.kube import apply

CONTAINER = operator_spec.NAME  # the operator's container in manifests/kuberay/operator.yaml


@dataclass(frozen=True)
class OperatorVersion:
    """One version of the operator as it runs: its spec, image and the chart's arguments."""

    spec: operator_spec.OperatorSpec
    image: str
    args: tuple[str, ...]


def previous_minor(version: str) -> str:
    """The newest release of the minor before `version` that can be built here, or ""."""
    tool = gobuild.previous_minor(kuberay.operator_tool(version), cache_dir())
    return tool.version if tool else ""


def previous_spec(
    current: operator_spec.OperatorSpec, version: str, overrides: dict[str, bool]
) -> operator_spec.OperatorSpec:
    """The spec `current` would have had at `version`: that chart's gates plus the profile's
    overrides the older binary knows (it exits on a gate it does not know)."""
    known = operator_spec.BINARY_FEATURE_GATES.get(version, {})
    gates = {
        **operator_spec.chart_feature_gates(version),
        **{g: on for g, on in overrides.items() if g in known},
    }
    return replace(current, version=version, feature_gates=gates, known_gates=())


def running(api: client.ApiClient, spec: operator_spec.OperatorSpec) -> OperatorVersion:
    """What the Deployment runs now (to go back to it afterwards)."""
    deployment = client.AppsV1Api(api).read_namespaced_deployment(operator_spec.NAME, spec.namespace)
    (container,) = [c for c in deployment.spec.template.spec.containers if c.name == CONTAINER]
    return OperatorVersion(spec, container.image, tuple(container.args or ()))


def built(spec: operator_spec.OperatorSpec, loader: kuberay.ImageLoader) -> OperatorVersion:
    """The operator of `spec.version` from an image built here and loaded into the node."""
    archive = kuberay.operator_image(spec.version)
    loader.load_image(archive)
    return OperatorVersion(spec, archive.ref, tuple(operator_spec.chart_args(spec)))


def switch_to(api: client.ApiClient, target: OperatorVersion, timeout: float) -> float:
    """Apply the CRDs and RBAC of `target`, roll the Deployment to it, wait until a pod of it leads.

    Returns the seconds from the Deployment change to a pod of `target` holding the lease.
    """
    module = kuberay.module_dir(target.spec.version)
    apply.apply_crds(
        api, kuberay.crd_documents(module / "config" / "crd" / "bases"), what=f"KubeRay {target.spec.version}"
    )
    # Each version's own ClusterRole, as a chart upgrade replaces it: 1.5 still watches Endpoints,
    # which 1.6's role no longer grants.
    dynamic = DynamicClient(api)
    for role in kuberay.rbac_roles(module / "config" / "rbac", target.spec):
        apply.apply_object(dynamic, role)
    started = time.monotonic()
    client.AppsV1Api(api).patch_namespaced_deployment(
        operator_spec.NAME, target.spec.namespace, _patch(target)
    )
    operator_facts.wait_ready(api, target.spec, timeout, image=target.image)
    return round(time.monotonic() - started, 2)


def is_running(api: client.ApiClient, target: OperatorVersion) -> bool:
    now = running(api, target.spec)
    return (now.image, now.args) == (target.image, target.args)


def _patch(target: OperatorVersion) -> dict[str, Any]:
    container = {"name": CONTAINER, "image": target.image, "args": list(target.args)}
    return {
        "metadata": {"labels": {"app.kubernetes.io/version": target.spec.version}},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def helm_upgrade(
    api: client.ApiClient, source: Any, loader: kuberay.ImageLoader, target: Any, timeout: float
) -> float:
    """Upgrade to the checkout (`source_install.SourceInstall`) as KubeRay's upgrade guide says:
    the chart's CRDs server-side, then `helm upgrade`. Returns the seconds from the CRD apply to a
    pod of the checkout's image holding the lease."""
    started = time.monotonic()
    source.install(loader, api, target, timeout)
    return round(time.monotonic() - started, 2)
