"""Seeded faults of area security."""

from __future__ import annotations

from .faults import Fault
from .rogue import Rogue

SECURITY = "test_security.py::"


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


FAULTS = [
    Fault(
        name="head-dashboard-published-by-an-ingress",
        area="security",
        misbehaviour="the head's dashboard is published outside the cluster through an Ingress",
        rogue=ingress_for_head_services,
        catches=(SECURITY + "test_the_head_is_not_exposed_outside_the_cluster",),
        bystanders=(SECURITY + "test_dashboard_and_job_submission_require_the_token",),
        evidence="Ingress",
    ),
]
