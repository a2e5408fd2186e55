"""Area raycluster: a RayCluster becomes ready, is wired as documented, and goes away cleanly.

Each check's docstring names the KubeRay misbehaviour it exists to catch ("Catches: ...").
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.capabilities import Capabilities
from conformance.checks import NOT_APPLICABLE
from conformance.kube.manifests import manifest_values, render
from conformance.kube.pods import is_ready, restarts
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, wait_for, wait_gone
from conformance.profiles import Profile
from conformance.suites.shared import Shared
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("raycluster")

REPLICA_NAME = "ray.io/worker-group-replica-name"  # the hosts of one numOfHosts replica share it
DOCUMENTED_HEAD_PORTS = {
    "client": 10001,
    "gcs-server": 6379,
    "dashboard": 8265,
    "metrics": 8080,
    "serve": 8000,
}


def _create_ready(
    ray: Ray, values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> dict[str, Any]:
    started = time.monotonic()
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    with behaviour(f"RayCluster {values['name']} gets a Ready head pod"):
        wait_for(
            ray.core.list_namespaced_pod,
            is_ready,
            what=f"the head pod of {values['name']} to be Ready",
            timeout=timeouts.ready,
            describe=lambda p: f"{p.metadata.name}: {p.status.phase}",
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={values['name']},ray.io/node-type=head",
        )
    metrics["head_ready_s"] = round(time.monotonic() - started, 2)
    cluster = ray.wait_cluster_ready(values["name"], timeouts.ready)
    metrics["cluster_ready_s"] = round(time.monotonic() - started, 2)
    return cluster


def _conditions(cluster: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in cluster.get("status", {}).get("conditions", [])}


def test_head_only_cluster_becomes_ready(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a head-only RayCluster (no workerGroupSpecs) that never becomes ready, or gets workers."""
    cluster = _create_ready(
        ray, {**cluster_values, "name": "head-only", "head_num_cpus": 1}, timeouts, metrics
    )
    assert cluster["status"]["state"] == "ready"
    assert [p.metadata.labels["ray.io/node-type"] for p in ray.pods("head-only")] == ["head"]


