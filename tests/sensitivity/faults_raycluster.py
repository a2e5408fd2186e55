"""Seeded faults of area raycluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .behind_the_back import RAY_GROUP, drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .faults_autoscaling import split_multi_host_replicas
from .rogue import Rogue, before_checks, side_by_side

RAYCLUSTER = "test_raycluster.py::"
LIFECYCLE = "test_raycluster_lifecycle.py::"
SECURITY = "test_security.py::"


def recreate_pods_on_spec_change(rogue: Rogue) -> None:
    """An operator that replaces pods whenever a RayCluster's spec changes (KubeRay does not)."""
    first_generation: dict[tuple[str, str], int] = {}
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        key = (meta["namespace"], meta["name"])
        generation = first_generation.setdefault(key, meta.get("generation", 1))
        if meta.get("generation", 1) <= generation:
            continue
        first_generation[key] = meta["generation"]
        pods = rogue.core.list_namespaced_pod(
            key[0], label_selector=f"ray.io/cluster={key[1]},ray.io/node-type=worker"
        ).items
        for pod in pods[:1]:
            rogue.core.delete_namespaced_pod(pod.metadata.name, key[0])
            rogue.acted(f"deleted {pod.metadata.name} after spec generation {meta['generation']}")


def delete_a_worker_other_than_the_named(rogue: Rogue) -> None:
    """An operator that, asked to remove the worker `workersToDelete` names, removes another one."""
    done: set[str] = set()
    for cluster in rogue.ray_objects("rayclusters"):
        meta = cluster["metadata"]
        for group in cluster["spec"].get("workerGroupSpecs") or []:
            named = (group.get("scaleStrategy") or {}).get("workersToDelete") or []
            if not named or meta["uid"] + ",".join(named) in done:
                continue
            done.add(meta["uid"] + ",".join(named))
            pods = rogue.core.list_namespaced_pod(
                meta["namespace"],
                label_selector=f"ray.io/cluster={meta['name']},ray.io/group={group['groupName']}",
            ).items
            for pod in [p for p in pods if p.metadata.name not in named][:1]:
                rogue.core.delete_namespaced_pod(pod.metadata.name, meta["namespace"])
                rogue.acted(f"deleted {pod.metadata.name}, not the named {named}")


# -- stale CRDs ---------------------------------------------------------------------------

CONDITIONS_PATH = "/spec/versions/{index}/schema/openAPIV3Schema/properties/status/properties/conditions"


@before_checks
def stale_crd_without_num_of_hosts(rogue: Rogue) -> None:
    """A RayCluster CRD that predates numOfHosts (Helm never upgrades CRDs): the API server drops a
    group's numOfHosts, so KubeRay never hears of it (1.6.2 then expects replicas x 0 pods)."""
    spec = raycluster_spec(numOfHosts=2)
    drop_crd_fields(
        rogue, "rayclusters", [["workerGroupSpecs", "*", "numOfHosts"]], probe("RayCluster", spec)
    )


def stale_crd_without_status_conditions(rogue: Rogue) -> None:
    """A RayCluster CRD whose status predates conditions (as v1alpha1's still does): the API server
    drops every condition KubeRay writes. Not `@before_checks`: no dry run can show a status pruned
    (a create drops the status), and the check reads a status written some 30 s after its cluster was
    made, long after the schema changed; the rogue then records each ready cluster it sees without
    conditions, as proof the seed took effect."""
    ext = client.ApiextensionsV1Api(rogue.api)
    name = f"rayclusters.{RAY_GROUP}"
    crd = ext.read_custom_resource_definition(name)
    index = next(i for i, v in enumerate(crd.spec.versions) if v.name == "v1")
    status = crd.spec.versions[index].schema.open_apiv3_schema.properties["status"]
    if "conditions" in (status.properties or {}):
        patch = [{"op": "remove", "path": CONDITIONS_PATH.format(index=index)}]
        ext.patch_custom_resource_definition(name, patch, _content_type="application/json-patch+json")
        rogue.acted(f"removed status.conditions from the v1 schema of CRD {name}")
    seen: set[str] = set()
    for cluster in rogue.ray_objects("rayclusters"):
        status_now, uid = cluster.get("status", {}), cluster["metadata"]["uid"]
        if status_now.get("state") == "ready" and not status_now.get("conditions") and uid not in seen:
            seen.add(uid)
            rogue.acted(f"RayCluster {cluster['metadata']['name']} is ready with no conditions")


