"""Area rayservice: a RayService serves through the Gateway API, a serve-config-only change is
applied in place without dropping requests, invalid names and incremental upgrades are refused,
and an initializing timeout fails a RayService that can never start, for good.

Traffic always goes to the address the Gateway publishes, from a load generator pod in the
check's namespace; the app answers with the RayCluster that served it and its configured
message (manifests/ray/rayservice-app.yaml).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from conformance.environment import Environment
from conformance.exclusive import BEFORE_LOAD
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, poll_until, wait_gone
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("rayservice")

NAME = "echo"


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME)


@pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD)
@pytest.mark.requires("gateway_api")
@pytest.mark.smoke
def test_rayservice_becomes_ready_and_answers_through_the_gateway(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a RayService that never becomes Ready or whose Serve app is not RUNNING, its
    serve Service not answering, answers from a cluster other than the active one."""
    svc, address, host = serving.ready_behind_own_gateway(ray, base, profile.gateway_class, timeouts, metrics)
    assert rs.conditions(svc).get("Ready") == "True"
    assert rs.app_status(svc) == "RUNNING"
    delivery = serving.load_delivery(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, host, serving.PROBE_RATE, 10, conformance.options.run_id
    )
    gen.start(timeouts.ready)
    records = gen.collect(timeouts.ready)  # the attack ends by itself after 10 s
    summary = serving.load_metrics(records, metrics)
    assert summary.failed == 0, f"through the Gateway: {summary.describe()}"
    active = rs.active_cluster(svc)
    assert {r.backend for r in records} == {active}, "every answer must come from the active RayCluster"
    assert {r.version for r in records} == {"v1"}, (
        f"messages answered: {sorted({r.version for r in records})}"
    )


@pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD)
@pytest.mark.requires("gateway_api")
@pytest.mark.kuberay_issue(2177)
def test_serve_config_change_is_applied_in_place_without_failed_requests(
    ray: Ray,
    conformance: Environment,
    base: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """Catches: a serve-config-only change that builds a new RayCluster (an upgrade instead of in
    place), that is never applied, or that drops requests (#2177)."""
    svc, address, host = serving.ready_behind_own_gateway(ray, base, profile.gateway_class, timeouts, metrics)
    clusters_before = _cluster_names(ray)
    delivery = serving.load_delivery(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, delivery, address, host, serving.UPGRADE_RATE, int(timeouts.upgrade)
    )
    changed = render("ray/rayservice.yaml", **{**base, "message": "v2"})["spec"]["serveConfigV2"]
    with running(gen, timeouts.ready), rs.Sampler(ray, NAME) as sampler:
        patched = time.time()
        ray.patch("rayservices", NAME, {"spec": {"serveConfigV2": changed}})
        with behaviour("the new Serve config answers through the Gateway"):
            poll_until(
                lambda: serving.answers(serving.probe(ray, gen, address, host), "v2"),
                what="the app to answer with the new message",
                timeout=timeouts.upgrade,
                every=serving.PROBE_INTERVAL_S,
            )
        metrics["in_place_update_s"] = round(time.time() - patched, 2)
        # The load runs on until KubeRay reports the change done, so its aftermath is measured too.
        with behaviour("the RayService reports the new config Ready"):
            ray.wait(
                "rayservices",
                NAME,
                lambda s: rs.is_ready(s) and rs.observed(s),
                what="Ready for the new spec",
                timeout=timeouts.ready,
                describe=rs.describe,
            )
    records = gen.records
    summary = serving.load_metrics(records, metrics)
    serving.assert_sampled(sampler, metrics)
    assert not [s for s in sampler.samples if s.pending], (
        "a serve-config-only change made a pending RayCluster"
    )
    assert _cluster_names(ray) == clusters_before, "a serve-config-only change replaced the RayCluster"
    assert {r.backend for r in records if r.ok} == {rs.active_cluster(svc)}
    assert records[0].version == "v1", f"the first answer under load said {records[0].version!r}, not v1"
    assert records[-1].version == "v2", f"the last answer under load said {records[-1].version!r}, not v2"
    assert summary.failed == 0, f"during the in-place update: {summary.describe()}"


def _cluster_names(ray: Ray) -> set[str]:
    return {
        c["metadata"]["name"]
        for c in ray.custom.list_namespaced_custom_object("ray.io", "v1", ray.namespace, "rayclusters")[
            "items"
        ]
    }


INVALID_INCREMENTAL = {
    # case: (values, where the rejection must name it)
    "without gatewayClassName": ({"gateway_class": ""}, "gatewayClassName"),
    "with an empty gatewayClassName": (
        {"gateway_class": "", "empty_gateway_class": True},
        "gatewayClassName",
    ),
    "without autoscaling": ({"autoscaling": False}, "Autoscaler"),
}


def _refused_naming(ray: Ray, name: str, named: str, timeouts: Timeouts) -> None:
    """RayService `name` ends Ready False with reason ValidationFailed, its message naming `named`."""
    with behaviour(f"RayService {name} is marked ValidationFailed"):
        svc = ray.wait(
            "rayservices",
            name,
            lambda s: rs.condition(s, "Ready").get("reason") == "ValidationFailed",
            what=f"RayService {name} Ready=False with reason ValidationFailed",
            timeout=timeouts.apply,
            describe=rs.describe,
        )
    ready = rs.condition(svc, "Ready")
    assert ready["status"] == "False", f"Ready is {ready}"
    assert named in ready.get("message", ""), f"the reason does not name {named!r}: {ready.get('message')}"


@pytest.mark.no_pods
@pytest.mark.requires("gate:RayServiceIncrementalUpgrade")
@pytest.mark.parametrize("case", list(INVALID_INCREMENTAL))
@pytest.mark.smoke
def test_invalid_incremental_upgrade_is_rejected(
    case: str, ray: Ray, base: dict[str, Any], profile: Profile, timeouts: Timeouts
) -> None:
    """Catches: an incremental upgrade spec KubeRay cannot carry out accepted (a RayCluster made),
    or refused without naming the field at fault."""
    overrides, named = INVALID_INCREMENTAL[case]
    values = {
        **base,
        "upgrade_type": rs.INCREMENTAL,
        "gateway_class": profile.gateway_class,
        "autoscaling": True,
        "step_percent": 25,
        "interval_s": 5,
        "max_surge_percent": 50,
        **{k: v for k, v in overrides.items() if k != "empty_gateway_class"},
    }
    body = render("ray/rayservice.yaml", **values)
    if overrides.get("empty_gateway_class"):
        body["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]["gatewayClassName"] = ""
    ray.core.create_namespaced_config_map(
        ray.namespace, render("ray/rayservice-app.yaml", name=rs.APP_CONFIGMAP)
    )
    try:
        ray.create("rayservices", body)
    except ApiException as exc:
        # Refused at admission by the CRD schema (a required field): rejected, and it says why.
        assert exc.status == 422 and named in (exc.body or ""), f"refused for another reason: {exc.body}"
        return
    _refused_naming(ray, NAME, named, timeouts)
    assert not _cluster_names(ray), "an invalid RayService got a RayCluster"
    events = ray.core.list_namespaced_event(ray.namespace, field_selector=f"involvedObject.name={NAME}").items
    assert any(e.reason == "InvalidRayServiceSpec" for e in events), "no InvalidRayServiceSpec event"


# KubeRay names a RayService's RayClusters `<name>-<5 characters>` and its Services after it; a
# RayCluster name may have at most 53 characters (MaxRayClusterNameLength in utils/constant.go,
# the same from 1.5 to 1.7), so a RayService name at most 47, and it must be a DNS-1035 label.
MAX_RAYSERVICE_NAME = 53 - 6
INVALID_NAMES = {
    # case: (name, what the rejection must name)
    "longer than 47 characters": ("n" * (MAX_RAYSERVICE_NAME + 1), f"no more than {MAX_RAYSERVICE_NAME}"),
    "not a DNS-1035 label": ("1echo", "DNS1035"),
}


@pytest.mark.no_pods
@pytest.mark.parametrize("case", list(INVALID_NAMES))
def test_rayservice_with_an_invalid_name_is_refused_and_makes_nothing(
    case: str, ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts
) -> None:
    """Catches: a RayService whose name KubeRay cannot derive valid object names from reconciled
    anyway (a RayCluster or a Service made for it), or refused without saying why: Ready False
    with reason ValidationFailed, a message naming the rule, an InvalidRayServiceMetadata event."""
    name, named = INVALID_NAMES[case]
    rs.create(ray, rs.rayservice_values(cluster_values, name))
    _refused_naming(ray, name, named, timeouts)
    assert not _cluster_names(ray), f"a RayService named {name!r} got a RayCluster: {_cluster_names(ray)}"
    services = [s.metadata.name for s in ray.core.list_namespaced_service(ray.namespace).items]
    assert not services, f"a RayService named {name!r} got Services: {services}"
    events = ray.core.list_namespaced_event(ray.namespace, field_selector=f"involvedObject.name={name}").items
    assert any(e.reason == "InvalidRayServiceMetadata" for e in events), (
        f"no InvalidRayServiceMetadata event: {[e.reason for e in events]}"
    )


# KubeRay's annotation (utils.RayServiceInitializingTimeoutAnnotation, from 1.5.0, #4143): a
# RayService not Ready this long after it began initializing fails for good.
INITIALIZING_TIMEOUT = "ray.io/initializing-timeout"
STUCK_TIMEOUT_S = 30
TERMINAL_HOLD_S = 20  # after a spec update, the failure must stay (and no cluster come) this long
NEVER_BUILT_IMAGE = "localhost/kuberay-conformance/never-built:none"  # pull policy Never: never starts


def _ready_reason(svc: dict[str, Any]) -> str:
    return str(rs.condition(svc, "Ready").get("reason", ""))


def _with_initializing_timeout(body: dict[str, Any], timeout: str) -> dict[str, Any]:
    body["metadata"].setdefault("annotations", {})[INITIALIZING_TIMEOUT] = timeout
    return body


def _never_starting(body: dict[str, Any]) -> dict[str, Any]:
    """The same RayService whose every Ray container has an image the node does not have and may
    not pull: its cluster can never become ready."""
    stuck = copy.deepcopy(body)
    config = stuck["spec"]["rayClusterConfig"]
    groups = [config["headGroupSpec"], *config.get("workerGroupSpecs", [])]
    for container in (c for g in groups for c in g["template"]["spec"]["containers"]):
        container["image"], container["imagePullPolicy"] = NEVER_BUILT_IMAGE, "Never"
    return stuck


@pytest.mark.requires("kuberay>=1.5.0")
def test_initializing_timeout_fails_a_rayservice_that_never_becomes_ready_for_good(
    ray: Ray, cluster_values: dict[str, Any], profile: Profile, timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: the ray.io/initializing-timeout annotation ignored (a RayService whose cluster can
    never start stays Initializing), acted on before the timeout or later than it plus
    `deadline_slack_s`, the timed-out RayService's RayCluster left behind, a spec update that
    revives it (the failure is terminal: it must be recreated), or a healthy RayService with a
    generous timeout failed instead of Ready."""
    control = _with_initializing_timeout(
        render("ray/rayservice.yaml", **rs.rayservice_values(cluster_values, "generous")), "10m"
    )
    rs.create_app(ray)
    ray.create("rayservices", control)
    with behaviour("a healthy RayService with a 10m initializing timeout becomes Ready"):
        rs.wait_ready(ray, "generous", timeouts.ready)
    ray.custom.delete_namespaced_custom_object("ray.io", "v1", ray.namespace, "rayservices", "generous")
    wait_gone(ray.list_fn("rayclusters"), what="the control's RayClusters", timeout=timeouts.cleanup)

    healthy = render("ray/rayservice.yaml", **rs.rayservice_values(cluster_values, "stuck"))
    started = time.monotonic()
    ray.create("rayservices", _never_starting(_with_initializing_timeout(healthy, f"{STUCK_TIMEOUT_S}s")))
    slack = profile.thresholds["deadline_slack_s"]
    with behaviour(f"a RayService that cannot start fails after its {STUCK_TIMEOUT_S}s initializing timeout"):
        svc = ray.wait(
            "rayservices",
            "stuck",
            lambda s: _ready_reason(s) == "InitializingTimeout",
            what="RayService stuck Ready=False with reason InitializingTimeout",
            timeout=STUCK_TIMEOUT_S + slack,
            describe=lambda s: f"Ready reason {_ready_reason(s) or '-'}; {rs.describe(s)}",
        )
    # Seen from here (the watch shows it at once), not from the condition's lastTransitionTime:
    # Ready stays False from Initializing to InitializingTimeout, so that time does not move.
    # KubeRay counts from that time, which the API server keeps in whole seconds: up to 1 s early.
    took = time.monotonic() - started
    metrics["initializing_timeout_s"] = round(took, 1)
    assert took >= STUCK_TIMEOUT_S - 1, (
        f"InitializingTimeout {took:.1f}s after creation, before {STUCK_TIMEOUT_S}s"
    )
    assert took <= STUCK_TIMEOUT_S + slack, f"InitializingTimeout {took:.1f}s after creation"
    message = rs.condition(svc, "Ready").get("message", "")
    assert f"{STUCK_TIMEOUT_S}s" in message, f"the reason does not name the timeout: {message}"
    events = ray.core.list_namespaced_event(ray.namespace, field_selector="involvedObject.name=stuck").items
    assert any(e.reason == "RayServiceInitializingTimeout" for e in events), [e.reason for e in events]
    with behaviour("the timed-out RayService's RayCluster is deleted"):
        wait_gone(
            ray.list_fn("rayclusters"), what="the timed-out RayService's RayCluster", timeout=timeouts.cleanup
        )

    ray.patch("rayservices", "stuck", {"spec": {"rayClusterConfig": healthy["spec"]["rayClusterConfig"]}})
    revived = holds_for(
        ray.list_fn("rayservices"),
        lambda s: _ready_reason(s) == "InitializingTimeout",
        what="the RayService stays InitializingTimeout after a spec update",
        duration=TERMINAL_HOLD_S,
        field_selector="metadata.name=stuck",
    )
    assert not revived, f"after a spec update that could start: {revived}"
    assert not _cluster_names(ray), f"a timed-out RayService got a RayCluster again: {_cluster_names(ray)}"
