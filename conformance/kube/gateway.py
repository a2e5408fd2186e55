"""Gateway API objects as plain dicts: their group, and whether a condition holds for the current spec.

Generic over implementations (Traefik, Istio, Envoy Gateway): installers wait on GatewayClasses
with these, checks on Gateways and HTTPRoutes.
"""

from __future__ import annotations

from typing import Any

GROUP = "gateway.networking.k8s.io"


def condition_true(obj: dict[str, Any], kind: str, generation: bool = True) -> bool:
    """Whether condition `kind` is True and, with `generation`, observed for the current spec."""
    current = obj.get("metadata", {}).get("generation")
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return not generation or current is None or cond.get("observedGeneration", current) >= current
    return False


def describe_conditions(obj: dict[str, Any]) -> str:
    conds = obj.get("status", {}).get("conditions") or []
    states = [f"{c.get('type')}={c.get('status')}({c.get('reason')})" for c in conds]
    return ", ".join(states) or "no status yet"
