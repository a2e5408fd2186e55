"""Area operator: the KubeRay operator as installed is what its Helm chart promises."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from conformance.capabilities import Capabilities
from conformance.checks import NOT_APPLICABLE, RUN_LABEL
from conformance.environment import Environment
from conformance.errors import HarnessError
from conformance.install import (
    crd_drift,
    kuberay_chart,
    operator_facts,
    operator_spec,
    operator_upgrade,
    scoped_operator,
)
from conformance.kube import namespaces
from conformance.kube import rayservice as rs
from conformance.kube.manifests import manifest_values, render
from conformance.kube.pods import is_serving, restarts
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, poll_until, wait_for
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.suites import cronjobs, serving
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("operator")

KEEPS_V1ALPHA1 = ("rayclusters", "rayjobs", "rayservices")


def _facts(conformance: Environment, api: client.ApiClient) -> operator_facts.OperatorFacts:
    return operator_facts.observed_operator(api, conformance.operator_namespace)


@pytest.mark.no_pods
@pytest.mark.smoke
def test_crds_are_served_at_v1_and_v1alpha1_is_kept(conformance: Environment, api: client.ApiClient) -> None:
    """Catches: a Ray CRD missing, not served at v1, or no longer serving the deprecated v1alpha1
    that existing manifests still name."""
    served = _facts(conformance, api).served_crd_versions
    for plural in KEEPS_V1ALPHA1:
        versions = served.get(plural, ())
        assert "v1" in versions, f"{plural}.ray.io is not served at v1: {versions or 'no such CRD'}"
        assert "v1alpha1" in versions, f"{plural}.ray.io no longer serves v1alpha1: {versions}"


@pytest.mark.no_pods
@pytest.mark.requires("kuberay>=1.6.0")  # the RayCronJob CRD first shipped with 1.6.0
def test_raycronjob_crd_is_served_at_v1(conformance: Environment, api: client.ApiClient) -> None:
    """Catches: an install of 1.6.0 or newer without the RayCronJob CRD, or one not served at v1."""
    served = _facts(conformance, api).served_crd_versions
    assert "v1" in served.get("raycronjobs", ()), f"raycronjobs.ray.io: {served.get('raycronjobs')}"


def _promised(conformance: Environment) -> kuberay_chart.Promised:
    if conformance.kuberay.promised is None:
        pytest.skip(
            NOT_APPLICABLE + f"kuberay.install is {conformance.options.kuberay_install}: the harness "
            "installed no chart and has none of its files to compare with"
        )
    return conformance.kuberay.promised


@pytest.mark.no_pods
@pytest.mark.smoke
def test_feature_gates_match_the_chart_defaults(conformance: Environment, api: client.ApiClient) -> None:
    """The gates the Deployment passes (as Helm, kustomize or the harness rendered it, read back)
    over the binary's defaults, against the install source's defaults with the profile's overrides.

    Catches: an operator running with a feature gate other than its install's own files promise
    (a gate turned off or on behind the chart's back, a binary whose defaults differ)."""
    promised = _promised(conformance)
    facts = _facts(conformance, api)
    running = kuberay_chart.running_gates(facts, promised.binary_gates)
    mismatched = kuberay_chart.gate_mismatches(running, promised.feature_gates)
    assert not mismatched, f"feature gates differ from {promised.origin}: {mismatched} (args: {facts.args})"


@pytest.mark.no_pods
def test_leader_election_is_on_and_the_lease_is_held(conformance: Environment, api: client.ApiClient) -> None:
    """Catches: leader election other than the install's files promise, or its Lease
    (`ray-operator-leader`) not held by a running operator pod."""
    promised = _promised(conformance)
    facts = _facts(conformance, api)
    assert facts.leader_election == promised.leader_election, (
        f"the operator runs with leader election {'on' if facts.leader_election else 'off'}, "
        f"{promised.origin} says {'on' if promised.leader_election else 'off'} (args: {facts.args})"
    )
    if promised.leader_election:
        assert facts.lease_held, f"lease {operator_spec.LEASE_NAME} is not held by a current operator pod"


# The control-plane metrics KubeRay documents for a RayCluster (ray-operator/controllers/ray/metrics/).
CLUSTER_METRICS = (
    "kuberay_cluster_info",
    "kuberay_cluster_condition_provisioned",
    "kuberay_cluster_provisioned_duration_seconds",
)
METRICS_PORT = 8080  # the chart's container port `http`, which its probes also read /metrics from


def test_operator_serves_its_control_plane_metrics_for_a_raycluster(
    conformance: Environment,
    api: client.ApiClient,
    ray: Ray,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: an operator serving none of KubeRay's control-plane metrics although the chart turns
    them on (`metrics.enabled`, on by default: `--enable-metrics` dropped on the way), or metrics that
    do not follow the RayCluster it reconciles (its info, its Provisioned condition, the seconds it
    took to provision)."""
    facts = _facts(conformance, api)
    if "--enable-metrics=false" in facts.args:
        pytest.skip(NOT_APPLICABLE + "the operator runs with --enable-metrics=false (off as installed)")
    ray.create("rayclusters", render("ray/raycluster.yaml", **{**cluster_values, "name": "metered"}))
    ready = ray.wait_cluster_ready("metered", timeouts.ready)
    uid = ready["metadata"]["uid"]

    def samples_for_the_cluster() -> dict[str, Sample] | None:
        # Every serving pod of the Deployment, read afresh each time: a lease can still name a pod
        # that a rollout has just replaced, and each replica serves the collectors of its own cache.
        found = {
            s.name: s
            for pod in _serving_operator_pods(api, facts)
            for s in _scrape(api, facts.namespace, pod)
            if s.labels.get("uid") == uid
        }
        return found if set(CLUSTER_METRICS) <= set(found) else None

    with behaviour("the operator serves KubeRay's metrics for RayCluster metered"):
        found = poll_until(
            samples_for_the_cluster,
            what=f"{', '.join(CLUSTER_METRICS)} for RayCluster metered on :{METRICS_PORT}/metrics",
            timeout=timeouts.apply,
            describe=lambda: _metric_names(api, facts),
        )
    info = found["kuberay_cluster_info"]
    assert (info.labels.get("name"), info.labels.get("namespace"), info.labels.get("owner_kind")) == (
        "metered",
        ray.namespace,
        "None",
    ), f"kuberay_cluster_info: {info.labels}"
    provisioned = found["kuberay_cluster_condition_provisioned"]
    assert provisioned.labels.get("condition") == "true" and provisioned.value == 1, provisioned
    took = found["kuberay_cluster_provisioned_duration_seconds"].value
    assert 0 < took <= timeouts.ready, f"provisioned in {took}s by the metric, the cluster is ready"
    metrics["provisioned_metric_s"] = round(took, 2)


def _serving_operator_pods(api: client.ApiClient, facts: operator_facts.OperatorFacts) -> list[str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(facts.namespace).items
    ours = [
        p.metadata.name
        for p in pods
        if p.metadata.name.startswith(f"{facts.deployment}-")
        and is_serving(p)
        and p.metadata.deletion_timestamp is None  # a replaced pod answers 404 through the proxy
    ]
    if not ours:
        raise HarnessError(f"no serving pod of deployment {facts.deployment}", "see its Deployment")
    return ours


def _scrape(api: client.ApiClient, namespace: str, pod: str) -> list[Sample]:
    """The pod's /metrics through the API server's pod proxy (no port-forward, no Service needed)."""
    text = client.CoreV1Api(api).connect_get_namespaced_pod_proxy_with_path(
        f"{pod}:{METRICS_PORT}", namespace, "metrics"
    )
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def _metric_names(api: client.ApiClient, facts: operator_facts.OperatorFacts) -> str:
    served = {
        pod: sorted({s.name for s in _scrape(api, facts.namespace, pod) if s.name.startswith("kuberay_")})
        for pod in _serving_operator_pods(api, facts)
    }
    return "; ".join(
        f"{pod}: KubeRay metrics served: {', '.join(names) or 'none'}" for pod, names in served.items()
    )


@pytest.mark.exclusive("deletes the shared operator's pod")
@pytest.mark.smoke
def test_operator_is_ready_and_recovers_after_its_pod_is_deleted(
    conformance: Environment, api: client.ApiClient, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: an operator Deployment not Ready, a replacement pod that never becomes Ready, or
    one that never takes the leader lease (so nothing would be reconciled)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = conformance.operator_namespace
    deployment = apps.read_namespaced_deployment(operator_spec.NAME, ns)
    assert deployment.status.ready_replicas == deployment.spec.replicas
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    (old,) = [
        p
        for p in core.list_namespaced_pod(ns, label_selector=selector).items
        if not p.metadata.deletion_timestamp
    ]
    deleted_at = time.monotonic()
    core.delete_namespaced_pod(old.metadata.name, ns)

    def replaced_and_ready(pod: client.V1Pod) -> bool:
        return pod.metadata.name != old.metadata.name and is_serving(pod)

    with behaviour("the operator comes back Ready after its pod is deleted"):
        new = wait_for(
            core.list_namespaced_pod,
            replaced_and_ready,
            what="a new operator pod to be Ready",
            timeout=timeouts.ready,
            namespace=ns,
            label_selector=selector,
        )
    metrics["operator_recovery_s"] = round(time.monotonic() - deleted_at, 2)
    if not _facts(conformance, api).leader_election:
        return  # no lease to take (the leader-election check says whether that is as installed)
    # Ready is not enough: a new leader must take the lease, or nothing reconciles. The old
    # pod's lease looks fresh until it expires, so the holder must be the new pod.
    with behaviour("the replacement operator pod takes the leader lease"):
        wait_for(
            client.CoordinationV1Api(api).list_namespaced_lease,
            lambda lease: operator_facts.lease_held_by(lease, {new.metadata.name}),
            what=f"lease {ns}/{operator_spec.LEASE_NAME} held by {new.metadata.name}",
            timeout=timeouts.ready,
            describe=lambda lease: (
                f"holder {lease.spec.holder_identity or 'none'}, renewed {lease.spec.renew_time}"
            ),
            namespace=ns,
            field_selector=f"metadata.name={operator_spec.LEASE_NAME}",
        )
    metrics["operator_leader_s"] = round(time.monotonic() - deleted_at, 2)


# -- rayVersion -------------------------------------------------------------------------


def test_ray_version_alone_does_not_change_the_image(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """rayVersion tells KubeRay which Ray features to expect; the image is the pod template's alone.

    Catches: an operator that rewrites images or recreates pods when only rayVersion changes."""
    name = "rayver"
    ray.create("rayclusters", render("ray/raycluster.yaml", **{**cluster_values, "name": name}))
    with behaviour(f"KubeRay makes RayCluster {name} ready"):
        ray.wait_cluster_ready(name, timeouts.ready)
    before = {p.metadata.uid: _images(p) for p in ray.pods(name)}
    assert all(images == [cluster_values["image"]] for images in before.values()), before
    ray.patch("rayclusters", name, {"spec": {"rayVersion": OTHER_RAY_VERSION}})
    assert ray.get("rayclusters", name)["spec"]["rayVersion"] == OTHER_RAY_VERSION
    broken = holds_for(
        ray.core.list_namespaced_pod,
        lambda pod: before.get(pod.metadata.uid) == _images(pod),
        what=f"the pods of {name} keep their images after rayVersion changes",
        duration=timeouts.apply,
        namespace=ray.namespace,
        label_selector=f"ray.io/cluster={name}",
    )
    assert not broken, f"after rayVersion {cluster_values['ray_version']} -> {OTHER_RAY_VERSION}: {broken}"


# Any other released Ray version: only that it differs from the one under test matters.
OTHER_RAY_VERSION = "2.52.0"


def _images(pod: client.V1Pod) -> list[str]:
    return [c.image for c in pod.spec.containers]


# -- RayCronJob -------------------------------------------------------------------------


@pytest.mark.requires("kuberay>=1.6.0")
def test_raycronjob_with_the_gate_off_creates_no_rayjob(
    ray: Ray, cluster_values: dict[str, Any], capabilities: Capabilities
) -> None:
    """Catches: a RayCronJob scheduled (a lastScheduleTime, RayJobs made) while its gate is off."""
    if capabilities.feature_gates.get("RayCronJob"):
        pytest.skip(NOT_APPLICABLE + "the installed operator runs with the RayCronJob gate on")
    name = "gate-off"
    ray.create("raycronjobs", render("ray/raycronjob.yaml", **{**cluster_values, "name": name}))
    # The window is the observation: past the next tick, with the operator's reaction time on top.
    window = cronjobs.seconds_to_next_minute(datetime.now(UTC)) + TICK_GRACE_S
    broken = holds_for(
        ray.list_fn("raycronjobs"),
        lambda cron: not cron.get("status", {}).get("lastScheduleTime"),
        what=f"RayCronJob {name} is never scheduled",
        duration=window,
        field_selector=f"metadata.name={name}",
    )
    made = ray.list_fn("rayjobs")(label_selector=f"{cronjobs.CRON_LABEL}={name}")["items"]
    assert not broken, f"with the RayCronJob gate off, the RayCronJob was scheduled: {broken}"
    assert not made, f"with the gate off, RayJobs were made: {[j['metadata']['name'] for j in made]}"


# How long after a tick the operator may take to create its RayJob.
TICK_GRACE_S = 20


@dataclass
class CronSetup:
    operator: scoped_operator.ScopedOperator
    watched: Ray  # where the scoped operator reconciles
    other: Ray  # a namespace it does not watch
    name: str = "every-minute"


@pytest.fixture(scope="module")
def cron_setup(
    api: client.ApiClient,
    conformance: Environment,
    module_namespace: str,
    profile: Profile,
    ray_version: str,
    timeouts: Timeouts,
    capabilities: Capabilities,
    request: pytest.FixtureRequest,
) -> Iterator[CronSetup]:
    """A second operator with the RayCronJob gate on, watching only this module's namespace.

    It changes nothing outside that namespace (Roles there, no leader election, no CRD), so its
    checks run beside others; a parallel run's workers each get their own, in their own namespace.

    The installed operator is shared and must not be reconfigured, so the gate-on behaviour is
    observed on an operator of the same image that this module runs itself. The same RayCronJob
    goes into the watched namespace and into one it does not watch.
    """
    if capabilities.feature_gates.get("RayCronJob"):
        # The installed operator would schedule them too; nothing could be told apart.
        pytest.skip(NOT_APPLICABLE + "the installed operator runs RayCronJobs itself (gate on)")
    facts = operator_facts.observed_operator(api, conformance.operator_namespace)
    other = f"{module_namespace}-other"[:63]
    run_id = conformance.options.run_id
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": other, "labels": {RUN_LABEL: run_id}}})
    try:
        operator = scoped_operator.ScopedOperator(
            name="kuberay-operator-scoped",
            namespace=module_namespace,
            watch_namespaces=(module_namespace,),
            image=facts.image,
            version=facts.version,
            feature_gates={"RayCronJob": True},
            installed_gates=facts.feature_gates,
        )
        scoped_operator.start(api, operator, timeouts.ready)
        setup = CronSetup(operator, Ray(api, module_namespace), Ray(api, other))
        values = {**manifest_values(profile, ray_version), "name": setup.name}
        for where in (setup.watched, setup.other):
            where.create("raycronjobs", render("ray/raycronjob.yaml", **values))
        yield setup
    finally:
        namespaces.delete(core, other)


def _made_by(ray: Ray, cron: str) -> list[dict[str, Any]]:
    return ray.list_fn("rayjobs")(label_selector=f"{cronjobs.CRON_LABEL}={cron}")["items"]


def _wait_ticks(setup: CronSetup, ticks: int) -> list[dict[str, Any]]:
    """Wait until RayJobs for `ticks` distinct schedule times exist; return them all."""
    ray = setup.watched
    with behaviour(f"the RayCronJob makes a RayJob for each of {ticks} ticks"):
        ray.wait(
            "raycronjobs",
            setup.name,
            lambda _cron: len(set(cronjobs.scheduled_times(_made_by(ray, setup.name)))) >= ticks,
            what=f"RayJobs of {setup.name} for {ticks} ticks",
            timeout=60.0 * ticks + TICK_GRACE_S,
            describe=lambda cron: f"lastScheduleTime={cron.get('status', {}).get('lastScheduleTime')}",
        )
    return _made_by(ray, setup.name)


@pytest.mark.requires("kuberay>=1.6.0")  # the RayCronJob CRD first shipped with 1.6.0
def test_watch_namespace_limits_the_operator_to_its_namespace(
    cron_setup: CronSetup, api: client.ApiClient, metrics: dict[str, float]
) -> None:
    """Only the scoped operator runs RayCronJobs, so whatever happens to one is its doing.

    Catches: an operator given --watch-namespace that reconciles (or even lists) another
    namespace, or that makes nothing in its own."""
    started = time.monotonic()
    made = _wait_ticks(cron_setup, 1)
    metrics["first_rayjob_s"] = round(time.monotonic() - started, 2)
    assert made, "the scoped operator made no RayJob in the namespace it watches"
    other = cron_setup.other.get("raycronjobs", cron_setup.name)
    assert not other.get("status"), f"a RayCronJob it does not watch got a status: {other['status']}"
    stray = _made_by(cron_setup.other, cron_setup.name)
    assert not stray, f"RayJobs outside the watched namespace: {[j['metadata']['name'] for j in stray]}"
    logs = scoped_operator.logs(api, cron_setup.operator)
    assert cron_setup.other.namespace not in logs, "the scoped operator's log names the unwatched namespace"
    # Only Roles in its namespace: a cluster-wide list or watch would be refused and logged.
    refused = [line for line in logs.splitlines() if "forbidden" in line.lower()]
    assert not refused, f"the scoped operator needed more than its namespace's RBAC: {refused[:3]}"


@pytest.mark.requires("kuberay>=1.6.0")
@pytest.mark.kuberay_issue(4849)
def test_raycronjob_makes_one_rayjob_per_tick_without_duplicates(
    cron_setup: CronSetup, api: client.ApiClient
) -> None:
    """Catches (#4849): more than one RayJob for a tick, a missed tick, RayJobs without their
    scheduled-time annotation, or not owned by their RayCronJob."""
    made = _wait_ticks(cron_setup, 2)
    times = cronjobs.scheduled_times(made)
    assert all(times), f"RayJobs without {cronjobs.SCHEDULED_ANNOTATION}: {times}"
    if cronjobs.duplicated_ticks(times):
        _fail_on_duplicates(cron_setup, api, made)
    assert cronjobs.tick_gaps_s(times) and all(gap == 60 for gap in cronjobs.tick_gaps_s(times)), times
    owners = {tuple(o["name"] for o in j["metadata"].get("ownerReferences", [])) for j in made}
    assert owners == {(cron_setup.name,)}, f"owners of the RayJobs: {owners}"


def _fail_on_duplicates(setup: CronSetup, api: client.ApiClient, made: list[dict[str, Any]]) -> None:
    """Duplicates: whose doing. The check's own operator is the only one running RayCronJobs in
    its namespace (the shared one has the gate off); a RayJob its log does not claim was made by
    another operator, which is the harness's fault, not KubeRay's."""
    pods = scoped_operator.pods(api, setup.operator)
    log = scoped_operator.logs(api, setup.operator)
    strays = cronjobs.unclaimed(made, log)
    if strays or len(pods) != 1:
        raise HarnessError(
            f"RayJobs of RayCronJob {setup.name} came from more than one operator (made by none of "
            f"the check's own: {strays}; its pods: {len(pods)}): two operators reconcile RayCronJobs "
            f"in {setup.watched.namespace}",
            "stop the other operator (a leftover of an earlier run?) or turn the RayCronJob gate off in it",
        )
    raise AssertionError(
        "KubeRay's RayCronJob controller made more than one RayJob for a tick, every one of them logged "
        f"as created by the one operator running RayCronJobs ({len(pods)} pod(s)) (kuberay#4849: up to "
        "1.6.x a RayJob gets a random name, and a reconcile that reads a stale lastScheduleTime from its "
        "cache creates the tick's RayJob again; fixed in 1.7.0 by names per minute, kuberay PR #4888): "
        + cronjobs.describe_duplicates(made, log)
    )


@pytest.mark.requires("kuberay>=1.7.0")  # 1.6.x names them <cron>-<5 random characters>
def test_raycronjob_names_each_rayjob_by_its_scheduled_minute(cron_setup: CronSetup) -> None:
    """Catches: a 1.7.0 RayCronJob whose RayJobs are not named <cron>-<scheduled minute> (the names
    that make a tick's RayJob unique, kuberay PR #4888)."""
    made = _wait_ticks(cron_setup, 1)
    for job in made:
        scheduled = job["metadata"]["annotations"][cronjobs.SCHEDULED_ANNOTATION]
        expected = cronjobs.minutes_name(cron_setup.name, scheduled)
        assert job["metadata"]["name"] == expected, f"RayJob for {scheduled}: {job['metadata']['name']}"


@pytest.mark.requires("kuberay>=1.6.0")
def test_raycronjob_suspend_stops_new_rayjobs(cron_setup: CronSetup) -> None:
    """Catches: a suspended RayCronJob that is still scheduled or still makes RayJobs, and one
    resumed that never makes a RayJob again."""
    ray = cron_setup.watched
    ray.patch("raycronjobs", cron_setup.name, {"spec": {"suspend": True}})
    before = {j["metadata"]["name"] for j in _made_by(ray, cron_setup.name)}
    last = ray.get("raycronjobs", cron_setup.name).get("status", {}).get("lastScheduleTime")
    window = cronjobs.seconds_to_next_minute(datetime.now(UTC)) + TICK_GRACE_S
    broken = holds_for(
        ray.list_fn("raycronjobs"),
        lambda cron: cron.get("status", {}).get("lastScheduleTime") == last,
        what=f"suspended RayCronJob {cron_setup.name} is not scheduled",
        duration=window,
        field_selector=f"metadata.name={cron_setup.name}",
    )
    after = {j["metadata"]["name"] for j in _made_by(ray, cron_setup.name)}
    assert not broken, f"a suspended RayCronJob was scheduled: {broken}"
    assert after == before, f"new RayJobs while suspended: {sorted(after - before)}"
    ray.patch("raycronjobs", cron_setup.name, {"spec": {"suspend": False}})
    with behaviour(f"RayCronJob {cron_setup.name}, resumed, makes a RayJob again"):
        ray.wait(
            "raycronjobs",
            cron_setup.name,
            lambda _cron: bool({j["metadata"]["name"] for j in _made_by(ray, cron_setup.name)} - after),
            what=f"a RayJob of {cron_setup.name} made after its resume",
            timeout=60.0 + TICK_GRACE_S,  # within the next tick
            describe=lambda cron: f"lastScheduleTime={cron.get('status', {}).get('lastScheduleTime')}",
        )


# A zone at UTC+05:30 all year (no daylight saving): a schedule read in UTC instead fires 5.5 h away.
TIME_ZONE = "Asia/Kolkata"
# The tick is set this far ahead of the RayCronJob's creation, so it is not missed before then.
TICK_LEAD_S = 45


@pytest.mark.requires("kuberay>=1.7.0")  # spec.timeZone first shipped with 1.7.0
def test_raycronjob_schedule_is_read_in_its_time_zone(
    cron_setup: CronSetup, profile: Profile, ray_version: str, timeouts: Timeouts
) -> None:
    """A daily schedule whose next tick in Asia/Kolkata is a minute or two away makes its RayJob
    for that instant; an unknown zone is refused with an InvalidRayCronJobSpec event and makes none.

    Sources (v1.7.0): controllers/ray/raycronjob_controller.go (`TZ=<timeZone> <schedule>`),
    controllers/ray/utils/validation.go (ValidateRayCronJobSpec: the zone must load).

    Catches: `spec.timeZone` ignored or dropped (the schedule read in UTC: no RayJob at the tick),
    a RayJob for another instant than the tick in that zone, and an unknown zone accepted (a RayJob
    made) or refused without saying so."""
    ray, now = cron_setup.watched, datetime.now(UTC)
    schedule, tick = cronjobs.daily_tick_in_zone(now, TIME_ZONE, TICK_LEAD_S)
    values = {**manifest_values(profile, ray_version), "schedule": schedule}
    for name, zone in (("in-zone", TIME_ZONE), ("no-zone", "Mars/Olympus")):
        ray.create(
            "raycronjobs", render("ray/raycronjob.yaml", **{**values, "name": name, "time_zone": zone})
        )
    wait = (tick - datetime.now(UTC)).total_seconds() + TICK_GRACE_S
    with behaviour(f"RayCronJob in-zone ({schedule!r} in {TIME_ZONE}) makes a RayJob at {tick:%H:%M} UTC"):
        ray.wait(
            "raycronjobs",
            "in-zone",
            lambda _cron: bool(_made_by(ray, "in-zone")),
            what=f"a RayJob of in-zone, due at {tick.isoformat()}",
            timeout=wait,
            describe=lambda cron: f"lastScheduleTime={cron.get('status', {}).get('lastScheduleTime')}",
        )
    times = cronjobs.scheduled_times(_made_by(ray, "in-zone"))
    assert cronjobs.parsed(times) == [tick], (
        f"in-zone's RayJobs were scheduled for {times}, not {tick.isoformat()}"
    )
    with behaviour("a RayCronJob with an unknown time zone gets KubeRay's InvalidRayCronJobSpec event"):
        event = wait_for(
            ray.core.list_namespaced_event,
            lambda e: e.reason == "InvalidRayCronJobSpec",
            what="the InvalidRayCronJobSpec event of no-zone",
            timeout=timeouts.apply,
            namespace=ray.namespace,
            field_selector="involvedObject.name=no-zone",
        )
    assert "time zone" in event.message.lower(), event.message
    assert not _made_by(ray, "no-zone"), "a RayCronJob with an unknown time zone made RayJobs"


# -- CRD lifecycle ----------------------------------------------------------------------


@pytest.mark.no_pods
def test_served_crds_match_the_operator_version(conformance: Environment, api: client.ApiClient) -> None:
    """Catches: served Ray CRDs that are not the installed operator's own (Helm never upgrades
    CRDs, so a cluster keeps its old ones); the finding names the command that fixes it."""
    promised = _promised(conformance)
    version = _facts(conformance, api).version
    ext = client.ApiextensionsV1Api(api)
    served = {
        crd.metadata.name: operator_facts.api_to_dict(crd)
        for crd in ext.list_custom_resource_definition().items
        if crd.spec.group == "ray.io"
    }
    found = crd_drift.drift(served, promised.crds)
    assert not found, (
        f"the served Ray CRDs are not those of {promised.crds_origin} (KubeRay {version}): {found}; "
        f"fix: {crd_drift.fix_command(version, conformance.cluster.target.kubectl_args())}"
    )


# -- operator upgrade -------------------------------------------------------------------

# After the upgrade, the load and the watch on the pods go on this long (KubeRay's own
# e2eupgrade asks for 30 s of consistent answers after `helm upgrade`).
SETTLE_S = 30
SERVICE = "echo"
KEPT = "kept"


@dataclass(frozen=True)
class Upgrade:
    old: operator_upgrade.OperatorVersion  # running when the check starts
    new: operator_upgrade.OperatorVersion  # the version under test
    perform: Callable[[], float]  # the upgrade itself; returns operator_upgrade_s


@pytest.fixture
def previous_operator(
    conformance: Environment, api: client.ApiClient, profile: Profile, timeouts: Timeouts
) -> Iterator[Upgrade]:
    """The shared operator, moved to the previous minor for one check; the version under test
    runs again afterwards, whatever happened."""
    install = conformance.options.kuberay_install
    if install not in ("local-build", "source"):
        pytest.skip(
            NOT_APPLICABLE + f"kuberay.install is {install}: the harness installs an older operator "
            "only where it builds the operator itself (local-build, or --kuberay-source)"
        )
    spec: operator_spec.OperatorSpec = conformance.kuberay.spec  # type: ignore[assignment]
    previous = operator_upgrade.previous_minor(spec.version)
    if previous not in operator_spec.CHART_FEATURE_GATES:
        pytest.skip(
            NOT_APPLICABLE + f"no release of the minor before {spec.version} can be built and installed "
            f"here ({previous or 'the Go module proxy serves none with a verifiable checksum'}"
            f"{'' if not previous else ': its chart defaults are not recorded in operator_spec.py'})"
        )
    current = operator_upgrade.running(api, spec)
    old = operator_upgrade.built(
        operator_upgrade.previous_spec(spec, previous, profile.kuberay.feature_gates),
        conformance.provider,  # type: ignore[arg-type]
    )
    if install == "source":  # the checkout's chart, as a user upgrades: CRDs, then helm upgrade
        assert conformance.cluster is not None
        target = conformance.cluster.target

        def upgrade() -> float:
            return operator_upgrade.helm_upgrade(
                api, conformance.install_mode.source, conformance.provider, target, timeouts.ready
            )  # type: ignore[arg-type]

        def restore() -> None:
            if not operator_upgrade.is_running(api, current):
                upgrade()
    else:

        def upgrade() -> float:
            return operator_upgrade.switch_to(api, current, timeouts.ready)

        def restore() -> None:
            operator_upgrade.switch_to(api, current, timeouts.ready)

    try:
        operator_upgrade.switch_to(api, old, timeouts.ready)
        yield Upgrade(old, current, upgrade)
    finally:
        restore()


@pytest.mark.exclusive("downgrades and upgrades the shared operator, under load", quiet=True)
@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177)
def test_operator_upgrade_keeps_pods_and_serving_without_failed_requests(
    previous_operator: Upgrade,
    ray: Ray,
    api: client.ApiClient,
    conformance: Environment,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Objects made by the previous minor's operator, then its CRDs and operator upgraded to the
    version under test as a Helm upgrade would, under load through the Gateway. Then, as KubeRay's
    own e2eupgrade does, the RayService its predecessor made is upgraded to a new RayCluster by the
    new operator, under load again.

    Catches: an operator upgrade that recreates or restarts Ray pods, starts a RayService
    upgrade, leaves its predecessor's objects unreconciled, or drops requests (#2177); a RayService
    made by the predecessor that the new operator cannot upgrade to a new cluster, or upgrades with
    failed requests over `upgrade_failed_requests` or answers from the old cluster after promotion."""
    kept = {**cluster_values, "name": KEPT, "workers": [{"name": "small", "replicas": 1}]}
    ray.create("rayclusters", render("ray/raycluster.yaml", **kept))
    values = rs.rayservice_values(cluster_values, SERVICE)
    gateway_class = profile.gateway_class
    svc, address, host = serving.ready_behind_own_gateway(
        ray, values, gateway_class, timeouts, metrics, under_test=False
    )
    ray.wait_cluster_ready(KEPT, timeouts.ready)  # made by the older operator: a precondition
    before = _ray_pods(ray)
    delivery, seconds = serving.load_delivery(conformance), int(timeouts.upgrade)
    gen = serving.generator(ray.api, ray.namespace, delivery, address, host, max_duration_s=seconds)
    with running(gen, timeouts.ready), rs.Sampler(ray, SERVICE) as sampler:
        if not operator_upgrade.is_running(api, previous_operator.old):
            raise HarnessError(
                "the operator was changed by someone else while the check ran on its predecessor",
                "run one conformance run at a time against a cluster",
            )
        new = previous_operator.new
        try:
            metrics["operator_upgrade_s"] = previous_operator.perform()
        except operator_facts.OperatorNotReady as exc:
            # The predecessor ran; the version under test does not take over from it.
            raise AssertionError(f"the upgraded operator ({new.image}) never took over: {exc}") from exc
        changed = holds_for(
            ray.core.list_namespaced_pod,
            lambda pod: before.get(pod.metadata.name) == _pod_state(pod),
            what="every Ray pod keeps its identity and restart count",
            duration=SETTLE_S,
            namespace=ray.namespace,
            label_selector="ray.io/cluster",
        )
        with behaviour("the upgraded operator reconciles the objects its predecessor made"):
            poll_until(
                lambda: _names_in_operator_log(api, new.spec.namespace, ray.namespace),
                what=f"the new operator's log to name {KEPT} and {SERVICE} in {ray.namespace}",
                timeout=timeouts.apply,
            )
    summary = serving.load_metrics(gen.records, metrics, serving.UPGRADE_RATE)
    serving.assert_sampled(sampler, metrics)
    assert not changed, f"after the operator upgrade: {changed}"
    assert _ray_pods(ray) == before, "the Ray pods changed after the operator upgrade"
    assert not [s for s in sampler.samples if s.pending], "the operator upgrade started a RayService upgrade"
    after = ray.get("rayservices", SERVICE)
    assert rs.active_cluster(after) == rs.active_cluster(svc), "the RayService moved to another RayCluster"
    assert rs.is_ready(after), f"the RayService is not Ready after the operator upgrade: {rs.describe(after)}"
    budget = profile.thresholds["upgrade_failed_requests"]
    assert summary.failed <= budget, f"during the operator upgrade ({budget} allowed): {summary.describe()}"
    _upgrades_to_a_new_cluster_after(ray, conformance, values, (address, host), profile, timeouts, metrics)


# After the promotion of the post-operator-upgrade NewCluster upgrade, the load goes on this long.
PROMOTED_WINDOW_S = 10


def _upgrades_to_a_new_cluster_after(
    ray: Ray,
    conformance: Environment,
    values: dict[str, Any],
    target: tuple[str, str],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """A RayCluster spec change of the predecessor's RayService, made under the upgraded operator:
    it is promoted to a new cluster, within the failed-request budget, and only the new one answers."""
    old = rs.active_cluster(ray.get("rayservices", SERVICE))
    address, host = target
    delivery, seconds = serving.load_delivery(conformance), int(timeouts.upgrade)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, host, max_duration_s=seconds, name="load-after"
    )
    with running(gen, timeouts.ready):
        patched = serving.respec(ray, {**values, "generation": "2"})
        new = rs.active_cluster(serving.wait_promoted(ray, SERVICE, old, timeouts.upgrade))
        promoted = time.time()
        time.sleep(PROMOTED_WINDOW_S)  # poll-interval: a load window after the promotion
    metrics["upgrade_after_operator_upgrade_s"] = round(promoted - patched, 2)
    summary = serving.analysis.summarize(gen.records)
    metrics["failed_requests_after_operator_upgrade"] = summary.failed
    budget = profile.thresholds["upgrade_failed_requests"]
    assert summary.failed <= budget, (
        f"during the NewCluster upgrade under the upgraded operator ({budget} allowed): {summary.describe()}"
    )
    serving.assert_all_from(gen.records, promoted, new, "after the promotion under the upgraded operator")


def _pod_state(pod: client.V1Pod) -> tuple[str, int]:
    return pod.metadata.uid, restarts(pod)


def _ray_pods(ray: Ray) -> dict[str, tuple[str, int]]:
    pods = ray.core.list_namespaced_pod(ray.namespace, label_selector="ray.io/cluster").items
    return {pod.metadata.name: _pod_state(pod) for pod in pods}


def _names_in_operator_log(api: client.ApiClient, operator_namespace: str, namespace: str) -> bool | None:
    """True once the running operator's log names both objects of `namespace`, else None."""
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(
        operator_namespace, label_selector=operator_facts.operator_selector(api, operator_namespace)
    ).items
    logs = "".join(
        core.read_namespaced_pod_log(pod.metadata.name, operator_namespace)
        for pod in pods
        if pod.metadata.deletion_timestamp is None and is_serving(pod)
    )
    lines = [line for line in logs.splitlines() if namespace in line]
    return True if any(KEPT in line for line in lines) and any(SERVICE in line for line in lines) else None
