"""Installing what the suites test: the KubeRay operator (and, later, add-ons it relies on)."""

from conformance.install.kuberay import (
    OperatorFacts,
    OperatorSpec,
    install_local,
    observed_operator,
    uninstall_local,
    wait_ready,
)

__all__ = [
    "OperatorFacts",
    "OperatorSpec",
    "install_local",
    "observed_operator",
    "uninstall_local",
    "wait_ready",
]