def test_num_of_hosts_two_gives_replicas_times_two_pods(
    ray: Ray,
    cluster_values: dict[str, Any],
    capabilities: Capabilities,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: numOfHosts ignored (one pod per replica instead of replicas x numOfHosts), or the
    hosts of one replica not labelled as one replica."""
    values = {
        **cluster_values,
        "name": "multihost",
        "workers": [{"name": "pair", "replicas": 1, "num_of_hosts": 2}],
    }
    cluster = _create_ready(ray, values, timeouts, metrics)
    workers = ray.pods("multihost", "worker")
    assert len(workers) == 1 * 2, f"1 replica x numOfHosts 2 made {len(workers)} worker pods"
    assert cluster["status"].get("desiredWorkerReplicas") == 2, cluster["status"]
    if capabilities.feature_gates.get("RayMultiHostIndexing"):  # the gate that labels replicas
        replicas = {(p.metadata.labels or {}).get(REPLICA_NAME) for p in workers}
        assert len(replicas) == 1 and None not in replicas, f"the two hosts name replicas {replicas}"


@pytest.fixture(scope="module")
def shared(api: client.ApiClient, module_namespace: str) -> Ray:
    return Ray(api, module_namespace)


@pytest.fixture(scope="module")
def head_and_workers(
    shared: Ray, profile: Profile, ray_version: str, timeouts: Timeouts
) -> Shared[dict[str, float]]:
    """One head + two workers cluster that the wiring checks below share, made by the first check
    that asks (`.get()` returns its timings), so KubeRay failing to make it fails that check."""

    def make() -> dict[str, float]:
        timings: dict[str, float] = {}
        values = {
            **manifest_values(profile, ray_version),
            "name": "hw",
            "workers": [{"name": "small", "replicas": 2}],
        }
        _create_ready(shared, values, timeouts, timings)
        started = time.monotonic()
        with behaviour("both workers of RayCluster hw become Ready"):
            wait_for(
                shared.core.list_namespaced_pod,
                lambda _p: sum(is_ready(p) for p in shared.pods("hw", "worker")) == 2,
                what="both workers of hw to be Ready",
                timeout=timeouts.ready,
                describe=lambda p: f"{p.metadata.name}: {p.status.phase}",
                namespace=shared.namespace,
                label_selector="ray.io/cluster=hw,ray.io/node-type=worker",
            )
        timings["workers_ready_s"] = round(timings["cluster_ready_s"] + time.monotonic() - started, 2)
        return timings

    return Shared(make)


@pytest.mark.requires("gate:RayClusterStatusConditions")
@pytest.mark.smoke
def test_head_and_workers_report_documented_conditions(
    head_and_workers: Shared[dict[str, float]], shared: Ray, metrics: dict[str, float]
) -> None:
    """Catches: a ready cluster whose status lacks HeadPodReady/RayClusterProvisioned, is not
    `ready`, or miscounts its ready workers."""
    metrics.update(head_and_workers.get())
    cluster = shared.get("rayclusters", "hw")
    conditions = _conditions(cluster)
    assert conditions.get("HeadPodReady") == "True", conditions
    assert conditions.get("RayClusterProvisioned") == "True", conditions
    assert cluster["status"]["state"] == "ready"
    assert cluster["status"].get("readyWorkerReplicas") == 2


@pytest.mark.smoke
def test_head_service_is_headless_with_documented_ports(
    head_and_workers: Shared[dict[str, float]], shared: Ray, profile: Profile
) -> None:
    """Catches: a head Service that gets a cluster IP (ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE behaviour
    by default), lacks a documented port, or does not select the head pod."""
    if profile.exposes_head:
        pytest.skip(NOT_APPLICABLE + f"the profile exposes the head Service ({profile.head_service_type})")
    head_and_workers.get()
    service = shared.core.read_namespaced_service("hw-head-svc", shared.namespace)
    assert service.spec.cluster_ip == "None", f"head service has clusterIP {service.spec.cluster_ip}"
    ports = {p.name: p.port for p in service.spec.ports}
    for name, port in DOCUMENTED_HEAD_PORTS.items():
        assert ports.get(name) == port, f"port {name}: {ports.get(name)} (documented {port})"
    head_labels = shared.head_pod("hw").metadata.labels or {}
    selector = service.spec.selector or {}
    assert selector and selector.items() <= head_labels.items(), f"selector {selector} misses the head"


def test_workers_reach_the_head_through_cluster_dns(
    head_and_workers: Shared[dict[str, float]], shared: Ray
) -> None:
    """Catches: a head address KubeRay gives workers (FQ_RAY_IP) that is not the head Service's
    cluster DNS name, or that does not lead a worker to the head pod's GCS port."""
    head_and_workers.get()
    worker = shared.pods("hw", "worker")[0]
    address = _env_value(worker, "FQ_RAY_IP")
    service = shared.core.read_namespaced_service("hw-head-svc", shared.namespace)
    assert address is not None, f"KubeRay gave worker {worker.metadata.name} no FQ_RAY_IP"
    expected = f"hw-head-svc.{shared.namespace}.svc."
    assert address.startswith(expected), f"workers are told the head is {address}, not {expected}<domain>"
    out = shared.exec(worker, ["python", "-c", CONNECT, address, "6379"])
    head_ip = shared.head_pod("hw").status.pod_ip
    # Headless (the default), the name is the head pod's address; with a cluster IP (an exposing
    # profile, ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE) it is the Service's, whose selector the
    # headless-Service check holds to the head pod.
    cluster_ip = service.spec.cluster_ip
    peers = {head_ip} | ({cluster_ip} if cluster_ip not in (None, "None") else set())
    assert any(f"connected {ip}" in out for ip in peers), (
        f"from worker {worker.metadata.name} to {address}:6379 (head {sorted(peers)}): {out.strip()}"
    )


def _env_value(pod: client.V1Pod, name: str) -> str | None:
    """`name`'s value in the pod's first container that sets it."""
    for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        for env in container.env or []:
            if env.name == name:
                return env.value
    return None


@pytest.mark.smoke
def test_a_task_submitted_through_the_head_runs_on_a_worker(
    head_and_workers: Shared[dict[str, float]], shared: Ray
) -> None:
    """Catches: workers that are Ready pods but never joined Ray (a task needing a worker's CPU,
    the head having none, is never placed on one of the worker pods)."""
    head_and_workers.get()
    out = shared.python_in_head("hw", WHERE_A_TASK_RUNS)
    worker_ips = {p.status.pod_ip for p in shared.pods("hw", "worker")}
    ran_on = out.split("ran-on", 1)[1].split()[0]
    assert ran_on in worker_ips, f"task ran on {ran_on}, workers are {worker_ips}"


# Connects from a pod to argv[1]:argv[2]; prints the peer's address, or why it could not.
CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    print("connected", s.getpeername()[0])
except OSError as exc:
    print("unreachable", type(exc).__name__, exc)
"""

# A one-CPU task (the head offers no CPU): where it ran, or "none" when no worker took it in time.
WHERE_A_TASK_RUNS = """
import ray
from ray.exceptions import GetTimeoutError
ray.init(address="auto", logging_level="ERROR")
@ray.remote(num_cpus=1)
def where():
    return ray.util.get_node_ip_address()
try:
    print("ran-on", ray.get(where.remote(), timeout=120))
except GetTimeoutError:
    print("ran-on none-in-120s")
"""


def test_image_change_does_not_restart_existing_pods(
    head_and_workers: Shared[dict[str, float]], shared: Ray, timeouts: Timeouts
) -> None:
    """Catches: an image change (not applied in place by KubeRay) that replaces or restarts running
    pods. The same change adds a third worker: that new pod shows the operator reconciled this
    spec (KubeRay keeps no observedGeneration up to date), or the window would prove nothing."""
    head_and_workers.get()
    before = {p.metadata.uid: restarts(p) for p in shared.pods("hw")}
    spec = shared.get("rayclusters", "hw")["spec"]
    image = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    groups = spec["workerGroupSpecs"]
    groups[0].update(replicas=3, maxReplicas=3)
    patch = {"spec": {"workerGroupSpecs": groups, "headGroupSpec": {"template": {"spec": {"containers": [
        {"name": "ray-head", "image": image + "-changed"}]}}}}}  # fmt: skip
    shared.patch("rayclusters", "hw", patch)
    with behaviour("the operator reconciles the changed spec (a third worker is made)"):
        wait_for(
            shared.core.list_namespaced_pod,
            lambda pod: pod.metadata.uid not in before,
            what="a third worker of hw",
            timeout=timeouts.apply,
            namespace=shared.namespace,
            label_selector="ray.io/cluster=hw,ray.io/node-type=worker",
        )
    # Not every spec change is applied in place: for the observation window no pod that ran
    # before the change may be replaced or restarted.
    broken = holds_for(
        shared.core.list_namespaced_pod,
        lambda pod: pod.metadata.uid not in before or restarts(pod) == before[pod.metadata.uid],
        what="the pods of hw are neither replaced nor restarted",
        duration=timeouts.apply,
        namespace=shared.namespace,
        label_selector="ray.io/cluster=hw",
    )
    gone = set(before) - {p.metadata.uid for p in shared.pods("hw")}
    assert not broken and not gone, f"after an image change: {broken or f'{len(gone)} pods replaced'}"


@pytest.mark.smoke
def test_deleting_the_raycluster_removes_its_pods_and_services(
    head_and_workers: Shared[dict[str, float]], shared: Ray, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: pods or Services of a deleted RayCluster left behind (owner references missing)."""
    head_and_workers.get()
    started = time.monotonic()
    shared.delete("rayclusters", "hw")
    with behaviour("deleting a RayCluster removes its pods and services"):
        wait_gone(
            shared.core.list_namespaced_pod,
            what="the pods of hw",
            timeout=timeouts.cleanup,
            namespace=shared.namespace,
            label_selector="ray.io/cluster=hw",
        )
        wait_gone(
            shared.core.list_namespaced_service,
            what="the services of hw",
            timeout=timeouts.cleanup,
            namespace=shared.namespace,
            label_selector="ray.io/cluster=hw",
        )
    metrics["cleanup_s"] = round(time.monotonic() - started, 2)


# -- data preservation -------------------------------------------------------------------

CLAIM = "data"
MOUNT = "/data"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"  # set by every external provisioner's library


@pytest.fixture
def claim(api: client.ApiClient, namespace: str) -> str:
    """A claim that names no StorageClass: the cluster's default class provisions its volume
    (on the local provider, local-path-provisioner makes a hostPath one on the node). With
    WaitForFirstConsumer it stays Pending until the first pod that mounts it is scheduled."""
    pvc = render("storage/volume.yaml", namespace=namespace, claim=CLAIM)
    client.CoreV1Api(api).create_namespaced_persistent_volume_claim(namespace, pvc)
    return CLAIM


def _provisioned_by_the_default_class(ray: Ray, claim: str, capabilities: Capabilities) -> None:
    """The claim's volume was made on demand by the default class's provisioner, for this claim."""
    pvc = ray.core.read_namespaced_persistent_volume_claim(claim, ray.namespace)
    assert pvc.spec.storage_class_name in capabilities.default_storage_classes, (
        f"claim {claim} got class {pvc.spec.storage_class_name!r}, "
        f"not the default ({', '.join(capabilities.default_storage_classes)})"
    )
    assert pvc.spec.volume_name, f"claim {claim} is bound to no volume"
    pv = ray.core.read_persistent_volume(pvc.spec.volume_name)
    provisioner = client.StorageV1Api(ray.api).read_storage_class(pvc.spec.storage_class_name).provisioner
    assert (pv.metadata.annotations or {}).get(PROVISIONED_BY) == provisioner, (
        f"volume {pv.metadata.name} was not provisioned by {provisioner}: {pv.metadata.annotations}"
    )
    assert pv.spec.storage_class_name == pvc.spec.storage_class_name
    assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (ray.namespace, claim)
    assert pv.spec.claim_ref.uid == pvc.metadata.uid, "the volume was made for another claim of that name"


CHMOD_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}


