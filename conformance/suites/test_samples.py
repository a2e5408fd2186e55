"""Area samples: KubeRay's own sample manifests, from the version under test, do what KubeRay's
sampleyaml test says they do (ray-operator/test/sampleyaml at v1.7.0).

One check per sample file (conformance/samples.py reads, adapts and judges them). A RayCluster
sample: head ready with the documented conditions, as many worker pods as its groups ask, every
pod ready and able to run a Ray driver. A RayJob sample: its cluster so, then Complete with its
job SUCCEEDED (an InteractiveMode job only its cluster). A RayService sample: Running with serve
endpoints and every application RUNNING.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from conformance import samples
from conformance.capabilities import Capabilities
from conformance.checks import NOT_APPLICABLE, RUN_KEY
from conformance.environment import Environment
from conformance.errors import HarnessError
from conformance.install import operator_args, operator_facts
from conformance.kube.manifests import pod_resources
from conformance.kube.pods import is_ready
from conformance.kube.ray import ExecError, Ray
from conformance.kube.wait import WaitTimeout, behaviour, wait_for
from conformance.profiles import Profile
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("samples")

DRIVER = ["python", "-c", "import ray; ray.init(); print(ray.cluster_resources())"]
PLURALS = {"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One check per sample file of the KubeRay under test, listed when the checks are collected."""
    if "sample_file" not in metafunc.fixturenames:
        return
    run = metafunc.config.stash.get(RUN_KEY, None)
    try:
        if run is None:
            raise samples.SamplesUnknown("no conformance run", NOT_APPLICABLE + "no conformance run")
        folder = samples.locate(run.environment)
        names = samples.listing(folder)
        params = [pytest.param((folder, name), id=name) for name in names]
    except samples.SamplesUnknown as exc:
        params = [pytest.param((None, exc.outcome), id="no-samples")]
    metafunc.parametrize("sample_file", params)


