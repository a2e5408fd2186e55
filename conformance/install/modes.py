"""The ways KubeRay comes to the cluster, one class each behind one interface, chosen once
(`for_mode`) from the run's options:

- `helm`: a released chart from KubeRay's Helm repository, with public images;
- `local-build`: the operator built here from its Go module (the newest release the module proxy
  serves when it serves no source for the one asked) and installed from the harness's hand-made
  imitation of the chart;
- `existing`: the operator the cluster already runs, read back, installing nothing;
- `source`: a checkout (`--kuberay-source DIR`) built here and installed its own way.

Each refuses what it cannot do before anything is provisioned (`check_options`, `check_cluster`,
`check_input`), says what it will install (`planned`) and installs it (`install`), which makes the
one `KubeRayUnderTest` value the rest of the run reads. Nothing here removes KubeRay: a cluster the
run made goes whole, and one it attached to keeps its operator.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from conformance.errors import HarnessError, UsageError
from conformance.install.under_test import KubeRayUnderTest

if TYPE_CHECKING:
    from kubernetes import client

    from conformance.install.kuberay import ImageLoader
    from conformance.install.kuberay_chart import Promised
    from conformance.install.operator_spec import OperatorSpec
    from conformance.install.source_install import SourceInstall
    from conformance.kube.target import KubeTarget
    from conformance.profiles.schema import KubeRay

RAY_CRDS = ("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")


class KubeRayInstall(Protocol):
    mode: str  # helm, local-build, existing or source (summary.json's environment.kuberay_install)
    builds_images: bool  # the run's Ray and Redis images are built on this machine and loaded

    def check_options(self) -> None:
        """Refuse settings this mode cannot honour, from the options alone."""
        ...

    def check_cluster(self, target: KubeTarget) -> None:
        """Refuse a cluster that already answers (the existing provider's) and that this mode cannot use."""
        ...

    def check_input(self, provider: str, builds_here: bool, cache: Path | None) -> None:
        """Refuse what cannot work on `provider` (`builds_here`: images built on this machine reach
        its cluster; `cache`: where it keeps builds), building what a bad input would fail; creates
        nothing in a cluster. Called once per run."""
        ...

    def planned(self) -> KubeRayUnderTest:
        """What `install` will install (worked out once): the version, where its module files are."""
        ...

    def install(
        self, loader: ImageLoader, api: client.ApiClient, target: KubeTarget, ready: float
    ) -> KubeRayUnderTest:
        """Install it (or read back what runs), wait for the operator, and say what runs."""
        ...


def for_mode(
    mode: str, settings: KubeRay, profile_name: str, checkout: str | None, explicit_version: str | None
) -> KubeRayInstall:
    """The install of `mode` (the options' `kuberay_install`) with the profile's kuberay settings."""
    kinds: dict[str, type[_Install]] = {
        "helm": HelmInstall,
        "local-build": LocalBuildInstall,
        "existing": ExistingInstall,
        "source": CheckoutInstall,
    }
    return kinds[mode](settings, profile_name, checkout, explicit_version or "")


@dataclass
class _Install:
    """What every mode shares: the profile's kuberay settings and the options that name a checkout."""

    settings: KubeRay
    profile_name: str
    checkout: str | None = None  # --kuberay-source
    explicit_version: str = ""  # --kuberay-version
    mode = ""
    builds_images = False
    _planned: KubeRayUnderTest | None = field(default=None, init=False, repr=False, compare=False)

    def check_options(self) -> None:
        pass

    def check_cluster(self, target: KubeTarget) -> None:
        pass

    def check_input(self, provider: str, builds_here: bool, cache: Path | None) -> None:
        if self.explicit_version:
            raise UsageError(
                "--kuberay-version names the version of a checkout", "use it with --kuberay-source DIR"
            )

    def planned(self) -> KubeRayUnderTest:
        if self._planned is None:
            self._planned = self._plan()
        return self._planned

    def _plan(self) -> KubeRayUnderTest:
        return KubeRayUnderTest(self.mode, self.settings.version, self.settings.version)

    def _spec(self, version: str, gates: dict[str, bool]) -> OperatorSpec:
        from conformance.install import operator_spec  # noqa: PLC0415

        return operator_spec.OperatorSpec(
            version=version,
            namespace=self.settings.namespace,
            feature_gates=gates,
            env=dict(self.settings.env),
            extra_args=tuple(self.settings.extra_args),
        )

    def _installed(
        self, api: client.ApiClient, spec: OperatorSpec, ready: float, origin: str, promised: Promised
    ) -> KubeRayUnderTest:
        """The planned value once the operator is ready, with what runs read back."""
        from conformance.install import operator_facts  # noqa: PLC0415

        operator_facts.wait_ready(api, spec, ready)
        operator = operator_facts.observed_operator(api, self.settings.namespace)
        planned = self.planned()
        return replace(
            planned,
            origin=origin,
            notes=(*planned.notes, origin),
            observed=operator.version,
            gates=dict(operator.effective_feature_gates),
            spec=spec,
            operator=operator,
            promised=promised,
        )

    def _refuse_extra_args(self) -> None:
        """The chart passes no arguments of the profile's own."""
        if self.settings.extra_args:
            raise UsageError(
                f"kuberay.extra_args cannot be passed through the kuberay-operator Helm chart "
                f"(kuberay.install is {self.mode})",
                "use kuberay.env, or kuberay.install: local-build",
            )


@dataclass
class HelmInstall(_Install):
    """A released chart from KubeRay's Helm repository; the cluster pulls the public images."""

    mode = "helm"

    def check_options(self) -> None:
        self._refuse_extra_args()

    def install(
        self, loader: ImageLoader, api: client.ApiClient, target: KubeTarget, ready: float
    ) -> KubeRayUnderTest:
        from conformance.install import kuberay_chart, operator_spec  # noqa: PLC0415

        version = self.planned().version
        spec = self._spec(
            version, {**operator_spec.chart_feature_gates(version), **self.settings.feature_gates}
        )
        source = kuberay_chart.ChartSource.repository(version)
        kuberay_chart.install_chart(target, api, spec, source, ready)
        promised = kuberay_chart.promised_by_repository(source, self.settings.feature_gates, version)
        origin = f"KubeRay {version} installed with Helm from chart {source.describe()}"
        return self._installed(api, spec, ready, origin=origin, promised=promised)


@dataclass
class LocalBuildInstall(_Install):
    """The operator built here from its Go module, installed from the harness's imitation of the chart."""

    mode = "local-build"
    builds_images = True

    def check_input(self, provider: str, builds_here: bool, cache: Path | None) -> None:
        super().check_input(provider, builds_here, cache)
        if not builds_here:
            raise UsageError(
                f"profile {self.profile_name} builds KubeRay and Ray images on this machine, "
                f"which provider {provider} cannot load",
                "use a profile with kuberay.install: helm and public images (e.g. --profile kind)",
            )

    def _plan(self) -> KubeRayUnderTest:
        """The requested KubeRay, or the newest older release the Go proxy serves source for."""
        from conformance.build import gobuild  # noqa: PLC0415
        from conformance.build.cache import cache_dir  # noqa: PLC0415
        from conformance.install import kuberay  # noqa: PLC0415

        requested = self.settings.version
        resolved = gobuild.resolve(kuberay.operator_tool(requested), cache_dir()).version
        notes: tuple[str, ...] = ()
        if resolved != requested:
            notes = (
                f"KubeRay {requested} was asked for, but the Go module proxy serves no source for it; "
                f"the newest served release {resolved} was built and is what these results describe",
            )
        return KubeRayUnderTest(self.mode, requested, resolved, notes=notes)

    def install(
        self, loader: ImageLoader, api: client.ApiClient, target: KubeTarget, ready: float
    ) -> KubeRayUnderTest:
        from conformance.install import kuberay, kuberay_chart, operator_spec  # noqa: PLC0415

        version = self.planned().version
        spec = self._spec(
            version, {**operator_spec.chart_feature_gates(version), **self.settings.feature_gates}
        )
        ns = self.settings.namespace
        kuberay_chart.clear_other_installs(target, api, ns, kuberay_chart.LOCAL_BUILD, ready)
        kuberay.install_local(loader, api, spec)
        promised = kuberay_chart.promised_by_tables(spec, self.settings.feature_gates)
        origin = (
            f"KubeRay {version} built from its Go module and installed from the harness's hand-made "
            "imitation of its Helm chart (manifests/kuberay/operator.yaml): a module has no chart; "
            "--kuberay-source DIR installs a checkout with its own"
        )
        return self._installed(api, spec, ready, origin=origin, promised=promised)


@dataclass
class ExistingInstall(_Install):
    """The operator the cluster already runs: read back, nothing installed."""

    mode = "existing"

    def check_cluster(self, target: KubeTarget) -> None:
        from kubernetes import client  # noqa: PLC0415

        from conformance.kube.target import api_client  # noqa: PLC0415

        extensions = client.ApiextensionsV1Api(api_client(target))
        served = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
        missing = [name for name in RAY_CRDS if name not in served]
        if missing:
            raise UsageError(
                f"the cluster has no KubeRay CRDs ({', '.join(missing)} missing)",
                "install KubeRay first, or use a profile whose kuberay.install is helm",
            )

    def install(
        self, loader: ImageLoader, api: client.ApiClient, target: KubeTarget, ready: float
    ) -> KubeRayUnderTest:
        from conformance.install import kuberay_chart, operator_facts, operator_spec  # noqa: PLC0415

        self._spec(self.settings.version, dict(self.settings.feature_gates))  # refuses what the others refuse
        operator = operator_facts.observed_operator(api, self.settings.namespace)
        spec = operator_spec.OperatorSpec(  # the operator that runs, for waits that need a spec
            version=operator.version or "v0.0.0",
            namespace=self.settings.namespace,
            feature_gates=dict(operator.feature_gates),
            watch_namespaces=operator.watch_namespaces,
            leader_election=operator.leader_election,
        )
        notes: tuple[str, ...] = ()
        promised = None
        try:  # a version whose chart defaults the harness has recorded, and Go to read its CRDs
            promised = kuberay_chart.promised_by_tables(spec, self.settings.feature_gates)
        except HarnessError as exc:
            notes = (f"the operator's chart defaults and CRDs cannot be known here: {exc}",)
        return replace(
            self.planned(),
            version=operator.version,
            notes=notes,
            observed=operator.version,
            gates=dict(operator.effective_feature_gates),
            spec=spec,
            operator=operator,
            promised=promised,
        )


@dataclass
class CheckoutInstall(_Install):
    """`--kuberay-source DIR`: a checkout built here and installed with its own chart (or kustomize)."""

    mode = "source"
    builds_images = True
    source: SourceInstall | None = None  # the checkout, its provenance and its built image, once checked

    def check_options(self) -> None:
        self._refuse_extra_args()

    def check_input(self, provider: str, builds_here: bool, cache: Path | None) -> None:
        """Everything that can refuse the checkout, and the operator's build, before any cluster is
        touched."""
        if not self.checkout:
            raise UsageError(
                f"profile {self.profile_name} installs KubeRay from source but names no checkout",
                "pass --kuberay-source DIR (a checkout of ray-project/kuberay)",
            )
        if not builds_here:
            raise UsageError(
                f"--kuberay-source builds the operator image on this machine, which provider "
                f"{provider} cannot load",
                "use the local provider, or install a released KubeRay (kuberay.install: helm)",
            )
        if self.source is None:
            from conformance.install.source_install import SourceInstall  # noqa: PLC0415

            assert cache is not None, "a provider that takes images built here has a build cache"
            self.source = SourceInstall(
                path=self.checkout,
                namespace=self.settings.namespace,
                overrides=dict(self.settings.feature_gates),
                cache=cache,
                explicit_version=self.explicit_version,
            )
            self.source.check()

    def _plan(self) -> KubeRayUnderTest:
        root = Path(self.checkout).expanduser().resolve() if self.checkout else None
        prov = self.source.provenance if self.source else None
        # The checkout's version is known once checked; without a checkout (refused by check_input),
        # the profile's.
        version = prov.version if prov else "" if root else self.settings.version
        return KubeRayUnderTest(self.mode, self.settings.version, version, checkout=root, provenance=prov)

    def install(
        self, loader: ImageLoader, api: client.ApiClient, target: KubeTarget, ready: float
    ) -> KubeRayUnderTest:
        from conformance.install import operator_facts  # noqa: PLC0415

        assert self.source is not None and self.source.provenance is not None, "check_input first"
        spec, promised = self.source.install(loader, api, target, ready)
        prov = self.source.provenance
        operator = operator_facts.with_version(
            operator_facts.observed_operator(api, self.settings.namespace),
            prov.version,
            promised.binary_gates,
        )
        origin = prov.note()
        return replace(
            self.planned(),
            version=prov.version,
            origin=origin,
            notes=(origin,),
            observed=operator.version,
            gates=dict(operator.effective_feature_gates),
            spec=spec,
            operator=operator,
            promised=promised,
            provenance=prov,
        )
