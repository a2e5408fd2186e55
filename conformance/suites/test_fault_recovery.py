"""Area fault-recovery: a RayCluster recovers from the loss of a worker or of its head.

Each fault is injected by deleting a pod; recovery_s runs from the deletion to the cluster
ready again with every worker alive in Ray's own view (`ray.nodes()`), not only in Kubernetes'.
Recovery is judged by identity, not counts: the Ray node alive afterwards must be the new pod
(its IP), the one lost must be dead, a retried task must show a second attempt. Each check's
docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from conformance.install import operator_facts
from conformance.kube.manifests import render
from conformance.kube.pods import is_serving
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until, wait_for, wait_gone
from conformance.suites import ray_processes, rayjobs
from conformance.suites.ray_membership import COUNTER_ACTOR, ray_workers, until_workers_alive
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("fault-recovery")


def _ready_cluster(ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts) -> str:
    """A head and one worker, ready and joined (made in the check: KubeRay failing here is a failure)."""
    values = {**cluster_values, "name": "fr", "workers": [{"name": "small", "replicas": 1}]}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    ray.wait_cluster_ready("fr", timeouts.ready)
    until_workers_alive(ray, "fr", timeouts.ready)
    return "fr"


def _delete_and_wait_replaced(ray: Ray, cluster: str, old: Any, node_type: str, timeouts: Timeouts) -> Any:
    ray.core.delete_namespaced_pod(old.metadata.name, ray.namespace)
    return ray.wait_replaced(cluster, old, node_type, timeouts.ready)


def test_deleted_worker_is_replaced_and_rejoins_ray(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a deleted worker pod not replaced, or replaced by a pod that never joins Ray (the
    alive Ray worker must be the new pod, by IP, and the lost node must be dead)."""
    cluster = _ready_cluster(ray, cluster_values, timeouts)
    (old,) = ray.pods(cluster, "worker")
    old_node = until_workers_alive(ray, cluster, timeouts.ready)[old.metadata.name]
    started = time.monotonic()
    new = _delete_and_wait_replaced(ray, cluster, old, "worker", timeouts)
    joined = until_workers_alive(ray, cluster, timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert list(joined) == [new.metadata.name], f"alive Ray workers {joined}, new pod {new.metadata.name}"
    assert joined[new.metadata.name] != old_node, "the new pod reports the lost pod's Ray node id"
    assert not ray_workers(ray, cluster).get(old_node, ("", False))[1], f"lost node {old_node} still alive"


@pytest.mark.kuberay_issue(1141)
@pytest.mark.smoke
def test_deleted_head_is_replaced_and_workers_rejoin(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a deleted head never restored (#1141), or its workers never alive again in the new
    head's view (each worker pod's IP an alive Ray node of the new head)."""
    cluster = _ready_cluster(ray, cluster_values, timeouts)
    old = ray.head_pod(cluster)
    started = time.monotonic()
    new = _delete_and_wait_replaced(ray, cluster, old, "head", timeouts)
    ray.wait_cluster_ready(cluster, timeouts.ready)
    joined = until_workers_alive(ray, cluster, timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert ray.head_pod(cluster).metadata.uid == new.metadata.uid != old.metadata.uid
    assert joined, "no worker is alive in the new head's view"


def _rayjob(cluster_values: dict[str, Any], name: str, entrypoint: str, workers: int = 0) -> dict[str, Any]:
    body = rayjobs.job(cluster_values, name, entrypoint)
    if workers:
        spec = body["spec"]["rayClusterSpec"]
        spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}  # tasks must run on the worker
        spec["workerGroupSpecs"] = rayjobs.fixed_workers(cluster_values, workers)
    return body


def _job_state(obj: dict[str, Any]) -> str:
    return str(obj.get("status", {}).get("jobDeploymentStatus"))


def _wait_job_end(ray: Ray, name: str, what: str, timeouts: Timeouts) -> dict[str, Any]:
    return ray.wait(
        "rayjobs",
        name,
        lambda o: _job_state(o) in ("Complete", "Failed"),
        what=what,
        timeout=timeouts.ready + timeouts.apply,
    )


def test_running_job_with_task_retries_completes_despite_a_lost_worker(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayJob whose task may retry failing (or stuck) after its worker pod is lost,
    typically because no replacement worker comes. The task is running on the worker when it is
    deleted, and the job's output must show a second attempt of it (Ray's task attempt numbers)."""
    ray.create("rayjobs", _rayjob(cluster_values, "resilient", rayjobs.RETRIED_TASK, workers=1))
    with behaviour("RayJob resilient runs"):
        running = ray.wait(
            "rayjobs", "resilient", lambda o: _job_state(o) == "Running",
            what="RayJob resilient to run", timeout=timeouts.ready,
        )  # fmt: skip
    cluster = running["status"]["rayClusterName"]
    until_workers_alive(ray, cluster, timeouts.ready)
    (worker,) = ray.pods(cluster, "worker")
    poll_until(
        lambda: True if rayjobs.RETRIED_TASK_NAME in _processes(ray, worker) else None,
        what=f"the task to run in {worker.metadata.name}",
        timeout=timeouts.ready,
    )
    started = time.monotonic()
    # Lost, not drained: with the default 30 s grace the worker's bash (PID 1, no SIGTERM handler)
    # outlives the 20 s task, which then finishes on the doomed pod and is never retried.
    ray.core.delete_namespaced_pod(worker.metadata.name, ray.namespace, grace_period_seconds=0)
    with behaviour("a job whose tasks may retry completes after losing its worker"):
        final = _wait_job_end(ray, "resilient", "RayJob resilient to finish", timeouts)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"].get("jobStatus") == "SUCCEEDED", rayjobs.brief(final["status"])
    attempts = rayjobs.task_attempts(_submitter_log(ray, "resilient"))
    assert attempts and max(attempts) >= 1, f"no retry of the task is recorded: attempts {attempts}"


def _processes(ray: Ray, pod: Any) -> str:
    """The command lines of the processes in the pod's first container (Ray titles a task's worker
    process `ray::<task name>` while it runs)."""
    return ray.exec(pod, ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo"])


def _submitter_log(ray: Ray, job_name: str) -> str:
    pods = ray.core.list_namespaced_pod(ray.namespace, label_selector=f"job-name={job_name}").items
    return "".join(ray.core.read_namespaced_pod_log(p.metadata.name, ray.namespace) for p in pods)


@pytest.mark.kuberay_issue(3903)
def test_rayjob_that_loses_its_head_mid_run_reaches_a_terminal_status(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayJob left non-terminal (Running for ever) after its head pod is lost (#3903)."""
    body = _rayjob(cluster_values, "headless", rayjobs.runs_for(60))
    ray.create("rayjobs", body)
    with behaviour("RayJob headless runs"):
        running = ray.wait(
            "rayjobs", "headless", lambda o: _job_state(o) == "Running",
            what="RayJob headless to run", timeout=timeouts.ready,
        )  # fmt: skip
    started = time.monotonic()
    ray.core.delete_namespaced_pod(
        ray.head_pod(running["status"]["rayClusterName"]).metadata.name, ray.namespace
    )
    with behaviour("a RayJob that lost its head is never stuck non-terminal (kuberay#3903)"):
        final = _wait_job_end(ray, "headless", "RayJob headless to reach a terminal status", timeouts)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"].get("endTime"), final["status"]


@pytest.mark.exclusive("kills the shared operator")
def test_operator_killed_while_reconciling_resumes_without_duplicates(
    conformance: Any, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: an operator's successor (after the leader's pod is killed mid-reconcile) that never
    finishes a RayJob, or makes a second RayCluster or submitter Job for it."""
    operator_ns = conformance.operator_namespace
    # The precondition: the operator serving before it is killed (a wait on the environment: an
    # operator that is still coming back from an earlier check is not this check's finding).
    operator = wait_for(
        ray.core.list_namespaced_pod,
        is_serving,
        what="a Ready operator pod to kill",
        timeout=timeouts.ready,
        namespace=operator_ns,
        label_selector=operator_facts.operator_selector(ray.api, operator_ns),
    )
    ray.create("rayjobs", _rayjob(cluster_values, "orphaned", "python -c \"print('after-failover')\""))
    started = time.monotonic()
    ray.core.delete_namespaced_pod(operator.metadata.name, operator_ns)
    with behaviour("a new operator leader finishes the RayJob"):
        final = _wait_job_end(
            ray, "orphaned", "RayJob orphaned to finish after the operator was killed", timeouts
        )
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    assert final["status"].get("jobStatus") == "SUCCEEDED", rayjobs.brief(final["status"])
    clusters = ray.list_fn("rayclusters")()["items"]
    assert len(clusters) == 1, f"RayClusters after failover: {[c['metadata']['name'] for c in clusters]}"
    assert clusters[0]["metadata"]["name"] == final["status"]["rayClusterName"], final["status"]
    jobs = client.BatchV1Api(ray.api).list_namespaced_job(ray.namespace).items
    assert [j.metadata.name for j in jobs] == ["orphaned"], "duplicate submitter Jobs after failover"
    owners = [o.uid for o in jobs[0].metadata.owner_references or []]
    assert owners == [final["metadata"]["uid"]], f"the submitter Job is owned by {owners}, not the RayJob"


# -- killing Ray's own processes in the head container ---------------------------------


@pytest.mark.parametrize("process", ["gcs_server", "raylet"])
def test_head_whose_ray_process_was_killed_is_replaced_and_workers_rejoin(
    process: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a head pod whose Ray container ended for good (its gcs_server or raylet killed)
    neither deleted nor recreated by KubeRay (#1141), or its worker not alive again in the new
    head's view. A kill that did not happen is a harness error.

    KubeRay runs Ray with `ray start --block`, which exits once a Ray process it started dies.
    The head's restartPolicy is Never (as KubeRay itself sets with autoscaler v2), so the kubelet
    does not restart the container: the head comes back only if KubeRay deletes the dead pod and
    makes a new one. With the default policy the kubelet alone would bring it back, and the check
    would pass on an operator that does nothing.
    """
    cluster = _ready_cluster(ray, {**cluster_values, "head_restart_policy": "Never"}, timeouts)
    head = ray.head_pod(cluster)
    pid = ray_processes.the_process(ray, head, process)
    started = time.monotonic()
    ray_processes.kill(ray, head, process, pid)
    with behaviour(f"KubeRay replaces the head after its {process} was killed"):
        wait_for(
            ray.core.list_namespaced_pod,
            lambda p: is_serving(p) and p.metadata.uid != head.metadata.uid,
            what=f"a new head pod after {process} was killed",
            timeout=timeouts.ready,
            describe=lambda p: f"{p.metadata.name} ({p.metadata.uid[:8]}): {p.status.phase}",
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head",
        )
    ray.wait_cluster_ready(cluster, timeouts.ready)
    until_workers_alive(ray, cluster, timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - started, 2)


# -- GCS fault tolerance: the head's state in Redis ------------------------------------

FT_CLUSTER = "ft"  # the GCS fault-tolerant RayCluster of the checks below
FT_NAMESPACE = "krc"  # the Ray namespace the detached actor and the Serve app live in

# Before the head is lost: a detached actor with state, and a Serve app, both on the worker
# (the head offers no CPU). Prints the actor's id and this driver's job id.
SEED_STATE = f"""
import ray
from ray import serve
ray.init(address="auto", namespace="{FT_NAMESPACE}", logging_level="ERROR")
{COUNTER_ACTOR}
counter = Counter.remote()
print("counter", ray.get(counter.incr.remote()))
print("actor-id", counter._actor_id.hex())
print("job-id", ray.get_runtime_context().get_job_id())

@serve.deployment(ray_actor_options={{"num_cpus": 0.1}})
def echo(request):
    return "echo-ok"

serve.start(proxy_location="EveryNode", http_options={{"host": "0.0.0.0", "port": 8000}})
serve.run(echo.bind(), name="echo", route_prefix="/echo")
print("serve-up")
"""

# After the head came back: the same actor, its state, the Serve app, and a later job id.
READ_STATE = f"""
import sys, time
import ray
from ray import serve
ray.init(address="auto", namespace="{FT_NAMESPACE}", logging_level="ERROR")
counter = ray.get_actor("counter")
print("actor-id", counter._actor_id.hex())
print("counter", ray.get(counter.incr.remote()))
print("job-id", ray.get_runtime_context().get_job_id())

# The Serve controller recovers its applications from the GCS after the head is back:
# DEPLOYING for a while, then RUNNING again. Ask until then, for at most argv[1] seconds.
deadline = time.monotonic() + float(sys.argv[1])
status = None
while time.monotonic() < deadline:
    status = serve.status().applications["echo"].status
    if status == "RUNNING":
        break
    time.sleep(1)  # poll-interval: Serve offers no watch on application status
print("serve-status", getattr(status, "value", status))
"""

# Runs in the worker while the head is away: one request a second through the worker's own
# Serve proxy, one line per request, until the file `stop` appears.
SERVE_PROBE = """
import os, time, urllib.request
with open("/tmp/krc-serve-probe.log", "w", buffering=1) as log:
    while not os.path.exists("/tmp/krc-serve-probe.stop"):
        try:
            with urllib.request.urlopen("http://127.0.0.1:8000/echo", timeout=2) as r:
                log.write(f"{time.time():.1f} {r.status} {r.read().decode()}\\n")
        except Exception as exc:
            log.write(f"{time.time():.1f} error {type(exc).__name__}\\n")
        time.sleep(1)  # poll-interval: one request a second is the probe's rate, not a wait
"""

# Starts argv[1] as a Python program in its own session, detached from this exec's streams,
# so the exec returns at once and the program keeps running.
START_IN_BACKGROUND = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True,\n"
    "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
)


def _fields(output: str) -> dict[str, str]:
    """`key value` lines printed by the scripts above, as a mapping."""
    return dict(line.split(" ", 1) for line in output.splitlines() if " " in line)


@pytest.fixture
def redis_outlives_the_cluster(ray: Ray, timeouts: Timeouts) -> Iterator[None]:
    yield from ray_processes.deleted_before_redis(ray, "rayclusters", FT_CLUSTER, timeouts)


# The way GCS fault tolerance was asked for before gcsFaultToleranceOptions (KubeRay's
# ray-cluster.deprecate-gcs-ft.yaml, still honoured by 1.7.0): this annotation on the RayCluster
# and RAY_REDIS_ADDRESS in the head's environment.
FT_ENABLED = "ray.io/ft-enabled"
STORAGE_NS_ENV = (
    "RAY_external_storage_namespace"  # what KubeRay sets on the head (utils.RAY_EXTERNAL_STORAGE_NS)
)


def _ft_cluster(
    ray: Ray, cluster_values: dict[str, Any], profile: Any, timeouts: Timeouts, legacy: bool = False
) -> tuple[str, Any]:
    """Redis (the environment: an error if it never starts), then a GCS fault-tolerant RayCluster on
    it, asked for with gcsFaultToleranceOptions or, `legacy`, with the ft-enabled annotation."""
    redis_pod = ray_processes.start_redis(ray, profile, timeouts)
    values = {**cluster_values, "name": FT_CLUSTER, "workers": [{"name": "small", "replicas": 1}]}
    if not legacy:
        values["redis_address"] = ray_processes.REDIS_ADDRESS
    body = render("ray/raycluster.yaml", **values)
    if legacy:
        body["metadata"].setdefault("annotations", {})[FT_ENABLED] = "true"
        head = body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        head.setdefault("env", []).append({"name": "RAY_REDIS_ADDRESS", "value": ray_processes.REDIS_ADDRESS})
    ray.create("rayclusters", body)
    ray.wait_cluster_ready(FT_CLUSTER, timeouts.ready)
    until_workers_alive(ray, FT_CLUSTER, timeouts.ready)
    return FT_CLUSTER, redis_pod


def _storage_namespace(pod: Any) -> str:
    return pod.metadata.annotations["ray.io/external-storage-namespace"]


def _stop_probe(ray: Ray, worker: Any) -> list[str]:
    ray.exec(worker, ["touch", "/tmp/krc-serve-probe.stop"])
    return ray.exec(worker, ["cat", "/tmp/krc-serve-probe.log"]).splitlines()


@pytest.mark.kuberay_issue(1141)
@pytest.mark.usefixtures("redis_outlives_the_cluster")
def test_gcs_ft_detached_actor_and_serve_app_survive_head_loss(
    ray: Ray, cluster_values: dict[str, Any], profile: Any, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: GCS fault tolerance not wired (the new head starts empty: the actor, its state and
    the job ids lost), the worker replaced, or the Serve app not answering while the head is away."""
    cluster, redis_pod = _ft_cluster(ray, cluster_values, profile, timeouts)
    seeded = ray.python_in_head(cluster, SEED_STATE)
    before = _fields(seeded)
    if before.get("counter") != "1" or "serve-up" not in seeded.split():
        raise RuntimeError(f"could not set up the actor and the Serve app: {seeded[-500:]}")
    head = ray.head_pod(cluster)
    storage = _storage_namespace(head)
    keys_before = ray_processes.redis_keys(ray, redis_pod, storage)
    assert keys_before > 0, f"the head keeps no state in Redis under its namespace {storage}"
    (worker,) = ray.pods(cluster, "worker")
    ray.exec(worker, ["python", "-c", START_IN_BACKGROUND, SERVE_PROBE])
    started = time.monotonic()
    ray.core.delete_namespaced_pod(head.metadata.name, ray.namespace)
    with behaviour("a GCS fault-tolerant cluster gets a new head that reuses the state in Redis"):
        ray.wait_cluster_ready(cluster, timeouts.ready)
        after = _fields(ray_processes.until_head_answers(ray, cluster, READ_STATE, timeouts.ready))
    metrics["recovery_s"] = round(time.monotonic() - started, 2)
    probe = _stop_probe(ray, worker)
    failed = [line for line in probe if " 200 " not in f"{line} "]
    metrics["serve_requests_during_head_loss"] = len(probe)
    metrics["serve_failed_requests_during_head_loss"] = len(failed)
    new_head = ray.head_pod(cluster)
    assert new_head.metadata.uid != head.metadata.uid
    assert _storage_namespace(new_head) == storage, "the new head uses another Redis namespace"
    assert after["actor-id"] == before["actor-id"], "the detached actor was not the same after head loss"
    assert after["counter"] == "2", f"the detached actor lost its state: counter {after['counter']}"
    assert int(after["job-id"], 16) > int(before["job-id"], 16), (
        f"job ids restarted ({before['job-id']} then {after['job-id']}): the GCS did not reuse Redis"
    )
    assert after["serve-status"] == "RUNNING", after
    (still,) = ray.pods(cluster, "worker")
    assert still.metadata.uid == worker.metadata.uid, "the worker pod was replaced"
    # One request a second: a probe that stopped early saw too little of the head's absence to judge.
    assert len(probe) >= metrics["recovery_s"] / 2, (
        f"the probe made {len(probe)} requests in {metrics['recovery_s']}s"
    )
    assert not failed, f"the Serve app stopped answering while the head was away: {failed[:5]}"


@pytest.mark.usefixtures("redis_outlives_the_cluster")
@pytest.mark.parametrize("legacy", [False, True], ids=["gcsFaultToleranceOptions", "ft-enabled-annotation"])
def test_gcs_ft_cluster_deletion_cleans_its_redis_state(
    ray: Ray,
    cluster_values: dict[str, Any],
    profile: Any,
    timeouts: Timeouts,
    metrics: dict[str, float],
    legacy: bool,
) -> None:
    """GCS fault tolerance asked for with gcsFaultToleranceOptions, or the legacy way (the
    ray.io/ft-enabled annotation and RAY_REDIS_ADDRESS, as KubeRay's e2e raycluster_gcs_ft_test.go
    and ray-cluster.deprecate-gcs-ft.yaml): the head keeps its state in Redis under the storage
    namespace KubeRay gives it, and deleting the cluster empties it.

    Catches: a deleted GCS fault-tolerant RayCluster leaving its state in Redis (the cleanup
    finalizer off, as ENABLE_GCS_FT_REDIS_CLEANUP=false does); the legacy annotation no longer
    honoured (no storage namespace, no state in Redis); the head's RAY_external_storage_namespace
    not that namespace, or REDIS_PASSWORD set where Redis has none."""
    cluster, redis_pod = _ft_cluster(ray, cluster_values, profile, timeouts, legacy)
    head = ray.head_pod(cluster)
    storage = (head.metadata.annotations or {}).get("ray.io/external-storage-namespace", "")
    assert storage, f"{head.metadata.name} has no ray.io/external-storage-namespace: GCS FT is off"
    assert ray_processes.redis_keys(ray, redis_pod, storage) > 0, f"no state in Redis under {storage}"
    env = _env(head)
    given = env.get(STORAGE_NS_ENV)
    assert given is not None and given.value == storage, (
        f"the head's {STORAGE_NS_ENV} is not its storage namespace {storage}: {given}"
    )
    assert "REDIS_PASSWORD" not in env, "KubeRay set REDIS_PASSWORD on a head whose Redis has no password"
    started = time.monotonic()
    ray.delete("rayclusters", cluster)
    with behaviour("deleting a GCS fault-tolerant RayCluster removes its state from Redis"):
        wait_gone(ray.list_fn("rayclusters"), what=f"RayCluster {cluster}", timeout=timeouts.cleanup,
                  field_selector=f"metadata.name={cluster}")  # fmt: skip
        left = ray_processes.redis_keys(ray, redis_pod, storage)
    metrics["cleanup_s"] = round(time.monotonic() - started, 2)
    assert left == 0, f"{left} Redis keys of {storage} are left after the cluster was deleted"


def _env(pod: Any) -> dict[str, Any]:
    """The Ray container's environment variables by name."""
    return {var.name: var for var in pod.spec.containers[0].env or []}


REDIS_SECRET = "redis-password"


@pytest.mark.usefixtures("redis_outlives_the_cluster")
def test_gcs_ft_with_a_redis_password_from_a_secret_keeps_and_cleans_its_state(
    ray: Ray, cluster_values: dict[str, Any], profile: Any, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: GCS fault tolerance on a password-protected Redis, the password in a Secret, that
    does not reach Ray (no state in Redis), is written into the pod spec instead of referring to
    the Secret, points RAY_REDIS_ADDRESS elsewhere than the configured address, or leaves the
    deleted cluster's state in Redis (its cleanup without the password)."""
    password = f"krc-{uuid.uuid4().hex[:12]}"
    ray.core.create_namespaced_secret(
        ray.namespace, {"metadata": {"name": REDIS_SECRET}, "stringData": {"password": password}}
    )
    redis_pod = ray_processes.start_redis(ray, profile, timeouts, password=password)
    values = {**cluster_values, "name": FT_CLUSTER, "redis_address": ray_processes.REDIS_ADDRESS}
    ray.create("rayclusters", render("ray/raycluster.yaml", **values, redis_password_secret=REDIS_SECRET))
    ray.wait_cluster_ready(FT_CLUSTER, timeouts.ready)
    head = ray.head_pod(FT_CLUSTER)
    env = _env(head)
    address = env.get("RAY_REDIS_ADDRESS")
    assert address is not None and ray_processes.REDIS_ADDRESS in (address.value or ""), (
        f"RAY_REDIS_ADDRESS: {address}"
    )
    given = env.get("REDIS_PASSWORD")
    reference = given.value_from.secret_key_ref if given is not None and given.value_from else None
    assert reference is not None and reference.name == REDIS_SECRET and not given.value, (
        f"the head's REDIS_PASSWORD does not refer to Secret {REDIS_SECRET}: {given}"
    )
    _keeps_and_cleans_its_state(ray, redis_pod, head, timeouts, metrics, password)


def _keeps_and_cleans_its_state(
    ray: Ray,
    redis_pod: Any,
    head: Any,
    timeouts: Timeouts,
    metrics: dict[str, float],
    password: str,
    user: str = "",
) -> None:
    """The head keeps state in the protected Redis under its storage namespace, and deleting the
    cluster empties it (KubeRay's cleanup Job must authenticate as the head did)."""
    storage = _storage_namespace(head)
    assert ray_processes.redis_keys(ray, redis_pod, storage, password, user) > 0, (
        f"no state in the protected Redis under {storage}"
    )
    started = time.monotonic()
    ray.delete("rayclusters", FT_CLUSTER)
    with behaviour("deleting the RayCluster removes its state from the protected Redis"):
        wait_gone(ray.list_fn("rayclusters"), what=f"RayCluster {FT_CLUSTER}", timeout=timeouts.cleanup,
                  field_selector=f"metadata.name={FT_CLUSTER}")  # fmt: skip
        left = ray_processes.redis_keys(ray, redis_pod, storage, password, user)
    metrics["cleanup_s"] = round(time.monotonic() - started, 2)
    assert left == 0, f"{left} Redis keys of {storage} are left after the cluster was deleted"


REDIS_USER = "krc-gcs"


@pytest.mark.usefixtures("redis_outlives_the_cluster")
def test_gcs_ft_with_a_redis_user_keeps_and_cleans_its_state(
    ray: Ray, cluster_values: dict[str, Any], profile: Any, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """GCS fault tolerance on a Redis whose only way in is an ACL user (its default user off), with
    gcsFaultToleranceOptions.redisUsername and redisPassword given as values (KubeRay puts them in
    REDIS_USERNAME and REDIS_PASSWORD, and `--redis-username=$REDIS_USERNAME` into `ray start`).

    Catches: the username not reaching Ray (the head authenticates as Redis's default user, is
    refused, and never becomes ready), REDIS_USERNAME or REDIS_PASSWORD not set on the head as
    given, `--redis-username` not passed to `ray start`, or the cleanup Job not authenticating as
    that user (the deleted cluster's state left in Redis)."""
    password = f"krc-{uuid.uuid4().hex[:12]}"
    redis_pod = ray_processes.start_redis(ray, profile, timeouts, password=password, user=REDIS_USER)
    values = {**cluster_values, "name": FT_CLUSTER, "redis_address": ray_processes.REDIS_ADDRESS}
    body = render("ray/raycluster.yaml", **values, redis_username=REDIS_USER, redis_password=password)
    ray.create("rayclusters", body)
    ray.wait_cluster_ready(FT_CLUSTER, timeouts.ready)
    head = ray.head_pod(FT_CLUSTER)
    env = _env(head)
    for name, expected in (("REDIS_USERNAME", REDIS_USER), ("REDIS_PASSWORD", password)):
        given = env.get(name)
        assert given is not None and given.value == expected, (
            f"the head's {name} is not the value given: {given}"
        )
    start = " ".join([*(head.spec.containers[0].command or []), *(head.spec.containers[0].args or [])])
    assert "--redis-username" in start, f"`ray start` of the head gets no --redis-username: {start[:400]}"
    _keeps_and_cleans_its_state(ray, redis_pod, head, timeouts, metrics, password, REDIS_USER)
