"""Profiles: YAML files naming images, resources, timeouts, thresholds, the gateway class and GPUs.

A profile is found by name among the bundled ones (this folder, shipped in the wheel) or given as
a path. The file is checked against the typed schema in `schema.py` when it is loaded, every
problem at once, so a bad profile is a usage error before anything is provisioned.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from conformance import resources
from conformance.errors import UsageError
from conformance.profiles import schema
from conformance.profiles.problems import Loader, Problem, ProfileError, explain, where
from conformance.profiles.schema import Thresholds
from conformance.timeouts import Timeouts

BUNDLED = resources.path("profiles")
HEAD_SERVICE_TYPES = schema.HeadServiceType.__args__
GATEWAY_INSTALLS = schema.GatewayInstall.__args__

__all__ = ["BUNDLED", "GATEWAY_INSTALLS", "HEAD_SERVICE_TYPES", "Profile", "ProfileError", "Thresholds"]


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


# What every Ray pod of the suites requests, whatever its limits (the profile's `resources`): small,
# so a head and two workers fit a 2-core node. The scheduler reserves this much per pod.
POD_REQUESTS = {"cpu": "100m", "memory": "512Mi"}


@dataclass(frozen=True)
class GpuSettings:
    resource: str
    count: int
    simulated: bool


# An image reference as container runtimes parse it: [host[:port]/]path[:tag][@digest].
_IMAGE_REF = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


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
    thresholds: Thresholds
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
    # The local provider's worker nodes by group (`local.nodes`): {"cpu": 1, "gpu": 1}.
    local_nodes: dict[str, int] = field(default_factory=dict)

    @property
    def exposes_head(self) -> bool:
        return self.head_service_type != "ClusterIP"

    def ray_image(self, ray_version: str) -> str:
        return self.ray_image_template.format(ray_version=ray_version)

    def check_ray_versions(self, versions: tuple[str, ...]) -> None:
        """Refuse a Ray version the image template cannot turn into an image reference."""
        for version in versions:
            image = self.ray_image(version)
            if not _IMAGE_REF.match(image):
                raise UsageError(
                    f"Ray version {version!r} makes the image {image!r} from images.ray of profile "
                    f"{self.name}, which is not a valid image reference",
                    'give a Ray version such as 2.58.0 (letters, digits, "." and "-" only)',
                )


def available() -> list[str]:
    return sorted(p.stem for p in BUNDLED.glob("*.yaml"))


def load(name_or_path: str) -> Profile:
    path = Path(name_or_path)
    if not path.suffix:
        path = BUNDLED / f"{name_or_path}.yaml"
    if not path.is_file():
        raise UsageError(
            f"unknown profile {name_or_path!r}",
            f"use one of: {', '.join(available())}, or a path to a profile YAML file",
        )
    return parse(path.read_text(), path)


def parse(text: str, source: Path) -> Profile:
    """A Profile from the text of a profile file, or a ProfileError listing every problem."""
    try:
        data = yaml.load(text, Loader=Loader)  # a SafeLoader, with YAML 1.2's booleans
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"profile {source} is not valid YAML{where}", "fix the YAML syntax") from exc
    try:
        doc = schema.ProfileDocument.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, schema.ProfileDocument, source, text) from None
    _check_image_template(doc.images.ray, source, text)
    profile = _from_document(doc, source)
    profile.check_ray_versions(profile.ray_versions)
    return profile


def _check_image_template(template: str, source: Path, text: str) -> None:
    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    if fields != {"ray_version"}:
        raise _one_problem(
            source,
            text,
            ("images", "ray"),
            f"{template!r} must name the Ray version as {{ray_version}} and nothing else",
            "write e.g. rayproject/ray:{ray_version}-py312",
        )


def _one_problem(source: Path, text: str, loc: tuple[str, ...], what: str, fix: str) -> ProfileError:
    return ProfileError(source, [Problem(where(text, loc), what, fix)])


def _from_document(doc: schema.ProfileDocument, source: Path) -> Profile:
    return Profile(
        name=doc.name,
        description=doc.description,
        ray_versions=tuple(doc.ray_versions),
        ray_image_template=doc.images.ray,
        redis_image=doc.images.redis,
        pull_policy=doc.images.pull_policy,
        kuberay=KubeRaySettings(
            version=doc.kuberay.version,
            install=doc.kuberay.install,
            namespace=doc.kuberay.namespace,
            feature_gates=dict(doc.kuberay.feature_gates),
            env=dict(doc.kuberay.env),
            extra_args=tuple(doc.kuberay.extra_args),
        ),
        head_resources=dict(doc.resources.head),
        worker_resources=dict(doc.resources.worker),
        timeouts=Timeouts(**doc.timeouts.model_dump()),
        thresholds=doc.thresholds,
        gateway_class=doc.gateway.class_name,
        gpu=GpuSettings(resource=doc.gpu.resource, count=doc.gpu.count, simulated=doc.gpu.simulated),
        source=source,
        gateway_install=doc.gateway.install,
        head_service_type=doc.exposure.head_service_type,
        local_nodes=doc.local.nodes.model_dump(),
    )