def _mount_claim(pod_spec: dict[str, Any], claim: str) -> None:
    mount = [{"name": "data", "mountPath": MOUNT}]
    ray_container = pod_spec["containers"][0]
    pod_spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    ray_container["volumeMounts"] = mount
    # A new volume may belong to root (hostPath ones, local-path-provisioner's among them, ignore
    # fsGroup) and Ray runs as another user; this lets it write whatever the class makes.
    pod_spec["initContainers"] = [{
        "name": "writable", "image": ray_container["image"],
        "imagePullPolicy": ray_container["imagePullPolicy"],
        "command": ["chmod", "0777", MOUNT], "securityContext": {"runAsUser": 0},
        "resources": CHMOD_RESOURCES,
        "volumeMounts": mount,
    }]  # fmt: skip


def _read_back(ray: Ray, values: dict[str, Any], claim: str, file: str, timeouts: Timeouts) -> str:
    """Start a pod on the claim that prints `file` and removes it (the volume outlives the run)."""
    name = f"read-{file}"
    pod = render("storage/reader.yaml", **{**values, "name": name, "claim": claim, "file": file})
    ray.core.create_namespaced_pod(ray.namespace, pod)
    done = wait_for(
        ray.core.list_namespaced_pod,
        lambda p: p.status.phase in ("Succeeded", "Failed"),
        what=f"pod {name} to read {MOUNT}/{file}",
        timeout=timeouts.ready,
        describe=lambda p: p.status.phase or "",
        namespace=ray.namespace,
        field_selector=f"metadata.name={name}",
    )
    log = ray.core.read_namespaced_pod_log(name, ray.namespace)
    assert done.status.phase == "Succeeded", f"reading {MOUNT}/{file} failed: {log[-300:]}"
    return log


