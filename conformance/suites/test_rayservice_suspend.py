"""Area rayservice: `spec.suspend` (KubeRay 1.7.0) takes a RayService's RayClusters and Services
away, reports Suspending then Suspended with the documented reasons, and a resumed RayService
makes a new cluster, becomes Ready and answers through the Gateway again. A RayService created
suspended makes nothing until it is resumed, and a suspension once begun completes.

KubeRay's state machine (controllers/ray/rayservice_controller.go, handleSuspend): Suspending=True
(reason SuspendRequested, then SuspendInProgress while owned objects go), then Suspended=True and
Ready=False, both with reason SuspendComplete; on resume Suspended=False with reason
RayServiceResumed and Ready=False Initializing until the new cluster serves. Once Suspending,
the suspension completes whatever `suspend` says meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from conformance.environment import Environment
from conformance.errors import HarnessError
from conformance.exclusive import BEFORE_LOAD
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, holds_for, wait_gone
from conformance.load import traffic
from conformance.load.generator import running
from conformance.profiles import Profile
from conformance.suites import serving
from conformance.timeouts import Timeouts

# spec.suspend came with KubeRay 1.7.0 (issue #4878, PR #4841).
pytestmark = [
    pytest.mark.area("rayservice"),
    pytest.mark.requires("kuberay>=1.7.0"),
    pytest.mark.kuberay_issue(4878),
]

NAME = "echo"
# How long a suspended RayService is watched for anything it should not make.
SUSPENDED_HOLD_S = 20
# Load kept on after the resumed RayService is Ready, so that "Ready" is judged by answers.
AFTER_READY_S = 15


def _reason(svc: dict[str, Any], kind: str) -> str:
    found = rs.condition(svc, kind)
    return f"{found.get('status', '-')}/{found.get('reason', '-')}"


def _suspended(svc: dict[str, Any]) -> bool:
    return rs.conditions(svc).get("Suspended") == "True"


def _describe(svc: dict[str, Any]) -> str:
    return (
        f"Suspending {_reason(svc, 'Suspending')}, Suspended {_reason(svc, 'Suspended')}; {rs.describe(svc)}"
    )


def _wait_suspended(ray: Ray, name: str, timeout: float) -> dict[str, Any]:
    with behaviour(f"RayService {name} becomes Suspended"):
        return ray.wait(
            "rayservices",
            name,
            _suspended,
            what=f"RayService {name} Suspended=True",
            timeout=timeout,
            describe=_describe,
        )


def _assert_suspended_state(ray: Ray, svc: dict[str, Any]) -> None:
    name = svc["metadata"]["name"]
    assert _reason(svc, "Suspended") == "True/SuspendComplete", _describe(svc)
    assert _reason(svc, "Ready") == "False/SuspendComplete", _describe(svc)
    assert rs.conditions(svc).get("Suspending") != "True", (
        f"Suspended while still Suspending: {_describe(svc)}"
    )
    left = rs.owned(ray, name)
    assert not left, f"Suspended with objects of RayService {name} left: {left}"
    assert not rs.active_cluster(svc) and not rs.pending_cluster(svc), (
        f"status still names a cluster: {_describe(svc)}"
    )


def _still_suspended(ray: Ray, name: str) -> None:
    """Suspended stays Suspended, and nothing is made for it meanwhile."""
    broken = holds_for(
        ray.list_fn("rayservices"),
        _suspended,
        what=f"RayService {name} stays Suspended",
        duration=SUSPENDED_HOLD_S,
        field_selector=f"metadata.name={name}",
    )
    assert not broken, f"a suspended RayService: {broken}"
    made = rs.owned(ray, name)
    assert not made, f"made for a suspended RayService: {made}"


def _resume(ray: Ray, name: str, timeouts: Timeouts) -> dict[str, Any]:
    ray.patch("rayservices", name, {"spec": {"suspend": False}})
    with behaviour(f"the resumed RayService {name} becomes Ready again"):
        svc = ray.wait(
            "rayservices",
            name,
            lambda s: rs.is_ready(s) and rs.observed(s),
            what=f"RayService {name} Ready after the resume",
            timeout=timeouts.ready,
            describe=_describe,
        )
    assert _reason(svc, "Suspended") == "False/RayServiceResumed", _describe(svc)
    return svc


@pytest.mark.exclusive("measures failed requests under load", quiet=BEFORE_LOAD)
@pytest.mark.requires("gateway_api")
def test_suspended_rayservice_stops_serving_and_resumes_on_a_new_cluster(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """Catches: `spec.suspend` ignored (the cluster stays and keeps answering), Suspended reported
    while a RayCluster or Service of the RayService is left or without the documented reasons, the
    Suspending step skipped, requests still answered once Suspended, a resumed RayService that never
    becomes Ready or comes back on the old cluster, and Ready after the resume while requests
    through the Gateway still fail (beyond route_propagation_allowance_s)."""
    values = rs.rayservice_values(cluster_values, NAME)
    svc, address, host = serving.ready_behind_own_gateway(
        ray, values, profile.gateway_class, timeouts, metrics
    )
    before = rs.active_cluster(svc)
    allowance = profile.thresholds["route_propagation_allowance_s"]
    gen = serving.generator(
        ray.api,
        ray.namespace,
        serving.load_delivery(conformance),
        address,
        host,
        serving.PROBE_RATE,
        int(timeouts.cleanup + SUSPENDED_HOLD_S + timeouts.ready + AFTER_READY_S),
    )
    with running(gen, timeouts.ready, check=False), rs.Sampler(ray, NAME) as sampler:
        time.sleep(3)  # poll-interval: a load window, answers before the suspension, as the baseline
        asked = time.time()
        ray.patch("rayservices", NAME, {"spec": {"suspend": True}})
        svc = _wait_suspended(ray, NAME, timeouts.cleanup)
        suspended = time.time()
        metrics["suspend_s"] = round(suspended - asked, 2)
        _assert_suspended_state(ray, svc)
        with behaviour(f"the pods of the suspended RayService's cluster {before} go"):
            wait_gone(
                lambda **kw: ray.core.list_namespaced_pod(ray.namespace, **kw),
                what=f"the pods of RayCluster {before}",
                timeout=timeouts.cleanup,
                label_selector=f"ray.io/cluster={before}",
            )
        _still_suspended(ray, NAME)
        resumed = time.time()
        svc = _resume(ray, NAME, timeouts)
        ready = time.time()
        metrics["resume_to_ready_s"] = round(ready - resumed, 2)
        time.sleep(AFTER_READY_S)  # poll-interval: a load window, what a user of the Ready RayService gets
    after = rs.active_cluster(svc)
    records = gen.records
    marks = [(asked, "suspend"), (suspended, "Suspended"), (resumed, "resume"), (ready, "Ready")]
    serving.save_load(conformance, request.node.nodeid, "suspend and resume under load", records, metrics,
                      serving.PROBE_RATE, samples=sampler.samples, old=before, new=after, marks=marks,
                      start=asked)  # fmt: skip
    metrics["outage_s"] = traffic.outage_s(records)
    gen.check()
    serving.assert_sampled(sampler, metrics)
    seen = [s.conditions.get("Suspending") for s in sampler.samples]
    assert "True" in seen, f"Suspended without a Suspending step in between: {seen}"
    assert after and after != before, f"resumed on RayCluster {after or '-'}; before the suspension: {before}"
    timeline = traffic.Suspension(asked, suspended, resumed, ready, after)
    served = traffic.served_through_suspension(records, timeline, allowance)
    assert not served.violations, "; ".join(served.violations)


def test_rayservice_created_suspended_makes_nothing_until_resumed(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """Catches: a RayService created with `suspend: true` that makes a RayCluster or Services
    anyway (even briefly: the watch would see them), is never reported Suspended, or does not start
    once resumed."""
    name = "born-suspended"
    body = render("ray/rayservice.yaml", **rs.rayservice_values(cluster_values, name))
    body["spec"]["suspend"] = True
    rs.create_app(ray)
    ray.create("rayservices", body)
    svc = _wait_suspended(ray, name, timeouts.apply + timeouts.cleanup)
    _assert_suspended_state(ray, svc)
    _still_suspended(ray, name)
    made = [e.message for e in _cluster_events(ray, name)]
    assert not made, f"a RayService created suspended made a RayCluster: {made}"
    started = time.monotonic()
    _resume(ray, name, timeouts)
    metrics["resume_to_ready_s"] = round(time.monotonic() - started, 2)


def test_a_suspension_once_begun_completes_even_if_suspend_is_turned_back_off(
    ray: Ray, cluster_values: dict[str, Any], timeouts: Timeouts, metrics: dict[str, float]
) -> None:
    """KubeRay documents the suspension as atomic: once Suspending, `suspend: false` is ignored
    until every owned object is gone; then the RayService resumes by itself on a new cluster.

    Catches: a flip back mid-suspension that aborts it (the old cluster kept, or some of its objects
    left), a RayService that stays Suspended although `suspend` is false, or one that does not
    become Ready again. Evidence that it went through Suspended: the Suspended condition ends False
    with reason RayServiceResumed, which KubeRay sets only when leaving Suspended."""
    name = "flipped-back"
    rs.create(ray, rs.rayservice_values(cluster_values, name))
    with behaviour(f"RayService {name} becomes Ready"):
        svc = rs.wait_ready(ray, name, timeouts.ready)
    before = rs.active_cluster(svc)
    ray.patch("rayservices", name, {"spec": {"suspend": True}})
    with behaviour(f"RayService {name} becomes Suspending"):
        ray.wait(
            "rayservices",
            name,
            lambda s: rs.conditions(s).get("Suspending") == "True",
            what=f"RayService {name} Suspending=True",
            timeout=timeouts.apply,
            describe=_describe,
        )
    flipped = ray.patch("rayservices", name, {"spec": {"suspend": False}})
    if rs.conditions(flipped).get("Suspending") != "True":
        raise HarnessError(
            f"the suspension of RayService {name} ended before `suspend: false` reached it "
            f"({_describe(flipped)}): nothing was observed mid-suspension",
            "run the check on a less busy cluster",
        )
    started = time.monotonic()
    with behaviour(f"the suspension of RayService {name} completes and it resumes on a new cluster"):
        svc = ray.wait(
            "rayservices",
            name,
            lambda s: rs.is_ready(s) and rs.active_cluster(s) not in ("", before),
            what=f"RayService {name} Ready on a cluster other than {before}",
            timeout=timeouts.cleanup + timeouts.ready,
            describe=_describe,
        )
    metrics["flip_to_ready_s"] = round(time.monotonic() - started, 2)
    assert _reason(svc, "Suspended") == "False/RayServiceResumed", (
        f"resumed without having been Suspended: {_describe(svc)}"
    )
    gone = ray.list_fn("rayclusters")(field_selector=f"metadata.name={before}")["items"]
    assert not gone, f"the suspended RayService's old RayCluster {before} is still there"


def _cluster_events(ray: Ray, name: str) -> list[Any]:
    """Events KubeRay recorded for creating a RayCluster of RayService `name` (CreatedRayCluster)."""
    events = ray.core.list_namespaced_event(ray.namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in events if e.reason == "CreatedRayCluster"]
