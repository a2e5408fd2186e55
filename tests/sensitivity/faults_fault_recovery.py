"""Seeded faults of area fault-recovery."""

from __future__ import annotations

from .behind_the_back import annotate_each, drop_crd_fields, probe, raycluster_spec
from .faults import Fault
from .rogue import Rogue, before_checks

RECOVERY = "test_fault_recovery.py::"
NODES = "test_node_faults.py::"
OPERATOR_SELECTOR = "app.kubernetes.io/name=kuberay-operator"
# KubeRay's own annotation (utils.DisableProvisionedHeadRestartAnnotationKey, v1.6+): it puts it on
# the clusters of SidecarMode RayJobs, and then never recreates a lost head once provisioned.
NO_HEAD_RESTART = "ray.io/disable-provisioned-head-restart"
KILLED_PROCESS = RECOVERY + "test_head_whose_ray_process_was_killed_is_replaced_and_workers_rejoin"
REDIS_USER_CHECK = RECOVERY + "test_gcs_ft_with_a_redis_user_keeps_and_cleans_its_state"
REDIS_SECRET_CHECK = RECOVERY + "test_gcs_ft_with_a_redis_password_from_a_secret_keeps_and_cleans_its_state"
SERVING_NODE_LOSS = "test_a_rayservice_keeps_answering_through_the_gateway_while_a_worker_node_is_lost"
AUTOSCALING_AFTER_HEAD_LOSS = (
    "test_autoscaling.py::test_autoscaling_keeps_working_after_a_gcs_fault_tolerant_head_is_lost"
)


def stop_operator_once_a_cluster_is_ready(rogue: Rogue) -> None:
    """An operator that stops reconciling (scaled to 0 behind its back) once a cluster is up."""
    for cluster in rogue.ray_objects("rayclusters"):
        status = cluster.get("status", {})
        if status.get("state") == "ready" and status.get("readyWorkerReplicas", 0) >= 1:
            _scale_operator(rogue, 0)
            rogue.acted(f"scaled the operator to 0 once {cluster['metadata']['name']} was ready")
            return


def stop_operator_once_a_rayservice_is_ready(rogue: Rogue) -> None:
    """An operator that stops reconciling (scaled to 0 behind its back) once a RayService is Ready."""
    for service in rogue.ray_objects("rayservices"):
        conditions = service.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            _scale_operator(rogue, 0)
            rogue.acted(f"scaled the operator to 0 once RayService {service['metadata']['name']} was Ready")
            return


def _scale_operator(rogue: Rogue, replicas: int) -> int:
    """Set the operator Deployment's replicas; returns what they were."""
    apps = rogue.apps()
    (deployment,) = apps.list_namespaced_deployment(
        rogue.operator_namespace, label_selector=OPERATOR_SELECTOR
    ).items
    name, before = deployment.metadata.name, deployment.spec.replicas or 0
    apps.patch_namespaced_deployment_scale(name, rogue.operator_namespace, {"spec": {"replicas": replicas}})
    return before


def stop_operator_while_a_rayjob_runs(rogue: Rogue) -> None:
    """An operator that stops reconciling once a RayJob of the run is Running, until that RayJob is
    deleted (its finalizer needs the operator, so the namespace can go). Each check's RayJob is
    then left to Ray alone: a lost worker or head is never replaced, and the RayJob's status never
    moves on. The operator is given back when the RayJob goes, and when the run ends."""
    paused: dict[tuple[str, str], int] = {}  # RayJob -> the operator's replicas before the pause
    seen: set[tuple[str, str]] = set()
    try:
        for job in rogue.ray_objects("rayjobs"):
            meta = job["metadata"]
            key, deleting = (meta["namespace"], meta["name"]), bool(meta.get("deletionTimestamp"))
            if key in paused and deleting:
                _scale_operator(rogue, paused.pop(key))
                rogue.acted(f"gave the operator back as RayJob {key[0]}/{key[1]} is deleted")
            elif (
                key not in seen
                and not deleting
                and job.get("status", {}).get("jobDeploymentStatus") == "Running"
            ):
                seen.add(key)
                paused[key] = _scale_operator(rogue, 0)
                rogue.acted(f"scaled the operator to 0 once RayJob {key[0]}/{key[1]} was Running")
    finally:
        if paused:  # the run ended first: the healthy restore would put it back too
            _scale_operator(rogue, max(paused.values()))


