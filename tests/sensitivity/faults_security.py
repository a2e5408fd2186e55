"""Seeded faults of area security."""

from __future__ import annotations

from .behind_the_back import drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

SECURITY = "test_security.py::"
ALPHA = "test_alpha_gates.py::test_an_alpha_field_with_its_gate_off_is_refused_and_makes_nothing"


@before_checks
def stale_crd_without_alpha_fields(rogue: Rogue) -> None:
    """A RayCluster CRD without 1.7.0's networkPolicy, tlsOptions and gcsFaultToleranceOptions.backend
    (an older CRD kept by Helm): the API server drops them, so KubeRay never sees the alpha
    features asked for and makes the cluster without them, as if it ignored its gates."""
    spec = {
        **raycluster_spec(),
        "networkPolicy": {"mode": "DenyAll"},
        "tlsOptions": {"enabled": True},
        "gcsFaultToleranceOptions": {"backend": "rocksdb"},
    }
    paths = [["networkPolicy"], ["tlsOptions"], ["gcsFaultToleranceOptions", "backend"]]
    drop_crd_fields(rogue, "rayclusters", paths, probe("RayCluster", spec))


def ingress_for_head_services(rogue: Rogue) -> None:
    """Something beside KubeRay publishes every head Service's dashboard through an Ingress."""
    networking = rogue.networking()
    for event in rogue.events(rogue.core.list_service_for_all_namespaces):
        service = event["object"]
        name, namespace = service.metadata.name, service.metadata.namespace
        if event["type"] != "ADDED" or not name.endswith("-head-svc") or not rogue.in_run(service):
            continue
        backend = {"service": {"name": name, "port": {"number": 8265}}}
        ingress = {
            "metadata": {"name": f"{name}-dashboard"},
            "spec": {
                "rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]
            },
        }
        networking.create_namespaced_ingress(namespace, ingress)
        rogue.acted(f"made Ingress {namespace}/{name}-dashboard")


@before_checks
def stale_crd_without_auth_options(rogue: Rogue) -> None:
    """A RayCluster CRD that predates authOptions (Helm never upgrades CRDs): the API server drops
    `authOptions.mode: token`, so KubeRay makes no token Secret and starts a head that asks for none."""
    spec = {**raycluster_spec(), "authOptions": {"mode": "token"}}
    drop_crd_fields(rogue, "rayclusters", [["authOptions"]], probe("RayCluster", spec))


FAULTS = [
    Fault(
        name="token-auth-dropped-by-a-stale-crd",
        area="security",
        misbehaviour="a RayCluster asking for token authentication gets no token Secret, and its "
        "dashboard and job API answer without a token",
        rogue=stale_crd_without_auth_options,
        catches=(
            SECURITY + "test_token_auth_gives_the_cluster_a_secret_with_auth_token",
            SECURITY + "test_dashboard_and_job_submission_require_the_token",
        ),
        bystanders=(SECURITY + "test_the_head_is_not_exposed_outside_the_cluster",),
        evidence=("made no Secret", "without a token"),
    ),
    Fault(
        name="head-dashboard-published-by-an-ingress",
        area="security",
        misbehaviour="the head's dashboard is published outside the cluster through an Ingress",
        rogue=ingress_for_head_services,
        catches=(SECURITY + "test_the_head_is_not_exposed_outside_the_cluster",),
        bystanders=(SECURITY + "test_dashboard_and_job_submission_require_the_token",),
        evidence="Ingress",
    ),
    Fault(
        name="alpha-fields-dropped-by-a-stale-crd",
        area="security",
        misbehaviour="a RayCluster asking for network isolation, mTLS or the embedded GCS storage with "
        "their gates off is made without them, unrefused (a stale CRD drops the fields)",
        rogue=stale_crd_without_alpha_fields,
        on_checkout=True,  # the fields and their gates are 1.7.0's
        catches=tuple(f"{ALPHA}[{field}]" for field in ("networkPolicy", "tlsOptions", "rocksdb")),
        bystanders=(SECURITY + "test_the_head_is_not_exposed_outside_the_cluster",),
        run_args=("--timeout", "apply=30"),
        evidence="InvalidRayClusterSpec event",
    ),
]
