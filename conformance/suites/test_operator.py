"""Area operator: the KubeRay operator as installed is what its Helm chart promises."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from conformance.environment import Environment
from conformance.install import kuberay
from conformance.kube.wait import behaviour, wait_for
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("operator")

KEEPS_V1ALPHA1 = ("rayclusters", "rayjobs", "rayservices")


def _facts(conformance: Environment, api: client.ApiClient) -> kuberay.OperatorFacts:
    return kuberay.observed_operator(api, conformance.operator_namespace)


def test_crds_are_served_at_v1_and_v1alpha1_is_kept(conformance: Environment, api: client.ApiClient) -> None:
    served = _facts(conformance, api).served_crd_versions
    for plural in KEEPS_V1ALPHA1:
        assert "v1" in served.get(plural, ()), f"{plural}.ray.io is not served at v1: {served.get(plural)}"
        assert "v1alpha1" in served[plural], f"{plural}.ray.io no longer serves v1alpha1: {served[plural]}"


@pytest.mark.requires("kuberay>=1.6.0")  # the RayCronJob CRD first shipped with 1.6.0
def test_raycronjob_crd_is_served_at_v1(conformance: Environment, api: client.ApiClient) -> None:
    served = _facts(conformance, api).served_crd_versions
    assert "v1" in served.get("raycronjobs", ()), f"raycronjobs.ray.io: {served.get('raycronjobs')}"


def test_feature_gates_match_the_chart_defaults(conformance: Environment, api: client.ApiClient) -> None:
    facts = _facts(conformance, api)
    binary = kuberay.BINARY_FEATURE_GATES[facts.version]
    expected = {
        **binary,
        **kuberay.chart_feature_gates(facts.version),
        **conformance.options.profile.kuberay.feature_gates,
    }
    mismatched = {
        gate: {"running": facts.effective_feature_gates.get(gate), "chart": want}
        for gate, want in expected.items()
        if facts.effective_feature_gates.get(gate) != want
    }
    assert not mismatched, f"feature gates differ from the {facts.version} chart defaults: {mismatched}"


def test_leader_election_is_on_and_the_lease_is_held(conformance: Environment, api: client.ApiClient) -> None:
    facts = _facts(conformance, api)
    assert facts.leader_election, "the operator runs without leader election"
    assert facts.lease_held, f"lease {kuberay.LEASE_NAME} is not held by a current operator pod"


def test_operator_is_ready_and_recovers_after_its_pod_is_deleted(
    conformance: Environment, api: client.ApiClient, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = conformance.operator_namespace
    deployment = apps.read_namespaced_deployment(kuberay.NAME, ns)
    assert deployment.status.ready_replicas == deployment.spec.replicas
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    (old,) = [
        p
        for p in core.list_namespaced_pod(ns, label_selector=selector).items
        if not p.metadata.deletion_timestamp
    ]
    deleted_at = time.monotonic()
    core.delete_namespaced_pod(old.metadata.name, ns)

    def replaced_and_ready(pod: client.V1Pod) -> bool:
        return (
            pod.metadata.name != old.metadata.name
            and pod.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        )

    with behaviour("the operator comes back Ready after its pod is deleted"):
        wait_for(
            core.list_namespaced_pod,
            replaced_and_ready,
            what="a new operator pod to be Ready",
            timeout=timeouts.ready,
            namespace=ns,
            label_selector=selector,
        )
    metrics["operator_recovery_s"] = round(time.monotonic() - deleted_at, 2)
    # Ready is not enough: a new leader must take the lease, or nothing reconciles.
    kuberay.wait_ready(api, conformance.operator_spec, timeouts.ready)  # type: ignore[arg-type]
    metrics["operator_leader_s"] = round(time.monotonic() - deleted_at, 2)