def _pods_gone(ray: Ray, cluster: str, behaviour_name: str, timeouts: Timeouts) -> None:
    with behaviour(behaviour_name):
        wait_gone(
            ray.core.list_namespaced_pod,
            what=f"the pods of {cluster}",
            timeout=timeouts.cleanup,
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={cluster}",
        )


def _claim_kept(ray: Ray, claim: str) -> None:
    try:
        pvc = ray.core.read_namespaced_persistent_volume_claim(claim, ray.namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise AssertionError(f"claim {claim} was deleted with the cluster") from exc
        raise
    assert pvc.metadata.deletion_timestamp is None, f"claim {claim} is being deleted with the cluster"
    assert pvc.status.phase == "Bound", f"claim {claim} is {pvc.status.phase}"


@pytest.mark.requires("default_storage_class")
def test_a_claim_outlives_its_raycluster_with_its_data(
    ray: Ray,
    cluster_values: dict[str, Any],
    claim: str,
    capabilities: Capabilities,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a user's claim deleted with the RayCluster that mounted it, or its data lost."""
    name, marker = "volume", uuid.uuid4().hex
    body = render("ray/raycluster.yaml", **{**cluster_values, "name": name, "head_num_cpus": 1})
    _mount_claim(body["spec"]["headGroupSpec"]["template"]["spec"], claim)
    ray.create("rayclusters", body)
    ray.wait_cluster_ready(name, timeouts.ready)
    _provisioned_by_the_default_class(ray, claim, capabilities)
    ray.python_in_head(name, f"open('{MOUNT}/marker', 'w').write('{marker}')")
    started = time.monotonic()
    ray.delete("rayclusters", name)
    _pods_gone(ray, name, "deleting a RayCluster removes its pods", timeouts)
    metrics["cleanup_s"] = round(time.monotonic() - started, 2)
    _claim_kept(ray, claim)
    assert _read_back(ray, cluster_values, claim, "marker", timeouts).strip() == marker


@pytest.mark.requires("default_storage_class")
def test_a_rayjob_result_on_a_claim_is_readable_after_its_cluster_is_gone(
    ray: Ray,
    cluster_values: dict[str, Any],
    claim: str,
    capabilities: Capabilities,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a RayJob's claim removed with its cluster by shutdownAfterJobFinishes, or the job's
    cluster not removed at all."""
    name = "writes-result"
    body = render(
        "ray/rayjob.yaml",
        **{**cluster_values, "name": name, "entrypoint": WRITE_RESULT, "shutdown_after_job_finishes": True},
        # The default submitter asks for more CPU than a busy two-core node may have left.
        submitter_image=cluster_values["image"],
    )
    body["spec"]["ttlSecondsAfterFinished"] = 0
    _mount_claim(body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"], claim)
    started = time.monotonic()
    ray.create("rayjobs", body)
    with behaviour(f"RayJob {name} finishes"):
        job = ray.wait(
            "rayjobs",
            name,
            lambda j: j.get("status", {}).get("jobDeploymentStatus") in ("Complete", "Failed"),
            what=f"RayJob {name} to finish",
            timeout=timeouts.ready + timeouts.cleanup,
        )
    assert job["status"].get("jobStatus") == "SUCCEEDED", f"RayJob {name}: {job['status']}"
    metrics["job_complete_s"] = round(time.monotonic() - started, 2)
    _provisioned_by_the_default_class(ray, claim, capabilities)
    cluster = job["status"]["rayClusterName"]
    _pods_gone(ray, cluster, "shutdownAfterJobFinishes deletes the RayJob's cluster", timeouts)
    assert not ray.list_fn("rayclusters")(field_selector=f"metadata.name={cluster}")["items"]
    _claim_kept(ray, claim)
    assert _read_back(ray, cluster_values, claim, "result", timeouts).strip() == str(sum(range(1000)))


# Runs on the RayJob's head; the result goes to the claim, not to the job's log.
WRITE_RESULT = (
    'python -c "import ray; ray.init(); f = ray.remote(lambda: sum(range(1000))); '
    f"open('{MOUNT}/result', 'w').write(str(ray.get(f.remote())))\""
)
