"""Everything a conformance run needs before its first check, and its removal afterwards.

The provider's cluster, KubeRay installed and checked, the Ray images available, and the
capabilities detected. Any failure here is the environment's, and is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from conformance import capabilities
from conformance.errors import ProvisioningError, UsageError
from conformance.profiles import Profile
from conformance.providers import get_provider
from conformance.providers.base import Cluster, Provider
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

    def check_input(self) -> None:
        """Refuse combinations that cannot work, before anything is provisioned."""
        profile = self.options.profile
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
                api = config.new_client_from_config(str(cluster.kubeconfig), context=cluster.context)
                _require_kuberay_crds(api)
        if self.options.profile.kuberay.install == "local-build" and not _builds_here(self.options.provider):
            raise UsageError(
                f"profile {self.options.profile.name} builds KubeRay and Ray images on this machine, "
                f"which provider {self.options.provider} cannot load",
                "use a profile with kuberay.install: helm and public images (e.g. --profile kind)",
            )

    def prepare(self) -> None:
        self.check_input()
        existed = self.provider.status().exists
        self.cluster = self.provider.up()
        self._made_cluster = not existed
        self.api = config.new_client_from_config(str(self.cluster.kubeconfig), context=self.cluster.context)
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
        )

    def _install_kuberay(self) -> None:
        from conformance.install import kuberay  # noqa: PLC0415 - pulls in the local build machinery

        settings = self.options.profile.kuberay
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
        assert self.api is not None and self.cluster is not None
        if settings.install == "existing":
            self.operator_spec = _spec_of_running(self.api, settings.namespace)
            self.operator = kuberay.observed_operator(self.api, settings.namespace)
            return
        if local:
            kuberay.install_local(self.provider, self.api, spec)  # type: ignore[arg-type]
        else:
            kuberay.install_helm(self.cluster.kubeconfig, spec)
        kuberay.wait_ready(self.api, spec, self.options.timeouts.ready)
        self.operator = kuberay.observed_operator(self.api, settings.namespace)

    def _install_gateway(self) -> None:
        profile = self.options.profile
        assert self.api is not None and self.cluster is not None
        if profile.gateway_install in ("istio", "envoy-gateway"):
            from conformance.install import gateway_charts  # noqa: PLC0415

            # Recorded before anything is made: teardown undoes a half-done install too.
            self.gateway = gateway_charts.begin(
                profile.gateway_install, profile.gateway_class, self.cluster.kubeconfig
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
        from conformance.install import kuberay  # noqa: PLC0415
        from conformance.providers.local import gobuild  # noqa: PLC0415

        cache = self.provider.cache  # type: ignore[attr-defined]
        resolved = gobuild.resolve(kuberay.operator_tool(requested), cache)
        if resolved.version != requested:
            self.notes.append(
                f"KubeRay {requested} was asked for, but the Go module proxy serves no source for it; "
                f"the newest served release {resolved.version} was built and is what these results describe"
            )
        return resolved.version

    def _provide_images(self) -> None:
        if self.options.profile.kuberay.install != "local-build":
            return  # public images, pulled by the cluster
        from conformance.providers.local import images  # noqa: PLC0415

        cache = getattr(self.provider, "cache", None)
        if cache is None:
            raise ProvisioningError("the provider has no image cache", "use the local provider")
        for version in self.options.versions_to_test:
            archive = images.ray_image(cache, version)
            expected = self.options.profile.ray_image(version)
            if archive.ref != expected:
                raise UsageError(
                    f"profile {self.options.profile.name} names Ray image {expected}, "
                    f"but the local build makes {archive.ref}",
                    "set images.ray in the profile to localhost/kuberay-conformance/ray:{ray_version}",
                )
            self.provider.load_image(archive)  # type: ignore[attr-defined]
        redis = images.redis_image(cache)
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


def _builds_here(provider: str) -> bool:
    """Images and programs built on this machine (debootstrap, buildah as root) reach the cluster
    of the local provider only; kind loads the load generator's image, nothing more."""
    return provider == "local"


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
