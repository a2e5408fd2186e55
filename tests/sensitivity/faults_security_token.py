"""Seeded faults of area security: token authentication past the head (test_security_token_auth.py)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from .behind_the_back import drop_crd_fields, json_patch, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

TOKEN_AUTH = "test_security_token_auth.py::"
WORKERS = TOKEN_AUTH + "test_workers_take_the_token_from_the_heads_secret_and_join_the_cluster"
RAYJOB = TOKEN_AUTH + "test_rayjob_with_token_auth_completes_in_each_submission_mode"
RAYSERVICE = TOKEN_AUTH + "test_rayservice_with_token_auth_serves_without_the_token_and_guards_its_dashboard"
NAMED_SECRET = TOKEN_AUTH + "test_token_auth_uses_the_secret_named_in_auth_options"
MODES = ("K8sJobMode", "HTTPMode", "SidecarMode")

COPY_SUFFIX = "-copy"
TOKEN_KEY = "auth_token"
SEED_TIMEOUT_S = 120  # how long the rogue follows one cluster (its Secret, then its worker pods)


def _token_secret_of(container: Any) -> str:
    for var in container.env or []:
        if var.name == "RAY_AUTH_TOKEN" and var.value_from and var.value_from.secret_key_ref:
            return var.value_from.secret_key_ref.name
    return ""


def _copy_of_the_token_secret(rogue: Rogue, namespace: str, cluster: str) -> str:
    """A second Secret holding the same data as the one KubeRay made for `cluster` (copied as
    stored, never decoded); its name, or "" if KubeRay's never appeared."""
    deadline = time.monotonic() + SEED_TIMEOUT_S
    while not rogue.stopped and time.monotonic() < deadline:
        try:
            made = rogue.core.read_namespaced_secret(cluster, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            time.sleep(0.5)  # poll-interval: waiting for KubeRay's Secret to appear
            continue
        copy = cluster + COPY_SUFFIX
        try:
            rogue.core.create_namespaced_secret(
                namespace, {"metadata": {"name": copy}, "type": "Opaque", "data": dict(made.data or {})}
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        return copy
    return ""


def _replace_workers_not_on(rogue: Rogue, namespace: str, cluster: str, secret: str) -> None:
    """Delete the cluster's worker pods whose Ray container takes its token from another Secret than
    `secret`, until KubeRay has made them again from the changed template."""
    selector = f"ray.io/cluster={cluster},ray.io/node-type=worker"
    deadline = time.monotonic() + SEED_TIMEOUT_S
    while not rogue.stopped and time.monotonic() < deadline:
        pods = rogue.core.list_namespaced_pod(namespace, label_selector=selector).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        stale = [p for p in live if _token_secret_of(p.spec.containers[0]) != secret]
        for pod in stale:
            try:
                rogue.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            rogue.acted(f"deleted worker {namespace}/{pod.metadata.name}, made before its template changed")
        if live and not stale:
            return
        time.sleep(0.5)  # poll-interval: KubeRay makes the worker again from its template


def workers_take_the_token_from_another_secret(rogue: Rogue) -> None:
    """Worker pods of a token-authenticated RayCluster get RAY_AUTH_TOKEN from another Secret than
    the head's: a copy holding the same token, so the workers still join and only where they take
    the token from is wrong. Seeded through the worker template (KubeRay keeps a RAY_AUTH_TOKEN the
    template already sets), then the workers made before the change are deleted."""
    seeded: set[str] = set()
    for cluster in rogue.ray_objects("rayclusters"):
        meta, spec = cluster["metadata"], cluster.get("spec", {})
        auth = spec.get("authOptions") or {}
        groups = spec.get("workerGroupSpecs") or []
        if meta["uid"] in seeded or meta.get("deletionTimestamp") or not groups:
            continue
        if auth.get("mode") != "token" or auth.get("secretName"):
            continue
        seeded.add(meta["uid"])
        namespace, name = meta["namespace"], meta["name"]
        copy = _copy_of_the_token_secret(rogue, namespace, name)
        if not copy:
            continue
        env = [{"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": copy, "key": TOKEN_KEY}}}]
        ops = [
            {
                "op": "add",
                "path": f"/spec/workerGroupSpecs/{index}/template/spec/containers/0/env",
                "value": env,
            }
            for index in range(len(groups))
        ]
        if not json_patch(rogue, "rayclusters", meta, ops):
            continue
        rogue.acted(f"gave the workers of RayCluster {namespace}/{name} the token from Secret {copy}")
        _replace_workers_not_on(rogue, namespace, name, copy)


