"""A second, namespace-scoped KubeRay operator that a check runs beside the shared one.

Checks use it where they need an operator configured differently from the installed one (a
feature gate on, `--watch-namespace`) without touching the installed one, which other checks
(and other people) rely on. It runs the installed operator's image, so its version is the
version under test, with the chart's arguments for that version except: watch namespaces,
no leader election, and the installed operator's own `--feature-gates` with the gates asked for
on top (not the chart's defaults for the version: a build from source may claim a version whose
chart names gates its binary does not know, and an unknown gate makes the operator exit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

from conformance.install import operator_facts, operator_spec
from conformance.kube import apply
from conformance.kube.manifests import render_all
from conformance.kube.pods import is_ready, restarts
from conformance.kube.wait import wait_for

TEMPLATE = "kuberay/scoped-operator.yaml"


@dataclass(frozen=True)
class ScopedOperator:
    name: str
    namespace: str  # where it runs
    watch_namespaces: tuple[str, ...]
    image: str
    version: str  # the installed operator's, read back from its image
    feature_gates: dict[str, bool] = field(default_factory=dict, hash=False)  # set on top of installed_gates
    installed_gates: dict[str, bool] = field(default_factory=dict, hash=False)  # the installed one's flag

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name={self.name}"

    def args(self) -> list[str]:
        gates = {**self.installed_gates, **self.feature_gates}
        spec = operator_spec.OperatorSpec(
            version=self.version,
            namespace=self.namespace,
            feature_gates=gates,
            watch_namespaces=self.watch_namespaces,
            leader_election=False,
            known_gates=tuple(gates),  # the installed binary runs with them; the rest are asked for
        )
        return operator_spec.chart_args(spec)

    def objects(self, rules: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """ServiceAccount, a Role and RoleBinding per watched namespace, and the Deployment."""
        return render_all(
            TEMPLATE,
            name=self.name,
            namespace=self.namespace,
            watch_namespaces=self.watch_namespaces,
            rules=list(rules),
            image=self.image,
            args=self.args(),
        )


def installed_rules(api: client.ApiClient, cluster_role: str = operator_spec.NAME) -> list[dict[str, Any]]:
    """The rules of the installed operator's ClusterRole, to be granted per namespace instead."""
    role = client.RbacAuthorizationV1Api(api).read_cluster_role(cluster_role)
    return [
        rule for rule in operator_facts.api_to_dict(role).get("rules", []) if not rule.get("nonResourceURLs")
    ]


def start(api: client.ApiClient, operator: ScopedOperator, timeout: float) -> client.V1Pod:
    """Apply its objects and wait for its pod to be Ready; returns that pod."""
    dynamic = DynamicClient(api)
    for doc in operator.objects(installed_rules(api)):
        apply.apply_object(dynamic, doc)
    return wait_for(
        client.CoreV1Api(api).list_namespaced_pod,
        is_ready,
        what=f"the scoped operator {operator.namespace}/{operator.name} to be Ready",
        timeout=timeout,
        describe=lambda pod: pod.status.phase or "",
        namespace=operator.namespace,
        label_selector=operator.selector,
    )


def pods(api: client.ApiClient, operator: ScopedOperator) -> list[client.V1Pod]:
    core = client.CoreV1Api(api)
    return core.list_namespaced_pod(operator.namespace, label_selector=operator.selector).items


def logs(api: client.ApiClient, operator: ScopedOperator) -> str:
    """Its pods' logs, a restarted container's previous instance first (what it did before counts)."""
    core = client.CoreV1Api(api)
    parts = []
    for pod in pods(api, operator):
        if restarts(pod):
            parts.append(core.read_namespaced_pod_log(pod.metadata.name, operator.namespace, previous=True))
        parts.append(core.read_namespaced_pod_log(pod.metadata.name, operator.namespace))
    return "\n".join(parts)
