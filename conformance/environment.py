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
from typing import TYPE_CHECKING, Any

from kubernetes import client

from conformance import capabilities
from conformance.errors import ProvisioningError, UsageError
from conformance.kube.target import api_client
from conformance.profiles import Profile
from conformance.providers import get_provider
from conformance.providers.base import Cluster, LoadsImages, NodeFaults, Preflight, Provider, ReadsCluster
from conformance.timeouts import Timeouts

if TYPE_CHECKING:
    from conformance.install.modes import KubeRayInstall
    from conformance.install.under_test import KubeRayUnderTest


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
        from conformance.install import modes  # noqa: PLC0415 - the install machinery, when a run needs it

        # How KubeRay comes to the cluster (helm, local-build, existing, source), chosen once.
        self.install_mode: KubeRayInstall = modes.for_mode(
            options.kuberay_install,
            options.profile.kuberay,
            options.profile.name,
            options.kuberay_source,
            options.kuberay_version,
        )
        # The KubeRay under test as its install made it (versions, origin, gates, what its files promise).
        self.kuberay: KubeRayUnderTest | None = None
        self.cluster: Cluster | None = None
        self.api: client.ApiClient | None = None
        self.capabilities: capabilities.Capabilities | None = None
        self.operator_namespace = options.profile.kuberay.namespace
        self._made_cluster = False
        # Facts about this run a reader of the report must know (a fallback version, say).
        self.notes: list[str] = []
        # What the harness installed of a Helm-installed Gateway implementation (gateway_charts.Installed).
        self.gateway: Any = None
        self._input_checked = False  # check_input has passed: the CLI's call and prepare's are one

    def check_input(self) -> None:
        """Refuse combinations that cannot work, before anything is provisioned (once: a Helm render
        or a checkout's build is not done again when `prepare` follows the CLI's check)."""
        if self._input_checked:
            return
        profile = self.options.profile
        profile.check_ray_versions(self.options.versions_to_test)
        self.install_mode.check_options()
        if profile.gateway_install in ("istio", "envoy-gateway"):
            from conformance.install import gateway_charts  # noqa: PLC0415

            gateway_charts.check_usable(profile.gateway_install, self.options.provider, profile.name)
        if profile.gateway_install == "local-build" and not _builds_here(self.options.provider):
            raise UsageError(
                f"profile {profile.name} builds the Gateway implementation on this machine, "
                f"which provider {self.options.provider} cannot load",
                "set gateway.install to istio, envoy-gateway or existing (with the cluster's GatewayClass)",
            )
        if isinstance(self.provider, Preflight):
            self.provider.preflight()  # tools, credentials, region, budget: checked, nothing created
        if self.options.provider == "existing":
            cluster = self.provider.up()  # creates nothing: checks that the cluster answers
            self.install_mode.check_cluster(cluster.target)
        self._check_kuberay()
        self._input_checked = True

    def _check_kuberay(self) -> None:
        """The install mode's own refusals, and a checkout's operator build, before any cluster is touched."""
        provider = self.provider
        cache = provider.cache if isinstance(provider, LoadsImages) else None
        self.install_mode.check_input(self.options.provider, _builds_here(self.options.provider), cache)

    def prepare(self, claim: Callable[[client.ApiClient], None] = lambda api: None) -> None:
        """Bring everything up; `claim(api)` runs once the cluster answers, before anything is installed
        (the cluster lock: a run that found the cluster running has taken it before calling this)."""
        self.check_input()
        existed = self.provider.status().exists
        self.cluster = self.provider.up()
        self._made_cluster = not existed
        self.api = api_client(self.cluster.target)
        claim(self.api)
        kuberay = self._install_kuberay()
        self._install_gateway()
        self._provide_images()
        self.capabilities = capabilities.detect(
            self.api,
            kuberay_version=kuberay.observed,
            feature_gates=dict(kuberay.gates),
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
        # Providers without a read-only `cluster()` (existing) check reachability in `up`, changing nothing.
        made = self.provider.cluster() if isinstance(self.provider, ReadsCluster) else self.provider.up()
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
            "kuberay": self.kuberay,
            # The install as checked (--kuberay-source: the operator-upgrade check installs it again).
            "install_mode": self.install_mode,
            "notes": list(self.notes),
        }

    def attach(self, snapshot: dict[str, Any]) -> None:
        """Use an environment another process prepared; installs nothing, and `teardown` is not ours."""
        self.cluster = snapshot["cluster"]
        self.capabilities = snapshot["capabilities"]
        self.kuberay = snapshot["kuberay"]
        self.install_mode = snapshot["install_mode"]
        self.notes = list(snapshot["notes"])
        assert self.cluster is not None
        self.api = api_client(self.cluster.target)

    def under_test(self) -> KubeRayUnderTest:
        """The KubeRay under test: as installed once prepared (or attached to), else as the install
        will make it (the checks' collection, `list`)."""
        return self.kuberay if self.kuberay is not None else self.install_mode.planned()

    def _install_kuberay(self) -> KubeRayUnderTest:
        assert self.api is not None and self.cluster is not None
        self.kuberay = self.install_mode.install(
            self.provider,  # type: ignore[arg-type] - loads images only where the mode builds them
            self.api,
            self.cluster.target,
            self.options.timeouts.ready,
        )
        self.notes += [note for note in self.kuberay.notes if note]
        return self.kuberay

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

    def _provide_images(self) -> None:
        if not self.install_mode.builds_images:
            return  # public images, pulled by the cluster
        from conformance.build import ray_images  # noqa: PLC0415

        if not isinstance(self.provider, LoadsImages):
            raise ProvisioningError("the provider has no image cache", "use the local provider")
        cache = self.provider.cache
        for version in self.options.versions_to_test:
            archive = ray_images.ray_image(cache, version)
            expected = self.options.profile.ray_image(version)
            if archive.ref != expected:
                raise UsageError(
                    f"profile {self.options.profile.name} names Ray image {expected}, "
                    f"but the local build makes {archive.ref}",
                    "set images.ray in the profile to localhost/kuberay-conformance/ray:{ray_version}",
                )
            self.provider.load_image(archive)
        redis = ray_images.redis_image(cache)
        if redis.ref != self.options.profile.redis_image:
            raise UsageError(
                f"profile {self.options.profile.name} names Redis image {self.options.profile.redis_image}, "
                f"but the local build makes {redis.ref}",
                f"set images.redis in the profile to {redis.ref}",
            )
        self.provider.load_image(redis)

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