@before_checks
def stale_crds_without_auth_options_for_rayjob_and_rayservice(rogue: Rogue) -> None:
    """RayJob and RayService CRDs that predate authOptions (Helm never upgrades CRDs) beside a
    current RayCluster CRD: the API server drops the cluster spec's authOptions of a RayJob or a
    RayService, so KubeRay makes their clusters without token authentication, and every job and
    app still works."""
    cluster = {**raycluster_spec(), "authOptions": {"mode": "token"}}
    job = {"entrypoint": "python -c pass", "rayClusterSpec": cluster}
    drop_crd_fields(rogue, "rayjobs", [["rayClusterSpec", "authOptions"]], probe("RayJob", job))
    service = {"rayClusterConfig": cluster}
    drop_crd_fields(rogue, "rayservices", [["rayClusterConfig", "authOptions"]], probe("RayService", service))


@before_checks
def stale_crd_without_auth_secret_name(rogue: Rogue) -> None:
    """A RayCluster CRD from before `authOptions.secretName`: the API server drops the Secret the user
    names, so KubeRay makes a Secret of its own and gives Ray its token instead of the user's."""
    spec = {**raycluster_spec(), "authOptions": {"mode": "token", "secretName": "krc-probe"}}
    drop_crd_fields(rogue, "rayclusters", [["authOptions", "secretName"]], probe("RayCluster", spec))


# The sensitivity runner seeds, runs and restores under no lease of its own: waiting for the cluster
# lease keeps a fault's run from refusing to start while another run holds the shared cluster.
WAIT_FOR_LOCK = ("--wait-for-lock",)

FAULTS = [
    Fault(
        name="worker-token-from-another-secret",
        area="security",
        misbehaviour="the worker pods of a token-authenticated RayCluster take RAY_AUTH_TOKEN from another "
        "Secret than the head's (a copy with the same token: the workers still join)",
        rogue=workers_take_the_token_from_another_secret,
        catches=(WORKERS,),
        bystanders=(NAMED_SECRET,),
        run_args=WAIT_FOR_LOCK,
        evidence="the head from Secret",
    ),
    Fault(
        name="rayjob-and-rayservice-token-auth-dropped-by-stale-crds",
        area="security",
        misbehaviour="a RayJob's or RayService's cluster asking for token authentication is made without "
        "it: its job API and dashboard answer without a token while the job completes and the app serves",
        rogue=stale_crds_without_auth_options_for_rayjob_and_rayservice,
        catches=(*(f"{RAYJOB}[{mode}]" for mode in MODES), RAYSERVICE),
        bystanders=(WORKERS,),
        run_args=WAIT_FOR_LOCK,
        evidence="without a token (not 401)",
    ),
    Fault(
        name="auth-secret-name-dropped-by-a-stale-crd",
        area="security",
        misbehaviour="a RayCluster naming its token Secret in authOptions.secretName gets a Secret made by "
        "KubeRay instead, and Ray enforces that Secret's token rather than the user's",
        rogue=stale_crd_without_auth_secret_name,
        catches=(NAMED_SECRET,),
        bystanders=(WORKERS,),
        run_args=WAIT_FOR_LOCK,
        evidence="a Secret of its own",
    ),
]