def head_restart_disabled(rogue: Rogue) -> None:
    """Every RayCluster of the run gets KubeRay's own disable-provisioned-head-restart annotation as
    soon as it appears: KubeRay then recreates no head lost after provisioning (#1141), while lost
    workers are still replaced."""
    annotate_each(rogue, "rayclusters", NO_HEAD_RESTART, "true")


@before_checks
def stale_crd_without_redis_username(rogue: Rogue) -> None:
    """A RayCluster CRD without gcsFaultToleranceOptions.redisUsername (hand-trimmed, or kept from a
    release before it: Helm never upgrades CRDs): the API server drops the username, so KubeRay gives
    the head only the password and Ray authenticates to Redis as its default user."""
    options = {"redisAddress": "redis:6379", "redisUsername": {"value": "probe"}}
    spec = {**raycluster_spec(), "gcsFaultToleranceOptions": options}
    path = ["gcsFaultToleranceOptions", "redisUsername"]
    drop_crd_fields(rogue, "rayclusters", [path], probe("RayCluster", spec))


def _operator_paused_while_a_rayjob_runs(name: str, then: str, check: str, evidence: str) -> Fault:
    return Fault(
        name=name,
        area="fault-recovery",
        misbehaviour=f"the operator stops reconciling while a RayJob runs: {then}",
        rogue=stop_operator_while_a_rayjob_runs,
        catches=(RECOVERY + check,),
        run_args=("--timeout", "ready=120"),  # healthy: a killed operator's successor finished in 46-130 s
        evidence=evidence,
    )


def _operator_stops_before(slug: str, node: str, check: str) -> Fault:
    """The operator stopped once the cluster is up, for a node-fault check whose worker must be replaced."""
    return Fault(
        name=f"operator-stops-before-a-node-is-{slug}",
        area="fault-recovery",
        misbehaviour=f"the operator stops reconciling once the cluster is up: the worker of {node} is never "
        "replaced",
        rogue=stop_operator_once_a_cluster_is_ready,
        worker_nodes=True,
        catches=(NODES + check,),
        run_args=("--timeout", "ready=120"),
        evidence="replaced by a Ready one",
    )


