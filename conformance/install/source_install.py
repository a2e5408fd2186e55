"""`--kuberay-source DIR`: KubeRay built from a checkout and installed its own way.

`SourceInstall.check` does everything that can refuse bad input before the cluster is touched:
the folder is a checkout, its version can be read, the profile's gates exist in it, the chart
renders (`helm template`) or config/default builds (`kustomize build`), and the operator builds.
`install` then loads the image, installs (chart, or kustomize without one) and returns the spec
and what the checkout's files promise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from conformance.build import image_cache
from conformance.install import (
    kuberay,
    kuberay_chart,
    kuberay_source,
    operator_args,
    operator_facts,
    operator_spec,
)
from conformance.install.kuberay_chart import ChartSource, Promised
from conformance.install.kuberay_source import Checkout, Provenance
from conformance.kube.target import KubeTarget


@dataclass
class SourceInstall:
    path: str
    namespace: str
    overrides: dict[str, bool]  # the profile's kuberay.feature_gates
    cache: Path
    explicit_version: str = ""
    checkout: Checkout | None = None
    provenance: Provenance | None = None
    image: image_cache.ImageArchive | None = None
    binary_gates: dict[str, bool] = field(default_factory=dict)

    def check(self) -> None:
        """Refuse bad input (UsageError) and build the operator (ProvisioningError), creating nothing."""
        checkout = kuberay_source.open_checkout(self.path)
        prov = kuberay_source.provenance(checkout, self.explicit_version)
        kuberay_source.check_gates(checkout, self.overrides)
        self.binary_gates = kuberay_source.checkout_gate_defaults(checkout)
        spec = self.spec(checkout, prov)
        tag = f"{kuberay_source.IMAGE_NAME}:{kuberay_source.image_tag(prov)}"
        if checkout.chart_dir:
            helm = kuberay_chart.tool_binary(kuberay_chart.HELM)
            source = ChartSource(directory=checkout.chart_dir)
            values = kuberay_chart.chart_values(spec, kuberay_chart.chart_default_values(helm, source), tag)
            kuberay_chart.rendered_deployment(kuberay_chart.render(helm, source, self.namespace, values))
        else:
            kuberay_chart.kustomize_render(checkout, self.namespace, tag)
        self.image = kuberay_source.operator_image(checkout, prov, self.cache)
        self.checkout, self.provenance = checkout, prov

    def spec(self, checkout: Checkout, prov: Provenance) -> operator_spec.OperatorSpec:
        """The profile's overrides over what the checkout's chart (or manifest) passes by default."""
        if checkout.chart_dir:
            defaults = kuberay_chart.chart_gates(kuberay_chart.chart_default_values("", _dir(checkout)))
        else:
            args = kuberay_chart.kustomize_manifest_args(checkout)
            defaults = operator_args.parse_operator_args(args).feature_gates
        return operator_spec.OperatorSpec(
            version=prov.version,
            namespace=self.namespace,
            feature_gates={**defaults, **self.overrides},
            known_gates=tuple(kuberay_source.checkout_gate_defaults(checkout)),
        )

    def install(
        self, loader: kuberay.ImageLoader, api: client.ApiClient, target: KubeTarget, timeout: float
    ) -> tuple[operator_spec.OperatorSpec, Promised]:
        assert self.checkout and self.provenance and self.image, "check() first"
        checkout, prov, image = self.checkout, self.provenance, self.image
        loader.load_image(image)
        spec = self.spec(checkout, prov)
        build = image.path.parent.name
        if checkout.chart_dir:
            source = _dir(checkout)
            crds = kuberay_chart.install_chart(target, api, spec, source, timeout, image.ref, build)
            values = kuberay_chart.chart_default_values("", source)
            gates, leader = kuberay_chart.promised_by_chart(values, self.overrides, self.binary_gates)
            origin = "helm-chart/kuberay-operator/values.yaml of the checkout"
            crds_origin = "helm-chart/kuberay-operator/crds/ of the checkout"
        else:
            crds = kuberay_chart.install_kustomize(target, api, spec, checkout, image.ref, build, timeout)
            args = kuberay_chart.kustomize_manifest_args(checkout)
            gates, leader = kuberay_chart.promised_by_manifest(args, self.overrides, self.binary_gates)
            origin = "ray-operator/config/manager/manager.yaml and pkg/features/features.go of the checkout"
            crds_origin = "ray-operator/config/crd/bases of the checkout"
        operator_facts.wait_ready(api, spec, timeout, image=image.ref)
        promised = Promised(
            origin=f"{origin} ({prov.ref}), with the profile's overrides",
            binary_gates=self.binary_gates,
            feature_gates=gates,
            leader_election=leader,
            crds=tuple(crds),
            crds_origin=crds_origin,
        )
        return spec, promised


def _dir(checkout: Checkout) -> ChartSource:
    return ChartSource(directory=checkout.chart_dir)