@pytest.mark.smoke("ray-cluster.sample.yaml", "no-samples")
def test_sample_works_as_kuberay_ships_it(
    sample_file: tuple[Path | None, str],
    conformance: Environment,
    api: client.ApiClient,
    namespace: str,
    capabilities: Capabilities,
    profile: Profile,
    ray_version: str,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a sample KubeRay ships (and users start from) that this KubeRay does not run: a
    cluster that never becomes ready, misses its conditions or worker pods, or whose pods cannot
    run a Ray driver; a RayJob that does not complete SUCCEEDED; a RayService whose applications
    never run."""
    folder, name = sample_file
    if folder is None:
        _without_samples(name)
    sample = samples.adapt(samples.load(folder / name), _adaptation(profile, ray_version))
    missing = samples.needs(sample, _offer(api, conformance, capabilities, sample))
    if missing:
        pytest.skip(NOT_APPLICABLE + "the sample needs " + "; ".join(missing))
    ray = Ray(api, namespace)
    started = time.monotonic()
    main = _create(api, namespace, samples.in_namespace(sample, namespace))
    checks = {"RayCluster": _cluster_sample, "RayJob": _job_sample, "RayService": _service_sample}
    checks[sample.kind](ray, main, capabilities, timeouts, metrics)
    metrics["sample_s"] = round(time.monotonic() - started, 2)


def _without_samples(outcome: str) -> None:
    if outcome.startswith(NOT_APPLICABLE):
        pytest.skip(outcome)
    raise HarnessError(
        outcome, "check GOPROXY or pass --kuberay-source DIR (a checkout of ray-project/kuberay)"
    )


def _adaptation(profile: Profile, ray_version: str) -> samples.Adaptation:
    return samples.Adaptation(
        ray_image=profile.ray_image(ray_version),
        ray_version=ray_version,
        redis_image=profile.redis_image,
        pull_policy=profile.pull_policy,
        head_resources=pod_resources(profile.head_resources),
        worker_resources=pod_resources(profile.worker_resources),
    )


def _offer(
    api: client.ApiClient, environment: Environment, caps: Capabilities, sample: samples.SampleManifest
) -> samples.Offer:
    core = client.CoreV1Api(api)
    nodes = core.list_node().items
    facts = environment.cluster.facts if environment.cluster else {}
    operator = operator_facts.observed_operator(api, environment.operator_namespace)
    flags = operator_args.parse_flags(operator.args)
    return samples.Offer(
        served=_served(api, sample),
        node_images=frozenset(
            samples.normalized_image(image)
            for node in nodes
            for entry in node.status.images or []
            for image in entry.names or []
            if "@" not in image
        ),
        node_labels=tuple(dict(node.metadata.labels or {}) for node in nodes),
        extended_resources=_extended_resources(nodes),
        csi_drivers=frozenset(d.metadata.name for d in client.StorageV1Api(api).list_csi_driver().items),
        feature_gates=caps.feature_gates,
        batch_scheduler=flags.get("batch-scheduler", ""),
        pulls_images=bool(facts.get("pulls_images", True)),
        reaches_internet=bool(facts.get("pods_reach_internet", True)),
    )


def _served(api: client.ApiClient, sample: samples.SampleManifest) -> dict[tuple[str, str], bool]:
    """For each API the sample uses that the cluster serves: whether its objects are namespaced."""
    resources_ = dynamic.DynamicClient(api).resources
    served = {}
    for doc in sample.documents:
        key = (str(doc.get("apiVersion")), str(doc.get("kind")))
        try:
            served[key] = bool(resources_.get(api_version=key[0], kind=key[1]).namespaced)
        except ResourceNotFoundError:
            continue
    return served


def _extended_resources(nodes: list[Any]) -> dict[str, int]:
    most: dict[str, int] = {}
    for node in nodes:
        for name, amount in (node.status.allocatable or {}).items():
            if "/" in name and str(amount).isdigit():
                most[name] = max(most.get(name, 0), int(amount))
    return most


def _create(api: client.ApiClient, namespace: str, sample: samples.SampleManifest) -> dict[str, Any]:
    """Create the sample's objects in the check's namespace, in file order; returns the Ray object
    the check follows, as the API server made it (a `generateName` gets its name there)."""
    resources_ = dynamic.DynamicClient(api).resources
    main: dict[str, Any] = {}
    for doc in sample.documents:
        made = resources_.get(api_version=doc["apiVersion"], kind=doc["kind"]).create(
            body=doc, namespace=namespace
        )
        if doc is sample.main:
            main = made.to_dict()
    return main


# -- what KubeRay's sampleyaml test asserts, per kind ---------------------------------------------


def _cluster_sample(
    ray: Ray, made: dict[str, Any], caps: Capabilities, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    name = made["metadata"]["name"]
    started = time.monotonic()
    cluster = _ready_with_conditions(ray, name, caps, timeouts)
    metrics["cluster_ready_s"] = round(time.monotonic() - started, 2)
    _pods_as_asked(ray, cluster, timeouts)
    for pod in ray.pods(name):
        try:
            ray.exec(pod, DRIVER)
        except ExecError as exc:
            pytest.fail(f"a Ray driver cannot run in pod {pod.metadata.name} of the sample's cluster: {exc}")


def _job_sample(
    ray: Ray, made: dict[str, Any], caps: Capabilities, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    name = made["metadata"]["name"]
    started = time.monotonic()
    with behaviour(f"RayJob {name} names its RayCluster"):
        job = ray.wait(
            "rayjobs",
            name,
            lambda obj: bool(obj.get("status", {}).get("rayClusterName")),
            what=f"RayJob {name} to name its RayCluster",
            timeout=timeouts.ready,
        )
    cluster = ray.wait_cluster_ready(job["status"]["rayClusterName"], timeouts.ready)
    metrics["cluster_ready_s"] = round(time.monotonic() - started, 2)
    _pods_as_asked(ray, cluster, timeouts)
    if made["spec"].get("submissionMode") == "InteractiveMode":
        return  # it waits for a job id from the user; its cluster is what KubeRay promises
    try:
        job = ray.wait(
            "rayjobs",
            name,
            lambda obj: obj.get("status", {}).get("jobDeploymentStatus") in ("Complete", "Failed"),
            what=f"RayJob {name} to finish",
            timeout=timeouts.ready,
            describe=_job_state,
        )
    except WaitTimeout as exc:
        _unfinished(ray, name, timeouts, exc)
    metrics["job_done_s"] = round(time.monotonic() - started, 2)
    status = job["status"]
    assert (status.get("jobDeploymentStatus"), status.get("jobStatus")) == ("Complete", "SUCCEEDED"), (
        f"RayJob {name} ended {_job_state(job)}: {status.get('message', '')}"
    )


def _unfinished(ray: Ray, name: str, timeouts: Timeouts, exc: WaitTimeout) -> None:
    """A sample whose own job is still RUNNING has shown what KubeRay does; its length is the sample's."""
    status = ray.get("rayjobs", name).get("status", {})
    if (status.get("jobDeploymentStatus"), status.get("jobStatus")) == ("Running", "RUNNING"):
        pytest.skip(
            NOT_APPLICABLE + f"the sample's own job still runs after {timeouts.ready:.0f}s (timeouts.ready), "
            "with KubeRay reporting it Running; its end was not observed"
        )
    raise AssertionError(f"RayJob {name} finishes: {exc}") from exc


def _job_state(job: dict[str, Any]) -> str:
    status = job.get("status", {})
    return f"{status.get('jobDeploymentStatus')}/{status.get('jobStatus')}"


def _service_sample(
    ray: Ray, made: dict[str, Any], caps: Capabilities, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    name = made["metadata"]["name"]
    started = time.monotonic()
    with behaviour(f"RayService {name} runs its applications with serve endpoints"):
        service = ray.wait(
            "rayservices",
            name,
            _serving,
            what=f"RayService {name} to be Running with serve endpoints and every application RUNNING",
            timeout=timeouts.ready,
            describe=_service_state,
        )
    metrics["service_ready_s"] = round(time.monotonic() - started, 2)
    cluster = service["status"]["activeServiceStatus"]["rayClusterName"]
    assert is_ready(ray.head_pod(cluster)), f"the head of {cluster} is not ready"


def _serving(service: dict[str, Any]) -> bool:
    status = service.get("status", {})
    apps = (status.get("activeServiceStatus") or {}).get("applications") or {}
    return (
        status.get("serviceStatus") == "Running"
        and int(status.get("numServeEndpoints") or 0) > 0
        and bool(apps)
        and all(app.get("status") == "RUNNING" for app in apps.values())
    )


def _service_state(service: dict[str, Any]) -> str:
    status = service.get("status", {})
    apps = (status.get("activeServiceStatus") or {}).get("applications") or {}
    states = {name: app.get("status") for name, app in apps.items()}
    endpoints = status.get("numServeEndpoints")
    return f"serviceStatus={status.get('serviceStatus')} endpoints={endpoints} apps={states}"


# -- shared by the cluster and job samples --------------------------------------------------------


def _ready_with_conditions(ray: Ray, name: str, caps: Capabilities, timeouts: Timeouts) -> dict[str, Any]:
    conditions = caps.feature_gates.get("RayClusterStatusConditions", False)

    def ready(obj: dict[str, Any]) -> bool:
        status = obj.get("status", {})
        found = {c["type"]: (c["status"], c.get("reason")) for c in status.get("conditions", [])}
        documented = found.get("HeadPodReady") == ("True", "HeadPodRunningAndReady") and found.get(
            "RayClusterProvisioned"
        ) == ("True", "AllPodRunningAndReadyFirstTime")
        return status.get("state") == "ready" and (documented or not conditions)

    with behaviour(f"RayCluster {name} becomes ready with HeadPodReady and RayClusterProvisioned"):
        return ray.wait(
            "rayclusters",
            name,
            ready,
            what=f"RayCluster {name} to be ready with its documented conditions",
            timeout=timeouts.ready,
            describe=_cluster_state,
        )


def _cluster_state(obj: dict[str, Any]) -> str:
    status = obj.get("status", {})
    conditions = [(c["type"], c["status"], c.get("reason")) for c in status.get("conditions", [])]
    return f"state={status.get('state')} conditions={conditions}"


def _pods_as_asked(ray: Ray, cluster: dict[str, Any], timeouts: Timeouts) -> None:
    """As many worker pods as the groups ask (replicas x numOfHosts), all of them and the head ready."""
    name = cluster["metadata"]["name"]
    asked = sum(
        int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        for group in cluster["spec"].get("workerGroupSpecs") or []
    )

    def live() -> list[client.V1Pod]:
        return [p for p in ray.pods(name) if p.metadata.deletion_timestamp is None]

    def settled(_event: Any) -> bool:
        pods = live()
        workers = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker"]
        return len(workers) == asked and all(is_ready(p) for p in pods)

    with behaviour(f"RayCluster {name} runs {asked} ready worker pods and a ready head"):
        wait_for(
            ray.core.list_namespaced_pod,
            settled,
            what=f"{asked} ready workers and a ready head of {name}",
            timeout=timeouts.ready,
            describe=lambda _p: ", ".join(
                f"{p.metadata.name}: {p.status.phase} ready={is_ready(p)}" for p in live()
            ),
            namespace=ray.namespace,
            label_selector=f"ray.io/cluster={name}",
        )
    # A zero is left out of the status (omitempty), as KubeRay's own test reads it: 0.
    desired = int(ray.get("rayclusters", name).get("status", {}).get("desiredWorkerReplicas") or 0)
    assert desired == asked, (
        f"RayCluster {name} reports desiredWorkerReplicas {desired}, its groups ask {asked}"
    )
