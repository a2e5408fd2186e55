"""Render the YAML templates in manifests/ (Jinja2) into objects ready to apply."""

from __future__ import annotations

from typing import Any

import jinja2
import yaml

from conformance import resources
from conformance.profiles import POD_REQUESTS, Profile

MANIFESTS = resources.path("manifests")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(MANIFESTS)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,  # YAML, not HTML: escaping would corrupt values
)


def _gpu_limit(resources: dict[str, Any], resource: str, count: int) -> dict[str, Any]:
    """Container resources with `count` of the GPU resource added to both limits and requests."""
    limits = {**resources.get("limits", {}), resource: str(count)}
    requests = {**resources.get("requests", {}), resource: str(count)}
    return {**resources, "limits": limits, "requests": requests}


_env.filters["gpu_limit"] = _gpu_limit


def render(template: str, **values: Any) -> dict[str, Any]:
    """Render `template` (a path below manifests/) into one object."""
    text = _env.get_template(template).render(**values)
    return yaml.safe_load(text)


def render_all(template: str, **values: Any) -> list[dict[str, Any]]:
    """Render a multi-document template (an add-on: a Deployment and its Service) into its objects."""
    text = _env.get_template(template).render(**values)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def pod_resources(limits: dict[str, str]) -> dict[str, Any]:
    """Small requests so a head and two workers fit a 2-core node; Ray sizes itself by the limits."""
    return {"limits": limits, "requests": dict(POD_REQUESTS)}


def manifest_values(profile: Profile, ray_version: str) -> dict[str, Any]:
    """Values every Ray manifest template takes, from the profile; checks add their own."""
    return {
        "ray_version": ray_version,
        "image": profile.ray_image(ray_version),
        "pull_policy": profile.pull_policy,
        "head_resources": pod_resources(profile.head_resources),
        "worker_resources": pod_resources(profile.worker_resources),
        "head_num_cpus": 0,
        "workers": [],
        "autoscaling": False,
        "gpu_resource": profile.gpu.resource,
        "head_service_type": profile.head_service_type,
    }