FAULTS = [
    Fault(
        name="gcs-ft-redis-not-cleaned",
        area="fault-recovery",
        misbehaviour="deleting a GCS fault-tolerant RayCluster leaves its state in Redis (with or "
        "without a Redis password)",
        env={"ENABLE_GCS_FT_REDIS_CLEANUP": "false"},
        catches=(
            RECOVERY + "test_gcs_ft_cluster_deletion_cleans_its_redis_state",
            REDIS_SECRET_CHECK,
        ),
        bystanders=(RECOVERY + "test_deleted_worker_is_replaced_and_rejoins_ray",),
        evidence="Redis keys",
    ),
    Fault(
        name="operator-stops-reconciling",
        area="fault-recovery",
        misbehaviour="the operator stops reconciling once the cluster is up: a lost worker is never replaced",
        rogue=stop_operator_once_a_cluster_is_ready,
        catches=(RECOVERY + "test_deleted_worker_is_replaced_and_rejoins_ray",),
        run_args=("--timeout", "ready=120"),
        evidence="replaced by a Ready one",
    ),
    # One check each: the rogue stops the operator for the rest of the run, so a second check
    # could not even make its cluster.
    _operator_stops_before(
        "lost",
        "a lost node",
        "test_a_lost_worker_node_s_ray_worker_is_replaced_elsewhere_once_the_node_is_gone",
    ),
    _operator_stops_before(
        "cut-off",
        "a node cut off from the network",
        "test_a_worker_node_cut_off_is_dead_to_ray_and_replaced_once_it_is_back",
    ),
    Fault(
        name="operator-stops-before-a-serving-node-is-lost",
        area="fault-recovery",
        misbehaviour="the operator stops reconciling once the RayService is Ready: the serve worker of a "
        "lost node is never replaced, so the service is never whole again",
        rogue=stop_operator_once_a_rayservice_is_ready,
        worker_nodes=True,
        catches=(NODES + SERVING_NODE_LOSS,),
        run_args=("--timeout", "ready=120"),
        evidence="replaced by a Ready one",
    ),
    Fault(
        name="serve-worker-in-service-before-its-proxy-answers",
        area="fault-recovery",
        misbehaviour="RayService workers get no readiness probe on their Serve proxy: the replacement of a "
        "lost node's worker is behind the serve Service as soon as it starts, and requests sent to it fail",
        env={"ENABLE_PROBES_INJECTION": "false"},  # KubeRay's switch for the probes it injects (pod.go)
        worker_nodes=True,
        catches=(NODES + SERVING_NODE_LOSS,),
        evidence="failed requests once the replacement",
    ),
    Fault(
        name="head-never-recreated-after-its-node-is-lost",
        area="fault-recovery",
        misbehaviour="a head lost with its node is never recreated (#1141), with or without GCS fault "
        "tolerance",
        rogue=head_restart_disabled,
        worker_nodes=True,
        catches=(NODES + "test_the_head_s_node_lost_gives_the_cluster_a_new_head_elsewhere",),
        run_args=("--timeout", "ready=120"),
        evidence="replaced by a Ready one",
    ),
    Fault(
        name="head-never-recreated-once-provisioned",
        area="fault-recovery",
        misbehaviour="a head pod lost after the cluster was provisioned is never recreated (#1141), "
        "with or without GCS fault tolerance",
        rogue=head_restart_disabled,
        catches=(
            RECOVERY + "test_deleted_head_is_replaced_and_workers_rejoin",
            RECOVERY + "test_gcs_ft_detached_actor_and_serve_app_survive_head_loss",
            # KubeRay still deletes the head whose Ray container ended, and then makes no new one.
            KILLED_PROCESS + "[gcs_server]",
            KILLED_PROCESS + "[raylet]",
        ),
        run_args=("--timeout", "ready=90"),  # a new head is Ready within about 30 s here
        evidence=(
            "replaced by a Ready one",
            "new head",
            "KubeRay replaces the head",
            "KubeRay replaces the head",
        ),
    ),
    Fault(
        name="autoscaling-head-never-recreated-once-provisioned",
        area="autoscaling",
        misbehaviour="the head of an autoscaling, GCS fault-tolerant RayCluster lost after provisioning is "
        "never recreated (#1141), so nothing scales the cluster any more",
        rogue=head_restart_disabled,
        catches=(AUTOSCALING_AFTER_HEAD_LOSS,),
        run_args=("--timeout", "ready=90"),
        evidence="replaced by a Ready one",
    ),
    Fault(
        name="redis-username-dropped-by-a-stale-crd",
        area="fault-recovery",
        misbehaviour="gcsFaultToleranceOptions.redisUsername never reaches Ray: the head authenticates to "
        "Redis as its default user, which the Redis of the check has switched off",
        rogue=stale_crd_without_redis_username,
        catches=(REDIS_USER_CHECK,),
        bystanders=(REDIS_SECRET_CHECK,),
        run_args=("--timeout", "ready=120"),  # healthy: the cluster is ready in about 30 s here
        evidence="becomes ready",
    ),
    # One fault per RayJob check: side by side, the first RayJob to run pauses the operator for
    # the others too, which then fail (or, the operator-killed check, err finding a Ready operator
    # pod to kill) before their own loss is seeded.
    _operator_paused_while_a_rayjob_runs(
        "operator-stops-while-a-rayjob-runs",
        "a lost worker is never replaced, so a job that needs it never completes",
        "test_running_job_with_task_retries_completes_despite_a_lost_worker",
        "completes after losing its worker",
    ),
    _operator_paused_while_a_rayjob_runs(
        "operator-stops-while-a-rayjob-loses-its-head",
        "a RayJob that loses its head stays Running for ever (#3903)",
        "test_rayjob_that_loses_its_head_mid_run_reaches_a_terminal_status",
        "never stuck non-terminal",
    ),
    _operator_paused_while_a_rayjob_runs(
        "operator-successor-stops-while-a-rayjob-runs",
        "the successor of a killed operator stops too once the RayJob runs under it, so the RayJob is "
        "never finished",
        "test_operator_killed_while_reconciling_resumes_without_duplicates",
        "new operator leader finishes",
    ),
]
