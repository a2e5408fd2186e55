"""Seeded faults of area rayservice."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from .behind_the_back import annotate_each, drop_crd_fields, drop_rbac, probe, raycluster_spec
from .faults import Fault
from .faults_autoscaling import autoscaler_role_without_raycluster_patch
from .rogue import Rogue, before_checks, side_by_side

RAYSERVICE = "test_rayservice.py::"
OPERATOR_CLUSTER_ROLE = "kuberay-operator"
READY = RAYSERVICE + "test_rayservice_becomes_ready_and_answers_through_the_gateway"
RAY_GROUP, RAY_VERSION = "ray.io", "v1"
JSON_PATCH = "application/json-patch+json"
# What KubeRay writes on the RayClusters of a RayService (controllers/ray/utils/constant.go, v1.6.2):
# the hash of the cluster spec it compares the RayService's with, to tell an in-place change from
# one that needs a new cluster, and the operator version that made or last updated the cluster.
SPEC_HASH = "ray.io/hash-without-replicas-and-workers-to-delete"
KUBERAY_VERSION = "ray.io/kuberay-version"
ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"
ORIGINATED_FROM_NAME = "ray.io/originated-from-cr-name"
INITIALIZING_TIMEOUT = "ray.io/initializing-timeout"


def made_for_a_rayservice(cluster: dict[str, Any]) -> bool:
    return (cluster["metadata"].get("labels") or {}).get(ORIGINATED_FROM_CRD) == "RayService"


@before_checks
def clusterrole_without_rayservice_status(rogue: Rogue) -> None:
    """The operator's ClusterRole edited to lose rayservices/status: it reconciles, but can never
    say so, so no RayService is ever reported Ready."""
    drop_rbac(rogue, "ClusterRole", OPERATOR_CLUSTER_ROLE, "rayservices/status")


@before_checks
def stale_crd_without_upgrade_strategy(rogue: Rogue) -> None:
    """A RayService CRD that predates `upgradeStrategy` (Helm never upgrades CRDs): the API server
    drops the whole strategy, so an incremental upgrade KubeRay could not carry out (no
    gatewayClassName, no autoscaler) is never validated: it becomes a plain RayService and gets a
    RayCluster instead of ValidationFailed."""
    spec = {"upgradeStrategy": {"type": "NewCluster"}, "rayClusterConfig": raycluster_spec()}
    drop_crd_fields(rogue, "rayservices", [["upgradeStrategy"]], probe("RayService", spec))


def stale_spec_hash_on_changes_that_keep_the_cluster(rogue: Rogue) -> None:
    """The cluster-spec hash KubeRay keeps on a RayService's RayCluster stops matching after a
    change that must keep that cluster: a serve-config-only change, or an operator upgrade (the
    new operator has just rewritten the cluster's version annotation in place). KubeRay compares
    the RayService's cluster spec with that hash, finds them different and builds a new RayCluster
    (a NewCluster upgrade), as an operator whose hash covers more than the cluster spec, or hashes
    differently from its predecessor, would."""
    side_by_side(rogue, _stale_hash_on_serve_config_change, _stale_hash_on_operator_upgrade)


def _stale_hash_on_serve_config_change(rogue: Rogue) -> None:
    first: dict[str, str] = {}
    done: set[str] = set()
    for svc in rogue.ray_objects("rayservices"):
        meta = svc["metadata"]
        config = (svc.get("spec") or {}).get("serveConfigV2", "")
        if first.setdefault(meta["uid"], config) == config or meta["uid"] in done:
            continue
        active = ((svc.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName", "")
        why = f"RayService {meta['namespace']}/{meta['name']}'s serveConfigV2 changed"
        if active and _make_hash_stale(rogue, meta["namespace"], active, why):
            done.add(meta["uid"])


def _stale_hash_on_operator_upgrade(rogue: Rogue) -> None:
    first: dict[str, str] = {}
    done: set[str] = set()
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        version = (meta.get("annotations") or {}).get(KUBERAY_VERSION, "")
        if not made_for_a_rayservice(cluster) or meta["uid"] in done:
            continue
        if first.setdefault(meta["uid"], version) == version:
            continue
        why = f"its {KUBERAY_VERSION} went {first[meta['uid']] or 'unset'} -> {version}"
        if _make_hash_stale(rogue, meta["namespace"], meta["name"], why):
            done.add(meta["uid"])


def _make_hash_stale(rogue: Rogue, namespace: str, cluster: str, why: str) -> bool:
    """Give RayCluster `cluster` a spec hash no RayService spec has; False when it is gone."""
    try:
        current = rogue.custom.get_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, "rayclusters", cluster
        )
        stale = ((current["metadata"].get("annotations") or {}).get(SPEC_HASH, "") + "-stale").lstrip("-")
        patch = {"metadata": {"annotations": {SPEC_HASH: stale}}}
        rogue.custom.patch_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, "rayclusters", cluster, patch
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    rogue.acted(f"set {SPEC_HASH}={stale} on RayCluster {namespace}/{cluster}: {why}")
    return True


def clusters_for_rayservices_whatever_their_name(rogue: Rogue) -> None:
    """Every RayService of the run gets a RayCluster labelled as KubeRay labels its own, as soon as
    it appears, as an operator that reconciles a RayService before (or without) validating its name
    would make one. Suspended, so it starts no pods."""
    made: set[str] = set()
    for svc in rogue.ray_objects("rayservices"):
        meta = svc["metadata"]
        if meta["uid"] in made or meta.get("deletionTimestamp"):
            continue
        name = f"{meta['name'][:47]}-rogue"  # at most 53 characters: the RayCluster itself is valid
        body = {
            "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
            "kind": "RayCluster",
            "metadata": {
                "name": name,
                "labels": {ORIGINATED_FROM_CRD: "RayService", ORIGINATED_FROM_NAME: meta["name"]},
            },
            "spec": {**svc["spec"]["rayClusterConfig"], "suspend": True},
        }
        try:
            rogue.custom.create_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, meta["namespace"], "rayclusters", body
            )
        except ApiException as exc:
            if exc.status in (403, 404, 409):  # its namespace is going or gone, or it has one already
                continue
            raise
        made.add(meta["uid"])
        rogue.acted(f"made RayCluster {meta['namespace']}/{name} for RayService {meta['name']}")


def initializing_timeouts_removed(rogue: Rogue) -> None:
    """Every RayService of the run loses its ray.io/initializing-timeout annotation as soon as it
    appears, as an operator that ignores the annotation would: a RayService that can never start
    stays Initializing for ever."""
    annotate_each(rogue, "rayservices", INITIALIZING_TIMEOUT, None)


SERVE_LABEL = "ray.io/serve"  # what the serve Service selects, set by KubeRay once a proxy is healthy


def replacement_heads_kept_out_of_the_serve_service(rogue: Rogue) -> None:
    """A head pod that replaces an earlier head of the same RayCluster is taken out of the serve
    Service (ray.io/serve=false) each time KubeRay puts it in, as an operator that never labels a
    re-created head would: the RayService's endpoints stay (almost always) empty after a head loss."""
    first: dict[str, str] = {}
    for event in rogue.events(rogue.core.list_pod_for_all_namespaces, label_selector="ray.io/node-type=head"):
        pod = event["object"]
        labels = pod.metadata.labels or {}
        cluster = f"{pod.metadata.namespace}/{labels.get('ray.io/cluster', '')}"
        if event["type"] == "DELETED" or first.setdefault(cluster, pod.metadata.uid) == pod.metadata.uid:
            continue
        if labels.get(SERVE_LABEL) != "true" or not rogue.in_run(pod):
            continue
        try:
            patch = {"metadata": {"labels": {SERVE_LABEL: "false"}}}
            rogue.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        rogue.acted(
            f"set {SERVE_LABEL}=false on the replacement head {pod.metadata.namespace}/{pod.metadata.name}"
        )


@before_checks
def stale_crd_without_gcs_fault_tolerance(rogue: Rogue) -> None:
    """A RayService CRD that predates gcsFaultToleranceOptions (Helm never upgrades CRDs): the API
    server drops the Redis address from the RayService's cluster spec, so KubeRay makes a cluster
    without GCS fault tolerance and every app still starts; only a GCS restart shows it."""
    cluster = {**raycluster_spec(), "gcsFaultToleranceOptions": {"redisAddress": "redis:6379"}}
    spec = {"rayClusterConfig": cluster}
    drop_crd_fields(
        rogue, "rayservices", [["rayClusterConfig", "gcsFaultToleranceOptions"]], probe("RayService", spec)
    )


HEAD_LOSS = "test_rayservice_head_loss.py::"
GCS_RESTART = HEAD_LOSS + (
    "test_gcs_server_killed_on_a_fault_tolerant_rayservice_restarts_the_head_in_place_and_keeps_serving"
)
SERVE_AUTOSCALING = "test_rayservice_autoscaling.py::" + (
    "test_a_burst_scales_serve_replicas_and_workers_up_then_both_back_to_steady_state"
)

FAULTS = [
    Fault(
        name="rayservice-status-forbidden",
        area="rayservice",
        misbehaviour="the operator cannot write RayService status, so none is ever Ready",
        rogue=clusterrole_without_rayservice_status,
        catches=(READY,),
        run_args=("--timeout", "ready=120"),  # Ready takes about 26 s here
        evidence="Ready",
    ),
    Fault(
        name="rayservice-cluster-hash-goes-stale",
        area="rayservice",
        misbehaviour="a serve-config-only change, or an operator upgrade, makes KubeRay build a new "
        "RayCluster for the RayService (its cluster-spec hash no longer matches)",
        rogue=stale_spec_hash_on_changes_that_keep_the_cluster,
        catches=(RAYSERVICE + "test_serve_config_change_is_applied_in_place_without_failed_requests",),
        evidence="serve-config-only change",
    ),
    Fault(
        name="invalid-rayservice-name-gets-a-cluster",
        area="rayservice",
        misbehaviour="a RayService whose name KubeRay cannot derive valid object names from gets a "
        "RayCluster all the same",
        rogue=clusters_for_rayservices_whatever_their_name,
        catches=(RAYSERVICE + "test_rayservice_with_an_invalid_name_is_refused_and_makes_nothing",),
        evidence="got a RayCluster",
    ),
    Fault(
        name="initializing-timeout-ignored",
        area="rayservice",
        misbehaviour="the ray.io/initializing-timeout annotation is ignored: a RayService that can never "
        "start stays Initializing for ever",
        rogue=initializing_timeouts_removed,
        catches=(
            RAYSERVICE + "test_initializing_timeout_fails_a_rayservice_that_never_becomes_ready_for_good",
        ),
        evidence="initializing timeout",
    ),
    Fault(
        name="incremental-upgrade-dropped-by-a-stale-crd",
        area="rayservice",
        misbehaviour="an incremental upgrade KubeRay cannot carry out is accepted as a plain RayService "
        "and gets a RayCluster, not ValidationFailed",
        rogue=stale_crd_without_upgrade_strategy,
        catches=(RAYSERVICE + "test_invalid_incremental_upgrade_is_rejected",),
        bystanders=(READY,),
        evidence="ValidationFailed",
    ),
    Fault(
        name="replacement-head-never-serves",
        area="rayservice",
        misbehaviour="a head re-created after a head loss is never put behind the serve Service",
        rogue=replacement_heads_kept_out_of_the_serve_service,
        on_checkout=True,  # where the check was seen passing (1.7.0)
        catches=(
            HEAD_LOSS
            + "test_head_lost_while_serving_comes_back_on_the_same_cluster_within_the_outage_budget",
        ),
        evidence="new head",
    ),
    Fault(
        name="rayservice-gcs-ft-dropped-by-a-stale-crd",
        area="rayservice",
        misbehaviour="a RayService's cluster made without the GCS fault tolerance it asks for: a GCS "
        "restart drops the workers and the app",
        rogue=stale_crd_without_gcs_fault_tolerance,
        on_checkout=True,  # where the check was seen passing (1.7.0)
        catches=(GCS_RESTART,),
        evidence="did not outlive the GCS restart",
    ),
    Fault(
        name="serve-replicas-without-workers",
        area="rayservice",
        misbehaviour="the autoscaler of a RayService's cluster cannot patch it: Serve asks for replicas "
        "under a burst and no worker is ever added for them",
        rogue=autoscaler_role_without_raycluster_patch,
        on_checkout=True,  # where the check was seen passing (1.7.0)
        catches=(SERVE_AUTOSCALING,),
        run_args=("--timeout", "scale=120"),  # a healthy scale-up under the burst takes about a minute here
        evidence="replicas on 3 workers",
    ),
]
