"""Everything a conformance run needs before its first check, and its removal afterwards.

The provider's cluster, KubeRay installed and checked, the Ray images available, and the
capabilities detected. Any failure here is the environment's, and is reported as such.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from conformance import capabilities
from conformance.errors import HarnessError, ProvisioningError, UsageError
from conformance.kube.target import api_client
from conformance.profiles import Profile
from conformance.providers import get_provider
from conformance.providers.base import Cluster, NodeFaults, Provider
from conformance.timeouts import Timeouts


@dataclass
class RunOptions:
    provider: str
    profile: Profile
    run_dir: Path
    run_id: str
    kubeconfig: str | None = None
    context: str | None = None
    ray_versions: tuple[str, ...] = ()
    keep_failed: bool = False
    keep_cluster: bool = False
    timeout_overrides: dict[str, float] = field(default_factory=dict)
    # --kuberay-source: a KubeRay checkout to build and install its own way (install mode source).
    kuberay_source: str | None = None
    # --kuberay-version: the version under test when the checkout's files do not say it.
    kuberay_version: str | None = None

    @property
    def kuberay_install(self) -> str:
        return "source" if self.kuberay_source else self.profile.kuberay.install

    @property
    def timeouts(self) -> Timeouts:
        return self.profile.timeouts.with_overrides(self.timeout_overrides)

    @property
    def versions_to_test(self) -> tuple[str, ...]:
        return self.ray_versions or self.profile.ray_versions


class Environment:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.provider: Provider = get_provider(
            options.provider,
            kubeconfig=options.kubeconfig,
            context=options.context,
            # Terraform-made clusters: a workspace per run, and no destroy after a failed apply if kept.
            run_id=options.run_id,
            keep_cluster=options.keep_cluster,
            local_nodes=options.profile.local_nodes,
        )
        self.cluster: Cluster | None = None
        self.api: client.ApiClient | None = None
        self.capabilities: capabilities.Capabilities | None = None
        self.operator_namespace = options.profile.kuberay.namespace
        self.operator: object | None = None
        self._made_cluster = False
        self.operator_spec: object | None = None
        # Facts about this run a reader of the report must know (a fallback version, say).
        self.notes: list[str] = []
        # What the harness installed of a Helm-installed Gateway implementation (gateway_charts.Installed).
        self.gateway: Any = None
        # What the install's own files promise (kuberay_chart.Promised), for the operator checks.
        self.promised: Any = None
        # --kuberay-source: the checkout, its provenance and its built image (source_install.SourceInstall).
        self.source: Any = None
        # How KubeRay came to the cluster, as the report's first screen says it.
        self.kuberay_origin = ""
        self._input_checked = False  # check_input has passed: the CLI's call and prepare's are one

    def check_input(self) -> None:
        """Refuse combinations that cannot work, before anything is provisioned (once: a Helm render
        or a checkout's build is not done again when `prepare` follows the CLI's check)."""
        if self._input_checked:
            return
        profile = self.options.profile
        profile.check_ray_versions(self.options.versions_to_test)
        if profile.kuberay.extra_args and self.options.kuberay_install in ("helm", "source"):
            raise UsageError(
                f"kuberay.extra_args cannot be passed through the kuberay-operator Helm chart "
                f"(kuberay.install is {self.options.kuberay_install})",
                "use kuberay.env, or kuberay.install: local-build",
            )
        if profile.gateway_install in ("istio", "envoy-gateway"):
            from conformance.install import gateway_charts  # noqa: PLC0415

            gateway_charts.check_usable(profile.gateway_install, self.options.provider, profile.name)
        if profile.gateway_install == "local-build" and not _builds_here(self.options.provider):
            raise UsageError(
                f"profile {profile.name} builds the Gateway implementation on this machine, "
                f"which provider {self.options.provider} cannot load",
                "set gateway.install to istio, envoy-gateway or existing (with the cluster's GatewayClass)",
            )
        preflight = getattr(self.provider, "preflight", None)
        if preflight is not None:
            preflight()  # tools, credentials, region, budget: checked, nothing created
        if self.options.provider == "existing":
            cluster = self.provider.up()  # creates nothing: checks that the cluster answers
            if self.options.profile.kuberay.install == "existing":
                api = api_client(cluster.target)
                _require_kuberay_crds(api)
        self._check_source()
        if self.options.kuberay_install == "local-build" and not _builds_here(self.options.provider):
            raise UsageError(
                f"profile {self.options.profile.name} builds KubeRay and Ray images on this machine, "
                f"which provider {self.options.provider} cannot load",
                "use a profile with kuberay.install: helm and public images (e.g. --profile kind)",
            )
        self._input_checked = True

    def _check_source(self) -> None:
        """--kuberay-source: everything that can refuse it, and the operator's build, before any
        cluster is touched."""
        options = self.options
        if options.kuberay_install != "source":
            if options.kuberay_version:
                raise UsageError(
                    "--kuberay-version names the version of a checkout", "use it with --kuberay-source DIR"
                )
            return
        if not options.kuberay_source:
            raise UsageError(
                f"profile {options.profile.name} installs KubeRay from source but names no checkout",
                "pass --kuberay-source DIR (a checkout of ray-project/kuberay)",
            )
        if not _builds_here(options.provider):
            raise UsageError(
                f"--kuberay-source builds the operator image on this machine, which provider "
                f"{options.provider} cannot load",
                "use the local provider, or install a released KubeRay (kuberay.install: helm)",
            )
        if self.source is None:
            from conformance.install.source_install import SourceInstall  # noqa: PLC0415

            self.source = SourceInstall(
                path=options.kuberay_source,
                namespace=options.profile.kuberay.namespace,
                overrides=dict(options.profile.kuberay.feature_gates),
                cache=self.provider.cache,  # type: ignore[attr-defined]
                explicit_version=options.kuberay_version or "",
            )
            self.source.check()

    def prepare(self, claim: Callable[[client.ApiClient], None] = lambda api: None) -> None:
        """Bring everything up; `claim(api)` runs once the cluster answers, before anything is installed
        (the cluster lock: a run that found the cluster running has taken it before calling this)."""
        self.check_input()
        existed = self.provider.status().exists
        self.cluster = self.provider.up()
        self._made_cluster = not existed
        self.api = api_client(self.cluster.target)
        claim(self.api)
        self._install_kuberay()
        self._install_gateway()
        self._provide_images()
        facts = self.operator
        self.capabilities = capabilities.detect(
            self.api,
            kuberay_version=getattr(facts, "version", ""),
            feature_gates=dict(getattr(facts, "effective_feature_gates", {})),
            simulated_gpus=bool(self.cluster.facts.get("simulated_gpus")),
            gpu_resource=self.options.profile.gpu.resource,
            fault_nodes=self._fault_nodes(),
        )

    def _fault_nodes(self) -> tuple[str, ...]:
        """The worker nodes node-fault checks may take away: only a provider that can (NodeFaults)."""
        return tuple(self.provider.worker_nodes()) if isinstance(self.provider, NodeFaults) else ()

    def reachable_api(self) -> client.ApiClient | None:
        """A client for the cluster if it exists and answers, found without changing anything."""
        if not self.provider.status().exists:
            return None
        cluster = getattr(self.provider, "cluster", None)
        # Providers without a read-only `cluster()` (existing) check reachability in `up`, changing nothing.
        made = cluster() if cluster is not None else self.provider.up()
        try:
            api = api_client(made.target)
            client.VersionApi(api).get_code(_request_timeout=10)
        except Exception:  # noqa: BLE001 - not answering: `prepare` brings it up (or says why not)
            return None
        return api

    def snapshot(self) -> dict[str, Any]:
        """What another process of this run needs to `attach` to the prepared environment."""
        return {
            "cluster": self.cluster,
            "capabilities": self.capabilities,
            "operator": self.operator,
            "operator_spec": self.operator_spec,
            "promised": self.promised,
            "source": self.source,  # --kuberay-source: the operator-upgrade check installs it again
            "notes": list(self.notes),
        }

    def attach(self, snapshot: dict[str, Any]) -> None:
        """Use an environment another process prepared; installs nothing, and `teardown` is not ours."""
        self.cluster = snapshot["cluster"]
        self.capabilities = snapshot["capabilities"]
        self.operator = snapshot["operator"]
        self.operator_spec = snapshot["operator_spec"]
        self.promised = snapshot["promised"]
        self.source = snapshot["source"]
        self.notes = list(snapshot["notes"])
        assert self.cluster is not None
        self.api = api_client(self.cluster.target)

    def _install_kuberay(self) -> None:
        from conformance.install import kuberay, kuberay_chart  # noqa: PLC0415 - the local build machinery

        settings = self.options.profile.kuberay
        assert self.api is not None and self.cluster is not None
        target = self.cluster.target
        if self.options.kuberay_install == "source":
            spec, self.promised = self.source.install(
                self.provider, self.api, target, self.options.timeouts.ready
            )
            self.operator_spec = spec
            prov = self.source.provenance
            self.operator = kuberay.with_version(
                kuberay.observed_operator(self.api, settings.namespace),
                prov.version,
                self.promised.binary_gates,
            )
            self.kuberay_origin = prov.note()
            self.notes.append(self.kuberay_origin)
            return
        local = settings.install == "local-build"
        version = self._buildable_version(settings.version) if local else settings.version
        if settings.install == "existing":
            version, gates = settings.version, dict(settings.feature_gates)
        else:
            gates = {**kuberay.chart_feature_gates(version), **settings.feature_gates}
        spec = kuberay.OperatorSpec(
            version=version,
            namespace=settings.namespace,
            feature_gates=gates,
            env=dict(settings.env),
            extra_args=settings.extra_args,
        )
        self.operator_spec = spec
        if settings.install == "existing":
            self.operator_spec = _spec_of_running(self.api, settings.namespace)
            self.operator = kuberay.observed_operator(self.api, settings.namespace)
            try:  # a version whose chart defaults the harness has recorded, and Go to read its CRDs
                self.promised = kuberay_chart.promised_by_tables(self.operator_spec, settings.feature_gates)  # type: ignore[arg-type]
            except HarnessError as exc:
                self.notes.append(f"the operator's chart defaults and CRDs cannot be known here: {exc}")
            return
        ready = self.options.timeouts.ready
        if local:
            kuberay_chart.clear_other_installs(
                target, self.api, settings.namespace, kuberay_chart.LOCAL_BUILD, ready
            )
            kuberay.install_local(self.provider, self.api, spec)  # type: ignore[arg-type]
            self.promised = kuberay_chart.promised_by_tables(spec, settings.feature_gates)
            self.kuberay_origin = (
                f"KubeRay {version} built from its Go module and installed from the harness's hand-made "
                "imitation of its Helm chart (manifests/kuberay/operator.yaml): a module has no chart; "
                "--kuberay-source DIR installs a checkout with its own"
            )
        else:
            source = kuberay_chart.ChartSource.repository(version)
            kuberay_chart.install_chart(target, self.api, spec, source, ready)
            self.promised = kuberay_chart.promised_by_repository(source, settings.feature_gates, version)
            self.kuberay_origin = f"KubeRay {version} installed with Helm from chart {source.describe()}"
        self.notes.append(self.kuberay_origin)
        kuberay.wait_ready(self.api, spec, ready)
        self.operator = kuberay.observed_operator(self.api, settings.namespace)

    def report_fields(self) -> dict[str, Any]:
        """How KubeRay was installed and what its files promise, for summary.json's environment."""
        fields: dict[str, Any] = {"kuberay_install": self.options.kuberay_install}
        if self.kuberay_origin:
            fields["kuberay_origin"] = self.kuberay_origin
        if self.source is not None and self.source.provenance is not None:
            fields["kuberay_source"] = self.source.provenance.as_json()
        if self.promised is not None:
            fields["kuberay_promised"] = self.promised.as_json()
        return fields

    def _install_gateway(self) -> None:
        profile = self.options.profile
        assert self.api is not None and self.cluster is not None
        if profile.gateway_install in ("istio", "envoy-gateway"):
            from conformance.install import gateway_charts  # noqa: PLC0415

            # Recorded before anything is made: teardown undoes a half-done install too.
            self.gateway = gateway_charts.begin(
                profile.gateway_install, profile.gateway_class, self.cluster.target
            )
            gateway_charts.install(self.api, self.gateway, self.options.timeouts.ready)
            self.notes += [self.gateway.note(), *self.gateway.notes]
            return
        if profile.gateway_install != "local-build":
            return  # the cluster's own implementation serves the profile's GatewayClass
        from conformance.install import gateway  # noqa: PLC0415 - pulls in the local build machinery

        facts = gateway.install_local(
            self.provider,  # type: ignore[arg-type]
            self.api,
            profile.gateway_class,
            self.options.timeouts.ready,
        )
        self.notes.append(gateway.note(facts))

    def _buildable_version(self, requested: str) -> str:
        """The requested KubeRay, or the newest older release the Go proxy serves source for."""
        from conformance.build import gobuild  # noqa: PLC0415
        from conformance.install import kuberay  # noqa: PLC0415

        cache = self.provider.cache  # type: ignore[attr-defined]
        resolved = gobuild.resolve(kuberay.operator_tool(requested), cache)
        if resolved.version != requested:
            self.notes.append(
                f"KubeRay {requested} was asked for, but the Go module proxy serves no source for it; "
                f"the newest served release {resolved.version} was built and is what these results describe"
            )
        return resolved.version

    def _provide_images(self) -> None:
        if self.options.kuberay_install not in ("local-build", "source"):
            return  # public images, pulled by the cluster
        from conformance.build import ray_images  # noqa: PLC0415

        cache = getattr(self.provider, "cache", None)
        if cache is None:
            raise ProvisioningError("the provider has no image cache", "use the local provider")
        for version in self.options.versions_to_test:
            archive = ray_images.ray_image(cache, version)
            expected = self.options.profile.ray_image(version)
            if archive.ref != expected:
                raise UsageError(
                    f"profile {self.options.profile.name} names Ray image {expected}, "
                    f"but the local build makes {archive.ref}",
                    "set images.ray in the profile to localhost/kuberay-conformance/ray:{ray_version}",
                )
            self.provider.load_image(archive)  # type: ignore[attr-defined]
        redis = ray_images.redis_image(cache)
        if redis.ref != self.options.profile.redis_image:
            raise UsageError(
                f"profile {self.options.profile.name} names Redis image {self.options.profile.redis_image}, "
                f"but the local build makes {redis.ref}",
                f"set images.redis in the profile to {redis.ref}",
            )
        self.provider.load_image(redis)  # type: ignore[attr-defined]

    def teardown(self) -> list[str]:
        if self.options.keep_cluster:
            return []
        if not self._made_cluster:
            # A cluster we only attached to keeps what it had; what this run installed goes.
            return self._uninstall_gateway()
        return self.provider.down()  # everything goes with the cluster

    def _uninstall_gateway(self) -> list[str]:
        if self.gateway is None or self.api is None:
            return []
        from conformance.install import gateway_charts  # noqa: PLC0415

        return gateway_charts.uninstall(self.api, self.gateway, self.options.timeouts.cleanup)


