"""Profiles: YAML files naming images, resources, timeouts, thresholds, the gateway class and GPUs.

A profile is found by name among the bundled ones (this folder) or given as a path.
Every field is checked when it is loaded, so a bad profile is a usage error before
anything is provisioned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import UsageError
from conformance.timeouts import Timeouts

BUNDLED = Path(__file__).parent


@dataclass(frozen=True)
class KubeRaySettings:
    version: str
    install: str
    namespace: str
    feature_gates: dict[str, bool]
    # Environment variables and extra arguments of the operator container, as KubeRay itself reads
    # them (ENABLE_GCS_FT_REDIS_CLEANUP, --watch-namespace, ...); the sensitivity suite seeds faults so.
    env: dict[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()


HEAD_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
# How the Gateway API implementation gets there (see conformance/install/gateway*.py).
GATEWAY_INSTALLS = ("local-build", "istio", "envoy-gateway", "existing")


@dataclass(frozen=True)
class GpuSettings:
    resource: str
    count: int
    simulated: bool


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    ray_versions: tuple[str, ...]
    ray_image_template: str
    # Redis for the GCS fault-tolerance checks (external storage of the head's state).
    redis_image: str
    pull_policy: str
    kuberay: KubeRaySettings
    head_resources: dict[str, str]
    worker_resources: dict[str, str]
    timeouts: Timeouts
    thresholds: dict[str, float]
    gateway_class: str
    gpu: GpuSettings
    source: Path = field(default=Path())
    # local-build: the harness installs the Gateway API CRDs and Traefik (local provider);
    # istio / envoy-gateway: the CRDs and that implementation from its Helm chart (clusters that
    # pull public images: kind, eks, existing); existing: the cluster already serves `gateway_class`.
    gateway_install: str = "existing"
    # How the harness's Ray clusters publish their head Service (headGroupSpec.serviceType).
    # ClusterIP keeps the dashboard inside the cluster; the others expose it, and reports say so.
    head_service_type: str = "ClusterIP"

    @property
    def exposes_head(self) -> bool:
        return self.head_service_type != "ClusterIP"

    def ray_image(self, ray_version: str) -> str:
        return self.ray_image_template.format(ray_version=ray_version)


def available() -> list[str]:
    return sorted(p.stem for p in BUNDLED.glob("*.yaml"))


def load(name_or_path: str) -> Profile:
    path = Path(name_or_path)
    if not path.suffix:
        path = BUNDLED / f"{name_or_path}.yaml"
    if not path.exists():
        raise UsageError(
            f"unknown profile {name_or_path!r}",
            f"use one of: {', '.join(available())}, or a path to a profile YAML file",
        )
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"profile {path} is not valid YAML{where}", "fix the YAML syntax") from exc
    return parse(data, path)


def parse(data: Any, source: Path) -> Profile:
    reader = _Reader(data, str(source))
    kuberay = reader.section("kuberay")
    gpu = reader.section("gpu")
    images = reader.section("images")
    resources = reader.section("resources")
    gateway = reader.section("gateway")
    install = kuberay.text("install")
    if install not in ("local-build", "helm", "existing"):
        raise UsageError(
            f"profile {source}: kuberay.install is {install!r}", "use local-build, helm or existing"
        )
    pull_policy = images.text("pull_policy")
    if pull_policy not in ("Always", "IfNotPresent", "Never"):
        raise UsageError(
            f"profile {source}: images.pull_policy is {pull_policy!r}", "use IfNotPresent or Never"
        )
    gateway_install = gateway.text("install") if "install" in gateway.data else "existing"
    if gateway_install not in GATEWAY_INSTALLS:
        raise UsageError(
            f"profile {source}: gateway.install is {gateway_install!r}",
            f"use one of {', '.join(GATEWAY_INSTALLS)}",
        )
    timeouts = reader.mapping("timeouts")
    exposure = reader.section("exposure") if "exposure" in reader.data else None
    head_service_type = exposure.text("head_service_type") if exposure else "ClusterIP"
    if head_service_type not in HEAD_SERVICE_TYPES:
        raise UsageError(
            f"profile {source}: exposure.head_service_type is {head_service_type!r}",
            f"use one of {', '.join(HEAD_SERVICE_TYPES)}",
        )
    return Profile(
        name=reader.text("name"),
        description=reader.text("description"),
        ray_versions=tuple(str(v) for v in reader.sequence("ray_versions")),
        ray_image_template=images.text("ray"),
        redis_image=images.text("redis"),
        pull_policy=pull_policy,
        kuberay=KubeRaySettings(
            version=kuberay.text("version"),
            install=install,
            namespace=kuberay.text("namespace"),
            feature_gates={str(k): bool(v) for k, v in kuberay.mapping("feature_gates").items()},
            env={str(k): _env_value(v) for k, v in _optional(kuberay, "env", kuberay.mapping, {}).items()},
            extra_args=tuple(str(a) for a in _optional(kuberay, "extra_args", kuberay.sequence, ())),
        ),
        head_resources={k: str(v) for k, v in resources.mapping("head").items()},
        worker_resources={k: str(v) for k, v in resources.mapping("worker").items()},
        timeouts=Timeouts().with_overrides({k: float(v) for k, v in timeouts.items()}),
        thresholds={k: float(v) for k, v in reader.mapping("thresholds").items()},
        gateway_class=gateway.text("class_name"),
        gpu=GpuSettings(
            resource=gpu.text("resource"), count=gpu.integer("count"), simulated=gpu.flag("simulated")
        ),
        source=source,
        gateway_install=gateway_install,
        head_service_type=head_service_type,
    )


def _optional(reader: _Reader, key: str, read: Any, default: Any) -> Any:
    """`read(key)` where the profile has `key`, else `default`."""
    return read(key) if key in reader.data else default


def _env_value(value: Any) -> str:
    """YAML's true/false as the operator reads them (it compares lowercase text)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class _Reader:
    """Typed access to one YAML mapping, with errors that name the profile and the field."""

    def __init__(self, data: Any, where: str, prefix: str = "") -> None:
        if not isinstance(data, dict):
            raise UsageError(
                f"profile {where}: {prefix or 'the document'} must be a mapping", "see profiles/default.yaml"
            )
        self.data, self.where, self.prefix = data, where, prefix

    def _get(self, key: str) -> Any:
        if key not in self.data:
            raise UsageError(f"profile {self.where}: missing {self.prefix}{key}", "see profiles/default.yaml")
        return self.data[key]

    def _bad(self, key: str, expected: str) -> UsageError:
        return UsageError(
            f"profile {self.where}: {self.prefix}{key} must be {expected}, not {self.data[key]!r}",
            "see profiles/default.yaml",
        )

    def section(self, key: str) -> _Reader:
        return _Reader(self._get(key), self.where, f"{self.prefix}{key}.")

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str | int | float) or isinstance(value, bool) or str(value) == "":
            raise self._bad(key, "a non-empty string")
        return str(value)

    def integer(self, key: str) -> int:
        value = self._get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self._bad(key, "a whole number >= 0")
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key)
        if not isinstance(value, dict):
            raise self._bad(key, "a mapping")
        return value

    def sequence(self, key: str) -> list[Any]:
        value = self._get(key)
        if not isinstance(value, list) or not value:
            raise self._bad(key, "a non-empty list")
        return value
