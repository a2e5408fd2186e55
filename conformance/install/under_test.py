"""The KubeRay under test: one typed value, made once by its install (`modes.py`), read by the
capabilities, the samples area, the summary and the operator checks.

Before the install it is what the install will make (`KubeRayInstall.planned`: the requested
version resolved as the build resolves it, where its module files are); after it, also what runs
(the observed version and gates) and what the install's own files promise. It travels to the
workers of a parallel run in the environment's snapshot, so it holds plain data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.install.kuberay_chart import Promised
    from conformance.install.kuberay_source import Provenance
    from conformance.install.operator_facts import OperatorFacts
    from conformance.install.operator_spec import OperatorSpec


@dataclass(frozen=True)
class KubeRayUnderTest:
    install: str  # how it comes to the cluster: helm, local-build, existing or source
    requested: str  # the profile's kuberay.version (summary.json's environment.kuberay_requested)
    # What is built or installed: the requested release, the newest one the Go module proxy serves
    # when it serves no source for that, a checkout's version; under existing, what runs.
    version: str
    origin: str = ""  # how it came to the cluster, as the report's first screen says it ("" under existing)
    checkout: Path | None = None  # --kuberay-source: the checkout's root
    # Facts about it a reader of the report must know (a fallback version), its origin among them.
    notes: tuple[str, ...] = ()
    # Once installed (or found running): what runs, read back rather than trusted.
    observed: str = ""  # the operator's version (its image tag; a source build's from its checkout)
    gates: dict[str, bool] = field(default_factory=dict, hash=False)  # binary defaults + its args
    spec: OperatorSpec | None = None  # the operator as installed (under existing, as found running)
    operator: OperatorFacts | None = None  # what ran right after the install
    promised: Promised | None = None  # what the install's own files promise; None when not known
    provenance: Provenance | None = None  # --kuberay-source: where the checkout came from

    def operator_dir(self) -> Path | None:
        """The ray-operator module's files (samples, CRDs) of the KubeRay under test: the checkout's,
        or the Go module's of `version` (fetched through the module proxy on first use); None where
        the run did not install it (existing)."""
        from conformance.install import kuberay  # noqa: PLC0415
        from conformance.install.kuberay_source import Checkout  # noqa: PLC0415

        if self.checkout is not None:
            return Checkout(self.checkout).operator_dir
        if self.install == "existing":
            return None
        return kuberay.module_dir("v" + self.version.removeprefix("v"))

    def report_fields(self) -> dict[str, object]:
        """How KubeRay was installed and what its files promise, for summary.json's environment."""
        fields: dict[str, object] = {"kuberay_install": self.install}
        if self.origin:
            fields["kuberay_origin"] = self.origin
        if self.provenance is not None:
            fields["kuberay_source"] = self.provenance.as_json()
        if self.promised is not None:
            fields["kuberay_promised"] = self.promised.as_json()
        return fields