# A Kubernetes label value: the run id labels every namespace of the run.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run folder that cannot be written, or whose name (the run id) cannot label the run's
    namespaces, before anything is provisioned; creates nothing.

    The nearest existing folder on the way must take a file (tried with a temporary one, since
    root passes every permission check but not a read-only mount or a file in the path)."""
    if not _LABEL_VALUE.fullmatch(run_dir.name):
        raise UsageError(
            f"run directory name {run_dir.name!r} is the run id, which labels the run's namespaces, and "
            "a label value is at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit",
            "pass --run-dir with a shorter or plainer folder name",
        )
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(existing))
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise UsageError(
            f"run directory {run_dir} cannot be written ({exc.strerror}: {exc.filename or existing})",
            "pass --run-dir with a folder you may write to",
        ) from None


def _builds_here(provider: str) -> bool:
    """Images built on this machine (debootstrap, buildah: root) reach the local provider's cluster
    and, through `kind load`, a kind cluster made as root; the load generator needs none (it is
    copied into a Ray image pod)."""
    return provider == "local" or (provider == "kind" and os.geteuid() == 0)


RAY_CRDS = ("rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io")


def _require_kuberay_crds(api: client.ApiClient) -> None:
    extensions = client.ApiextensionsV1Api(api)
    served = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
    missing = [name for name in RAY_CRDS if name not in served]
    if missing:
        raise UsageError(
            f"the cluster has no KubeRay CRDs ({', '.join(missing)} missing)",
            "install KubeRay first, or use a profile whose kuberay.install is helm",
        )


def _spec_of_running(api: client.ApiClient, namespace: str) -> object:
    """An OperatorSpec describing the operator that already runs, for waits that need one."""
    from conformance.install import kuberay  # noqa: PLC0415

    facts = kuberay.observed_operator(api, namespace)
    return kuberay.OperatorSpec(
        version=facts.version or "v0.0.0",
        namespace=namespace,
        feature_gates=dict(facts.feature_gates),
        watch_namespaces=facts.watch_namespaces,
        leader_election=facts.leader_election,
    )
