"""Helpers the rayservice, upgrade and node-fault suites share: the load generator's delivery, load through a
Gateway (also around a fault), probing the app from inside the cluster, and recording what an
upgrade did."""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kubernetes import client

from conformance.environment import Environment
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.ray import ExecError, Ray
from conformance.kube.wait import behaviour, poll_until, wait_for
from conformance.load import analysis, traffic
from conformance.load.generator import Delivery, LoadGenerator, LoadSpec, Target, deliver, running
from conformance.load.records import Record, parse_lines
from conformance.timeouts import Timeouts

T = TypeVar("T")

# Rates a 2-core node sustains next to two Ray heads; the generator's self-check says when not.
PROBE_RATE = 20
UPGRADE_RATE = 20
# How often a probe asks the app what it answers, while waiting for new behaviour.
PROBE_INTERVAL_S = 1.0
ROUTE = "echo"  # the Gateway and HTTPRoute a check makes for itself

_deliveries: dict[int, Delivery] = {}


def load_delivery(environment: Environment) -> Delivery:
    """vegeta built once per run, for a pod of the Ray image the run tests first."""
    key = id(environment)
    if key not in _deliveries:
        options = environment.options
        _deliveries[key] = deliver(options.profile, options.versions_to_test[0])
    return _deliveries[key]


def generator(
    api: client.ApiClient,
    namespace: str,
    delivery: Delivery,
    address: str,
    host: str = "",
    rate: int = UPGRADE_RATE,
    max_duration_s: int = 900,
    run_id: str = "",
    name: str = "load",
) -> LoadGenerator:
    return LoadGenerator(
        api=api,
        namespace=namespace,
        delivery=delivery,
        targets=[Target(f"http://{address}/", host=host)],
        spec=LoadSpec(rate=rate, max_duration_s=max_duration_s),
        name=name,
        run_id=run_id,
    )


def ready_behind_own_gateway(
    ray: Ray,
    values: dict[str, Any],
    class_name: str,
    timeouts: Timeouts,
    metrics: dict[str, float],
    under_test: bool = True,
) -> tuple[dict[str, Any], str, str]:
    """A ready RayService behind a Gateway of our own: (the RayService, the address, the host).

    `under_test` False: the operator is not the version under test (an older one a check starts
    from), so the RayService not becoming Ready is a precondition that failed, not a finding.
    """
    started = time.monotonic()
    rs.create(ray, values)
    what = "the RayService becomes Ready with its Serve application RUNNING"
    with behaviour(what) if under_test else contextlib.nullcontext():
        svc = rs.wait_ready(ray, values["name"], timeouts.ready)
    metrics["ready_s"] = round(time.monotonic() - started, 2)
    gateways = rs.Gateways(ray.api, ray.namespace)
    host = f"{ray.namespace}.krc.test"
    gateways.create_route(ROUTE, class_name, host, f"{values['name']}-serve-svc")
    address = gateways.wait_programmed(ROUTE, timeouts.ready)
    gateways.wait_route_ready(ROUTE, ROUTE, timeouts.ready)
    return svc, address, host


def probe(ray: Ray, gen: LoadGenerator, address: str, host: str = "") -> Record | None:
    """One request through the Gateway from the generator's pod, by vegeta itself (the same
    client as the load); None when it could not be made."""
    pod = ray.core.read_namespaced_pod(gen.name, ray.namespace)
    header = f"-header 'Host: {host}' " if host else ""
    script = (
        f"echo 'GET http://{address}/' | vegeta attack -rate=1/s -duration=1s -timeout=5s {header}"
        "| vegeta encode --to json"
    )
    try:
        out = ray.exec(pod, ["/bin/sh", "-c", script], timeout=30)
    except ExecError:
        return None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return parse_lines(lines[-1:])[0] if lines else None


def answers(record: Record | None, version: str) -> bool | None:
    """True when the probe got an answer from the app configured with `version`, else None."""
    return True if record is not None and record.ok and record.version == version else None


def load_metrics(records: list[Record], metrics: dict[str, float], rate: float = 0) -> analysis.LoadSummary:
    summary = analysis.summarize(records)
    metrics.update(summary.metrics())
    if rate:
        metrics["max_schedule_lag_s"] = round(analysis.schedule_lag(records, rate), 3)
    return summary


def assert_sampled(sampler: rs.Sampler, metrics: dict[str, float]) -> None:
    """The status history a check judges was really taken (kube/sampling.py); its cadence recorded."""
    metrics["status_reads_total"] = len(sampler.reads)
    metrics["status_read_max_gap_s"] = sampler.max_gap_s()
    sampler.assert_evidence()


def slug(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.split("::", 1)[-1]).strip("-")[:120]


def record_timeline(
    environment: Environment,
    nodeid: str,
    title: str,
    records: list[Record],
    samples: list[rs.RayServiceReading],
    start: float,
    old: str,
    new: str,
    marks: Sequence[tuple[float, str]] = (),
) -> None:
    """Write the per-second timeline into `<run-dir>/timelines/` (format: conformance/load/traffic.py)."""
    data = traffic.timeline(nodeid, title, records, samples, start, {old: "old", new: "new"}, marks)
    traffic.write_timeline(environment.options.run_dir, slug(nodeid), data)


def save_load(
    environment: Environment,
    nodeid: str,
    title: str,
    records: list[Record],
    metrics: dict[str, float],
    rate: float,
    *,
    samples: Sequence[rs.RayServiceReading] = (),
    old: str = "",
    new: str = "",
    marks: Sequence[tuple[float, str]] = (),
    start: float | None = None,
) -> analysis.LoadSummary:
    """A load's figures into `metrics` and its per-second timeline into the run. Called on the way
    out of the load, before any assertion, so that a failed check has both too. The timeline starts
    at the first request (`start`, or now, when none was sent)."""
    summary = load_metrics(records, metrics, rate)
    begin = records[0].sent if records else (time.time() if start is None else start)
    record_timeline(environment, nodeid, title, records, list(samples), begin, old, new, marks)
    return summary


