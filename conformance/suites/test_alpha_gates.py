"""Area security: KubeRay 1.7.0's alpha RayCluster features asked for while their feature gate
is off (the default). Each would change what protects or persists a cluster (network isolation,
mTLS, GCS state on the head's disk); accepted silently, the user runs without the protection
they asked for. KubeRay's ValidateRayClusterSpec refuses each with an InvalidRayClusterSpec event.

Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.capabilities import Capabilities
from conformance.checks import NOT_APPLICABLE
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour
from conformance.suites.autoscaling import rejected
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("security")

# field asked for -> (its gate, the spec fields that ask for it)
ALPHA_FIELDS: dict[str, tuple[str, dict[str, Any]]] = {
    "networkPolicy": ("RayClusterNetworkPolicy", {"networkPolicy": {"mode": "DenyAll"}}),
    "tlsOptions": ("RayClusterMTLS", {"tlsOptions": {"enabled": True}}),
    "rocksdb": ("GCSFaultToleranceEmbeddedStorage", {"gcsFaultToleranceOptions": {"backend": "rocksdb"}}),
}


@pytest.mark.no_pods
@pytest.mark.requires("kuberay>=1.7.0")  # the three fields first shipped with 1.7.0
@pytest.mark.parametrize("field", list(ALPHA_FIELDS))
def test_an_alpha_field_with_its_gate_off_is_refused_and_makes_nothing(
    field: str, ray: Ray, cluster_values: dict[str, Any], capabilities: Capabilities, timeouts: Timeouts
) -> None:
    """Catches: a RayCluster asking for network isolation, mTLS or the embedded GCS storage while
    that feature's gate is off that is made anyway (pods without what was asked), or refused
    without naming the gate."""
    gate, fields = ALPHA_FIELDS[field]
    if capabilities.feature_gates.get(gate):
        pytest.skip(NOT_APPLICABLE + f"the operator runs with the {gate} gate on")
    body = render("ray/raycluster.yaml", **{**cluster_values, "name": "alpha"})
    body["spec"].update(fields)
    with behaviour(f"{field} with {gate} off is refused"):
        rejected(ray, body, gate, timeouts)
