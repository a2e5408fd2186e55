"""Rogues that change what KubeRay runs with, behind its back: a stale CRD, a trimmed Role, a
RayCluster patched as it appears.

The first two are what a real installation can end up with: Helm never upgrades CRDs (an operator
then runs against an older schema that prunes fields it knows), and a ClusterRole or Role edited by
hand. The third stands for an operator or tooling that builds a group's pods otherwise than its spec.
The healthy prepare that ends every fault (runner.restore) applies the CRDs and RBAC again.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .rogue import Rogue

RAY_GROUP = "ray.io"


def drop_crd_fields(rogue: Rogue, plural: str, paths: list[list[str]], probe: dict[str, Any]) -> None:
    """Remove `paths` (field names under `spec`, "*" for a list's items) from the v1 schema of the
    CRD `<plural>.ray.io`, then dry-run create `probe` until the API server prunes them from it."""
    ext = client.ApiextensionsV1Api(rogue.api)
    name = f"{plural}.{RAY_GROUP}"
    crd = ext.read_custom_resource_definition(name)
    index = next(i for i, v in enumerate(crd.spec.versions) if v.name == "v1")
    schema = rogue.api.sanitize_for_serialization(crd.spec.versions[index].schema.open_apiv3_schema)
    patch = [{"op": "remove", "path": _json_path(index, path)} for path in paths]
    patch += [op for path in paths for op in _unrequire(index, schema, path)]
    ext.patch_custom_resource_definition(name, patch, _content_type="application/json-patch+json")
    rogue.acted(f"removed {[_dotted(p) for p in paths]} from the v1 schema of CRD {name}")
    _wait_pruned(rogue, plural, paths, probe)


def _json_path(version: int, path: list[str]) -> str:
    parts = [f"/spec/versions/{version}/schema/openAPIV3Schema/properties/spec"]
    parts += ["/items" if part == "*" else f"/properties/{part}" for part in path]
    return "".join(parts)


def _unrequire(version: int, schema: dict[str, Any], path: list[str]) -> list[dict[str, Any]]:
    """The patch that takes the field at `path` out of its parent's `required` list, if listed
    there: a schema that predates a field never requires it, and a removed field still required
    would refuse every create."""
    parent = schema["properties"]["spec"]
    for part in path[:-1]:
        parent = parent["items"] if part == "*" else parent["properties"][part]
    required = parent.get("required") or []
    if path[-1] not in required:
        return []
    where = _json_path(version, path[:-1]) + "/required"
    kept = [field for field in required if field != path[-1]]
    return [{"op": "replace", "path": where, "value": kept} if kept else {"op": "remove", "path": where}]


def _dotted(path: list[str]) -> str:
    return "spec." + ".".join("[]" if p == "*" else p for p in path).replace(".[]", "[]")


def _wait_pruned(rogue: Rogue, plural: str, paths: list[list[str]], probe: dict[str, Any]) -> None:
    """The served schema follows a CRD change within moments; a dry-run create shows when."""
    namespace = rogue.operator_namespace
    for _ in range(60):
        created = rogue.custom.create_namespaced_custom_object(
            RAY_GROUP, "v1", namespace, plural, copy.deepcopy(probe), dry_run="All"
        )
        if not any(_has(created["spec"], path) for path in paths):
            rogue.acted(f"a dry-run {plural} create now loses {[_dotted(p) for p in paths]}")
            return
        if rogue.stopped:
            return
        time.sleep(0.5)  # poll-interval: the API server's view of the CRD has no watch
    raise RuntimeError(f"the API server still keeps {paths} of {plural} after the CRD change")


def _has(spec: Any, path: list[str]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        return any(_has(item, rest) for item in spec or [])
    return isinstance(spec, dict) and head in spec and _has(spec[head], rest)


def _template(name: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": name, "image": "probe"}]}}


def raycluster_spec(**worker: Any) -> dict[str, Any]:
    """A RayCluster spec the CRD accepts, with one worker group carrying `worker`'s fields."""
    group = {"groupName": "probe", "rayStartParams": {}, "template": _template("worker"), **worker}
    head = {"rayStartParams": {}, "template": _template("head")}
    return {"headGroupSpec": head, "workerGroupSpecs": [group]}


def probe(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A body to dry-run create: never stored, never seen by the operator."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": kind,
        "metadata": {"name": "krc-sensitivity-probe"},
        "spec": spec,
    }


def drop_rbac(rogue: Rogue, kind: str, name: str, resource: str, verb: str = "") -> None:
    """Take `verb` on `resource` (every verb when empty) out of the operator's ClusterRole or Role."""
    rbac = client.RbacAuthorizationV1Api(rogue.api)
    if kind == "ClusterRole":
        role = rbac.read_cluster_role(name)
    else:
        role = rbac.read_namespaced_role(name, rogue.operator_namespace)
    rules = []
    for rule in role.rules:
        if resource not in (rule.resources or []):
            rules.append(rule)
            continue
        if verb:  # the same rule without the verb for this resource
            kept = [v for v in rule.verbs if v != verb]
            rules.append(client.V1PolicyRule(api_groups=rule.api_groups, resources=[resource], verbs=kept))
        others = [r for r in rule.resources if r != resource]
        if others:
            rules.append(client.V1PolicyRule(api_groups=rule.api_groups, resources=others, verbs=rule.verbs))
    role.rules = rules
    if kind == "ClusterRole":
        rbac.replace_cluster_role(name, role)
    else:
        rbac.replace_namespaced_role(name, rogue.operator_namespace, role)
    rogue.acted(f"removed {verb or 'every verb'} on {resource} from {kind} {name}")


def set_last_schedule_time(rogue: Rogue, meta: dict[str, Any], when: str) -> bool:
    """Write a RayCronJob's status.lastScheduleTime as its controller would; False when it is gone."""
    try:
        rogue.custom.patch_namespaced_custom_object_status(
            RAY_GROUP, "v1", meta["namespace"], "raycronjobs", meta["name"],
            {"status": {"lastScheduleTime": when}}, _content_type="application/merge-patch+json",
        )  # fmt: skip
    except ApiException as exc:
        if exc.status != 404:
            raise
        return False
    return True


def annotate_each(rogue: Rogue, plural: str, key: str, value: str | None) -> None:
    """Every Ray object of `plural` in the run gets annotation `key`=`value` (None: loses it) as
    soon as it appears, until the rogue stops."""
    for obj in rogue.ray_objects(plural):
        meta = obj["metadata"]
        if (meta.get("annotations") or {}).get(key) == value or meta.get("deletionTimestamp"):
            continue
        patch = {"metadata": {"annotations": {key: value}}}
        try:
            rogue.custom.patch_namespaced_custom_object(
                RAY_GROUP, "v1", meta["namespace"], plural, meta["name"], patch
            )
        except ApiException as exc:
            if exc.status != 404:  # gone with its namespace: nothing to seed
                raise
            continue
        change = f"removed {key} from" if value is None else f"set {key}={value} on"
        rogue.acted(f"{change} {plural} {meta['namespace']}/{meta['name']}")


def json_patch(
    rogue: Rogue, plural: str, meta: dict[str, Any], ops: list[dict[str, Any]], status: bool = False
) -> bool:
    """Apply JSON Patch `ops` to a Ray object (its status with `status`); False when the object is
    gone or changed meanwhile (a failed `test` op, a conflict): the next event tries again."""
    patch = (
        rogue.custom.patch_namespaced_custom_object_status
        if status
        else rogue.custom.patch_namespaced_custom_object
    )
    try:
        patch(
            RAY_GROUP,
            "v1",
            meta["namespace"],
            plural,
            meta["name"],
            ops,
            _content_type="application/json-patch+json",
        )
    except ApiException as exc:
        if exc.status in (404, 409, 422):
            return False
        raise
    return True


GroupChange = Callable[[int, dict[str, Any]], list[dict[str, Any]]]  # (index, group) -> JSON Patch ops


def each_worker_group(rogue: Rogue, change: GroupChange, what: str) -> None:
    """Apply `change(index, group)` (JSON Patch ops, or none) to each worker group of every
    RayCluster of the run as it appears or changes."""
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        ops = [op for index, group in enumerate(groups) for op in change(index, group)]
        if ops and json_patch(rogue, "rayclusters", meta, ops):
            rogue.acted(f"{what} on {meta['namespace']}/{meta['name']}")
