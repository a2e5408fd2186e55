"""Installing what the suites test: the KubeRay operator (and, later, add-ons it relies on)."""

from conformance.install.kuberay import install_local, uninstall_local
from conformance.install.operator_facts import OperatorFacts, observed_operator, wait_ready
from conformance.install.operator_spec import OperatorSpec

__all__ = [
    "OperatorFacts",
    "OperatorSpec",
    "install_local",
    "observed_operator",
    "uninstall_local",
    "wait_ready",
]