@dataclass
class FaultLoad:
    """Open-model load through the Gateway around a fault, with its timeline recorded."""

    ray: Ray
    conformance: Environment
    target: tuple[str, str]  # the Gateway's address, the route's host
    title: str
    service: str  # the RayService whose status is sampled
    cluster: str  # the RayCluster expected to answer
    marks: list[tuple[float, str]]

    @contextlib.contextmanager
    def running(
        self, timeouts: Timeouts, metrics: dict[str, float], request: pytest.FixtureRequest
    ) -> Iterator[tuple[LoadGenerator, rs.Sampler]]:
        """Load and the status sampler from the app's first answer on; on the way out the load
        figures and the timeline, then the generator's and the sampler's self-checks."""
        ray, (address, host) = self.ray, self.target
        delivery = load_delivery(self.conformance)
        gen = generator(
            ray.api, ray.namespace, delivery, address, host, max_duration_s=int(2 * timeouts.ready)
        )
        try:
            with running(gen, timeouts.ready, check=False), rs.Sampler(ray, self.service) as sampler:
                poll_until(
                    lambda: answers(probe(ray, gen, address, host), "v1"),
                    what="the app to answer under load before the fault",
                    timeout=timeouts.ready,
                    every=PROBE_INTERVAL_S,
                )
                yield gen, sampler
        finally:
            save_load(self.conformance, request.node.nodeid, self.title, gen.records, metrics,
                      UPGRADE_RATE, old=self.cluster, marks=self.marks)  # fmt: skip
            metrics["outage_s"] = traffic.outage_s(gen.records)
        gen.check()  # a generator that did not keep its rate measured nothing
        assert_sampled(sampler, metrics)


def serve_endpoints(ray: Ray, service: str) -> set[str]:
    """The ready addresses behind `service`, from its EndpointSlices."""
    slices = client.DiscoveryV1Api(ray.api).list_namespaced_endpoint_slice(
        ray.namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return {
        address
        for s in slices.items
        for e in s.endpoints or []
        if e.conditions is None or e.conditions.ready is not False
        for address in e.addresses
    }


def wait_serve_endpoints(
    ray: Ray, service: str, pod: client.V1Pod | Sequence[client.V1Pod], who: str, timeout: float
) -> None:
    """Until the ready endpoints of `service` are exactly the addresses of `pod` (one or several;
    `who` names them). Watched: each change to one of the Service's EndpointSlices has the union of
    all of them judged again."""
    pods = [pod] if isinstance(pod, client.V1Pod) else list(pod)
    wanted = {p.status.pod_ip for p in pods}
    names = ", ".join(f"{p.metadata.name} at {p.status.pod_ip}" for p in pods)
    wait_for(
        client.DiscoveryV1Api(ray.api).list_namespaced_endpoint_slice,
        lambda _slice: serve_endpoints(ray, service) == wanted,
        what=f"{service}'s ready endpoints to be {who}, {names}",
        timeout=timeout,
        describe=lambda _slice: f"ready endpoints {sorted(serve_endpoints(ray, service))}",
        namespace=ray.namespace,
        label_selector=f"kubernetes.io/service-name={service}",
    )


def ready_again_on(ray: Ray, service: str, cluster: str, timeouts: Timeouts) -> None:
    """The RayService Ready again after a fault, `cluster` still active and its app RUNNING."""
    with behaviour("the RayService is Ready again on the same RayCluster"):
        ray.wait(
            "rayservices",
            service,
            lambda s: rs.is_ready(s) and rs.active_cluster(s) == cluster and rs.app_status(s) == "RUNNING",
            what=f"Ready with {cluster} active and its app RUNNING",
            timeout=timeouts.ready,
            describe=rs.describe,
        )


def max_served_step(records: list[Record], new: str) -> float:
    """The largest rise, from one second to the next, of the share of answers from `new` (%)."""
    shares = []
    for second in analysis.per_second(records):
        answered = sum(second.backends.values())
        if answered:
            shares.append(100 * second.backends.get(new, 0) / answered)
    return round(max((b - a for a, b in itertools.pairwise(shares)), default=0.0), 1)


# --- a RayService upgrade --------------------------------------------------------------------


def respec(ray: Ray, values: dict[str, Any], serve_config: bool = False) -> float:
    """Patch RayService `values["name"]`'s RayCluster spec (and with `serve_config` its Serve config)
    to `values`; return when it was sent (epoch seconds)."""
    spec = render("ray/rayservice.yaml", **values)["spec"]
    keys = ("rayClusterConfig", "serveConfigV2") if serve_config else ("rayClusterConfig",)
    ray.patch("rayservices", values["name"], {"spec": {key: spec[key] for key in keys}})
    return time.time()


def wait_promoted(ray: Ray, name: str, old: str, timeout: float) -> dict[str, Any]:
    with behaviour("the pending RayCluster is promoted"):
        return ray.wait(
            "rayservices",
            name,
            lambda s: rs.active_cluster(s) not in ("", old) and not rs.pending_cluster(s),
            what=f"a new RayCluster to replace {old} as the active one",
            timeout=timeout,
            describe=rs.describe,
        )


def assert_all_from(records: list[Record], since: float, cluster: str, when: str) -> None:
    # Two seconds for the data plane to follow the switch.
    late = [r for r in records if r.sent > since + 2 and r.ok]
    others = {r.backend for r in late} - {cluster}
    assert late and not others, f"{when}, answers came from {others or 'nobody'} instead of {cluster}"
