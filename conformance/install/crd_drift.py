"""Do the Ray CRDs the API server serves match the operator version under test? (pure)

Helm installs a chart's crds/ once and never upgrades them, so after `helm upgrade` the
operator can run against CRDs of an older version: fields it writes are pruned, fields users
set are rejected. The comparison is of each CRD's versions and their openAPIV3Schema.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def schemas(crd: Mapping[str, Any]) -> dict[str, Any]:
    """version name -> openAPIV3Schema, for the versions a CRD serves."""
    return {
        v["name"]: (v.get("schema") or {}).get("openAPIV3Schema", {})
        for v in crd.get("spec", {}).get("versions", [])
        if v.get("served")
    }


def first_difference(served: Any, expected: Any, path: str = "") -> str:
    """The first JSON path where two schemas differ, "" when they are equal."""
    if isinstance(served, dict) and isinstance(expected, dict):
        for key in sorted(set(served) | set(expected)):
            if key not in served:
                return f"{path}.{key} (missing from the served CRD)"
            if key not in expected:
                return f"{path}.{key} (not in the operator's CRD)"
            found = first_difference(served[key], expected[key], f"{path}.{key}")
            if found:
                return found
        return ""
    return "" if served == expected else path or "."


def drift(served: Mapping[str, Mapping[str, Any]], expected: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """CRD name -> what differs, for every expected CRD that the cluster serves differently."""
    found: dict[str, str] = {}
    for crd in expected:
        name = crd["metadata"]["name"]
        if name not in served:
            found[name] = "not installed"
            continue
        have, want = schemas(served[name]), schemas(crd)
        if set(have) != set(want):
            found[name] = f"served versions {sorted(have)}, the operator's {sorted(want)}"
            continue
        for version in sorted(want):
            where = first_difference(have[version], want[version])
            if where:
                found[name] = f"{version} schema differs at {where}"
                break
    return found


def fix_command(version: str, kubectl_args: Sequence[str] = ()) -> str:
    """How to bring the CRDs to `version` (server-side: they are too large for client-side apply),
    on the cluster the run talked to (`KubeTarget.kubectl_args()`)."""
    target = "".join(f" {shlex.quote(arg)}" for arg in kubectl_args)
    return (
        f"kubectl{target} apply --server-side --force-conflicts "
        f'-k "github.com/ray-project/kuberay/ray-operator/config/crd?ref={version}"'
    )