@before_checks
def stale_crd_without_upgrade_strategy(rogue: Rogue) -> None:
    """A RayCluster CRD that predates upgradeStrategy (1.5's; Helm never upgrades CRDs): the API
    server drops `upgradeStrategy: Recreate`, so KubeRay never recreates pods on a spec change."""
    spec = {**raycluster_spec(), "upgradeStrategy": {"type": "Recreate"}}
    drop_crd_fields(rogue, "rayclusters", [["upgradeStrategy"]], probe("RayCluster", spec))


@before_checks
def stale_crd_without_suspend(rogue: Rogue) -> None:
    """A RayCluster CRD without `suspend` (hand-trimmed): the API server drops it, so a suspended
    cluster keeps its pods."""
    spec = {**raycluster_spec(), "suspend": False}
    drop_crd_fields(rogue, "rayclusters", [["suspend"]], probe("RayCluster", spec))


@before_checks
def stale_crd_without_head_start_params(rogue: Rogue) -> None:
    """A RayCluster CRD without the head's rayStartParams (hand-trimmed): the API server drops the
    head's num-cpus "0", so KubeRay gives the head the CPU of its container limit and tasks meant
    for workers can run on it."""
    spec = raycluster_spec()
    spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    drop_crd_fields(rogue, "rayclusters", [["headGroupSpec", "rayStartParams"]], probe("RayCluster", spec))


# -- owner references ---------------------------------------------------------------------

OWNER_KIND = "RayCluster"
MERGE_PATCH = "application/merge-patch+json"


def _owned_by_a_raycluster(obj: Any) -> bool:
    return any(ref.kind == OWNER_KIND for ref in obj.metadata.owner_references or [])


