"""Area rayservice: a RayService serves through the Gateway API, a serve-config-only change is
applied in place without dropping requests, and invalid incremental upgrades are refused.

Traffic always goes to the address the Gateway publishes, from a load generator pod in the
check's namespace; the app answers with the RayCluster that served it and its configured
message (manifests/ray/rayservice-app.yaml).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from conformance.environment import Environment
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

pytestmark = pytest.mark.area("rayservice")

NAME = "echo"


@pytest.fixture
def base(cluster_values: dict[str, Any]) -> dict[str, Any]:
    return rs.rayservice_values(cluster_values, NAME)


@pytest.mark.exclusive("measures failed requests under load", quiet=True)
@pytest.mark.requires("gateway_api")
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
    image = serving.load_image(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, image, address, host, serving.PROBE_RATE, 10, conformance.options.run_id
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


@pytest.mark.exclusive("measures failed requests under load", quiet=True)
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
    image = serving.load_image(conformance)
    gen = serving.generator(
        ray.api, ray.namespace, image, address, host, serving.UPGRADE_RATE, int(timeouts.upgrade)
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


@pytest.mark.requires("gate:RayServiceIncrementalUpgrade")
@pytest.mark.parametrize("case", list(INVALID_INCREMENTAL))
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
    with behaviour("the RayService is marked ValidationFailed"):
        svc = ray.wait(
            "rayservices",
            NAME,
            lambda s: rs.condition(s, "Ready").get("reason") == "ValidationFailed",
            what=f"RayService {NAME} Ready=False with reason ValidationFailed",
            timeout=timeouts.apply,
            describe=rs.describe,
        )
    ready = rs.condition(svc, "Ready")
    assert ready["status"] == "False"
    assert named in ready.get("message", ""), f"the reason does not name {named}: {ready.get('message')}"
    assert not _cluster_names(ray), "an invalid RayService got a RayCluster"
    events = ray.core.list_namespaced_event(ray.namespace, field_selector=f"involvedObject.name={NAME}").items
    assert any(e.reason == "InvalidRayServiceSpec" for e in events), "no InvalidRayServiceSpec event"
