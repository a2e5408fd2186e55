"""Render the YAML templates in manifests/ (Jinja2) into objects ready to apply."""

from __future__ import annotations

from typing import Any

import jinja2
import yaml

from conformance import resources

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