def _disown(rogue: Rogue, list_fn: Callable[..., Any], patch_fn: Callable[..., Any], what: str) -> None:
    """Drop the RayCluster owner reference of every `list_fn` object of the run as it appears."""
    for event in rogue.events(list_fn, label_selector="ray.io/cluster"):
        obj = event["object"]
        if event["type"] == "DELETED" or not _owned_by_a_raycluster(obj) or not rogue.in_run(obj):
            continue
        name, namespace = obj.metadata.name, obj.metadata.namespace
        try:
            patch_fn(name, namespace, {"metadata": {"ownerReferences": None}}, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        rogue.acted(f"removed the owner references of {what} {namespace}/{name}")


def children_without_owner_references(rogue: Rogue) -> None:
    """What KubeRay makes for a RayCluster (its head Service, its token Secret) made without an owner
    reference: nothing removes it with the cluster. Services and Secrets only: an orphaned pod
    would go on running."""
    core = rogue.core

    def secrets(rogue: Rogue) -> None:
        _disown(rogue, core.list_secret_for_all_namespaces, core.patch_namespaced_secret, "Secret")

    def services(rogue: Rogue) -> None:
        _disown(rogue, core.list_service_for_all_namespaces, core.patch_namespaced_service, "Service")

    side_by_side(rogue, secrets, services)


def claims_owned_by_their_raycluster(rogue: Rogue) -> None:
    """A RayCluster that takes ownership of the user's claim it mounts, so the garbage collector
    deletes the claim with the cluster (the check reads a claim being deleted, or gone, as that)."""
    owned: set[tuple[str, str]] = set()
    for event in rogue.events(rogue.core.list_pod_for_all_namespaces, label_selector="ray.io/cluster"):
        pod = event["object"]
        namespace = pod.metadata.namespace
        claims = [
            v.persistent_volume_claim.claim_name for v in pod.spec.volumes or [] if v.persistent_volume_claim
        ]
        fresh = [c for c in claims if (namespace, c) not in owned]
        if event["type"] == "DELETED" or not fresh or not rogue.in_run(pod):
            continue
        for claim in fresh:
            if _give_owner(rogue, namespace, claim, pod.metadata.labels["ray.io/cluster"]):
                owned.add((namespace, claim))


def _give_owner(rogue: Rogue, namespace: str, claim: str, cluster: str) -> bool:
    """Make `cluster` the claim's owner; False if either is gone."""
    try:
        owner = rogue.custom.get_namespaced_custom_object(RAY_GROUP, "v1", namespace, "rayclusters", cluster)
        ref = {
            "apiVersion": f"{RAY_GROUP}/v1",
            "kind": OWNER_KIND,
            "name": cluster,
            "uid": owner["metadata"]["uid"],
        }
        patch = {"metadata": {"ownerReferences": [ref]}}
        rogue.core.patch_namespaced_persistent_volume_claim(
            claim, namespace, patch, _content_type=MERGE_PATCH
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    rogue.acted(f"made RayCluster {namespace}/{cluster} the owner of claim {claim}")
    return True


REPLICA_INDEX = "ray.io/worker-group-replica-index"


def single_host_replacements_indexed_zero(rogue: Rogue) -> None:
    """Every single-host worker pod of the run made after the first three of its group is labelled
    replica index 0 as it appears, as an operator that numbers each replacement from 0 instead of
    giving it the freed index would. KubeRay sets the label only when it creates a pod."""
    seen: dict[tuple[str, str], int] = {}
    for event in rogue.events(rogue.core.list_pod_for_all_namespaces, label_selector=REPLICA_INDEX):
        pod = event["object"]
        labels = pod.metadata.labels or {}
        if event["type"] != "ADDED" or "ray.io/replica-host-index" in labels or not rogue.in_run(pod):
            continue
        group = (pod.metadata.namespace, f"{labels.get('ray.io/cluster')}/{labels.get('ray.io/group')}")
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= 3 or labels.get(REPLICA_INDEX) == "0":
            continue
        try:
            rogue.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                            {"metadata": {"labels": {REPLICA_INDEX: "0"}}})  # fmt: skip
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        rogue.acted(f"labelled {pod.metadata.namespace}/{pod.metadata.name} replica index 0")


FAULTS = [
    Fault(
        name="head-service-gets-a-cluster-ip",
        area="raycluster",
        misbehaviour="the head Service is an ordinary ClusterIP Service, not headless",
        env={"ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE": "true"},
        catches=(RAYCLUSTER + "test_head_service_is_headless_with_documented_ports",),
        bystanders=(
            RAYCLUSTER + "test_head_only_cluster_becomes_ready",
            RAYCLUSTER + "test_a_task_submitted_through_the_head_runs_on_a_worker",
        ),
        evidence="clusterIP",
    ),
    Fault(
        name="pods-replaced-on-spec-change",
        area="raycluster",
        misbehaviour="a spec change (the image) replaces a running worker pod instead of leaving it",
        rogue=recreate_pods_on_spec_change,
        catches=(RAYCLUSTER + "test_image_change_does_not_restart_existing_pods",),
        bystanders=(RAYCLUSTER + "test_head_and_workers_report_documented_conditions",),
        evidence="after an image change",
    ),
    Fault(
        name="operator-watches-only-its-own-namespace",
        area="raycluster",
        misbehaviour="the operator watches only its own namespace: no RayCluster or RayJob elsewhere "
        "is ever reconciled (every readiness wait must fail, not err)",
        extra_args=("--watch-namespace=kuberay-system",),
        catches=(
            RAYCLUSTER + "test_head_only_cluster_becomes_ready",
            "test_rayjob_lifecycle.py::test_job_moves_initializing_running_complete[K8sJobMode]",
            "test_fault_recovery.py::test_deleted_worker_is_replaced_and_rejoins_ray",
        ),
        run_args=("--timeout", "ready=90"),
        evidence="timed out",
    ),
    Fault(
        name="num-of-hosts-dropped-by-a-stale-crd",
        area="raycluster",
        misbehaviour="a group's numOfHosts never reaches KubeRay: 1 replica x numOfHosts 2 does not "
        "make two worker pods (1.6.2 makes none)",
        rogue=stale_crd_without_num_of_hosts,
        catches=(RAYCLUSTER + "test_num_of_hosts_two_gives_replicas_times_two_pods",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        evidence="numOfHosts 2 made",
    ),
    Fault(
        name="head-start-params-dropped-by-a-stale-crd",
        area="raycluster",
        misbehaviour="the head offers CPU although its rayStartParams set num-cpus 0, so a task that "
        "needs a worker runs on the head",
        rogue=stale_crd_without_head_start_params,
        catches=(RAYCLUSTER + "test_a_task_submitted_through_the_head_runs_on_a_worker",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        evidence="task ran on",
    ),
    Fault(
        name="status-conditions-dropped-by-a-stale-crd",
        area="raycluster",
        misbehaviour="a ready RayCluster reports no HeadPodReady or RayClusterProvisioned condition",
        rogue=stale_crd_without_status_conditions,
        catches=(
            RAYCLUSTER + "test_head_and_workers_report_documented_conditions",
            LIFECYCLE + "test_a_quota_too_small_for_the_head_is_reported_as_replica_failure",
        ),
        bystanders=(
            RAYCLUSTER + "test_head_service_is_headless_with_documented_ports",
            RAYCLUSTER + "test_workers_reach_the_head_through_cluster_dns",
        ),
        evidence=("HeadPodReady", "ReplicaFailure"),
    ),
    Fault(
        name="children-without-owner-references",
        area="raycluster",
        misbehaviour="a RayCluster's head Service and token Secret carry no owner reference, so they "
        "outlive the cluster",
        rogue=children_without_owner_references,
        catches=(
            RAYCLUSTER + "test_deleting_the_raycluster_removes_its_pods_and_services",
            SECURITY + "test_token_auth_gives_the_cluster_a_secret_with_auth_token",
        ),
        bystanders=(
            RAYCLUSTER + "test_head_and_workers_report_documented_conditions",
            SECURITY + "test_dashboard_and_job_submission_require_the_token",
        ),
        run_args=("--timeout", "cleanup=30"),  # a healthy cleanup takes about 5 s here
        evidence=("the services of hw to be gone", "owners of Secret"),
    ),
    Fault(
        name="claim-owned-by-its-raycluster",
        area="raycluster",
        misbehaviour="a RayCluster takes ownership of the user's claim it mounts, so the claim is "
        "deleted with the cluster (a RayJob's too, by shutdownAfterJobFinishes)",
        rogue=claims_owned_by_their_raycluster,
        catches=(
            RAYCLUSTER + "test_a_claim_outlives_its_raycluster_with_its_data",
            RAYCLUSTER + "test_a_rayjob_result_on_a_claim_is_readable_after_its_cluster_is_gone",
        ),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        evidence="deleted with the cluster",
    ),
    Fault(
        name="workers-told-a-cluster-domain-not-served",
        area="raycluster",
        misbehaviour="KubeRay gives workers a head address in a cluster domain the cluster does not "
        "serve (CLUSTER_DOMAIN): no worker reaches the head, a head-only cluster is unaffected",
        env={"CLUSTER_DOMAIN": "cluster.invalid"},
        catches=(RAYCLUSTER + "test_workers_reach_the_head_through_cluster_dns",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        run_args=("--timeout", "ready=90"),  # hw is ready within about 30 s here
        evidence="RayCluster hw becomes ready",
    ),
    Fault(
        name="suspend-dropped-by-a-stale-crd",
        area="raycluster",
        misbehaviour="a RayCluster's `suspend: true` never reaches KubeRay: the suspended cluster "
        "keeps its pods and never reports RayClusterSuspended",
        rogue=stale_crd_without_suspend,
        catches=(LIFECYCLE + "test_suspend_removes_every_pod_and_resume_brings_the_cluster_back",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        run_args=("--timeout", "cleanup=60"),
        evidence="suspend",
    ),
    Fault(
        name="recreate-strategy-dropped-by-a-stale-crd",
        area="raycluster",
        misbehaviour="`upgradeStrategy: Recreate` never reaches KubeRay: a changed pod template "
        "leaves the old head and worker running",
        rogue=stale_crd_without_upgrade_strategy,
        catches=(LIFECYCLE + "test_recreate_strategy_replaces_head_and_workers_on_a_spec_change",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        run_args=("--timeout", "ready=90"),
        evidence="new head and worker pods",
    ),
    Fault(
        name="scale-down-deletes-another-worker",
        area="raycluster",
        misbehaviour="a worker group scaled down with `workersToDelete` loses another worker than "
        "the named one (and then the named one too)",
        rogue=delete_a_worker_other_than_the_named,
        catches=(LIFECYCLE + "test_scaling_down_removes_the_named_worker_then_one_and_never_the_head",),
        bystanders=(RAYCLUSTER + "test_head_only_cluster_becomes_ready",),
        run_args=("--timeout", "scale=60"),
        evidence="worker down-small-worker-",  # the kept worker, named whichever wait saw the wrong deletion
    ),
    Fault(
        name="single-host-replacement-indexed-zero",
        area="raycluster",
        misbehaviour="a single-host worker that replaces a lost one, or is added by a scale-up, gets "
        "replica index 0 again instead of the free index",
        rogue=single_host_replacements_indexed_zero,
        catches=(LIFECYCLE + "test_single_host_replicas_keep_unique_indices_through_a_loss_and_a_scale_up",),
        run_args=("--timeout", "ready=90"),  # the healthy check waits about 30 s for its workers
        # The check may see the replacement's own index 1 before the rogue relabels it, and then
        # fails at the scale-up: either way on an index.
        evidence="index",
    ),
    Fault(
        name="multi-host-replica-hosts-split",
        area="raycluster",
        misbehaviour="the second host of a two-host replica is labelled as a replica of its own",
        rogue=split_multi_host_replicas,
        catches=(
            LIFECYCLE + "test_a_multi_host_replica_that_loses_a_host_is_recreated_whole_with_its_indices",
        ),
        run_args=("--timeout", "ready=90"),
        evidence="2 replicas of 2 indexed hosts",
    ),
]
