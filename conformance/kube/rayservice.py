"""RayServices for the rayservice and upgrade checks: creating them, reading their status,
reaching them through a Gateway, and sampling what an upgrade does over time.

The Gateway API objects are read as plain dicts through the custom objects API, so nothing
here depends on which implementation serves the GatewayClass.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance import interrupts
from conformance.kube.gateway import GROUP as GATEWAY_GROUP
from conformance.kube.gateway import condition_true, describe_conditions
from conformance.kube.manifests import render, render_all
from conformance.kube.ray import Ray
from conformance.kube.sampling import LOST_SAMPLE, assert_complete, crashed, history_problems, own_client
from conformance.kube.wait import wait_for, wait_gone
from conformance.stopwatch import READY, spent

APP_NAME = "echo"  # the Serve application in manifests/ray/rayservice.yaml
APP_CONFIGMAP = "echo-app"
INCREMENTAL = "NewClusterWithIncrementalUpgrade"
# How often the sampler reads the RayService and its HTTPRoute during an upgrade. Status moves
# at reconcile speed (seconds); four reads a second see every step without loading the API.
SAMPLE_INTERVAL_S = 0.25
# Reads further apart than this leave a hole in which a step of the plans the checks run (every
# 5 s or slower, or all at once) could pass unseen and two steps read as one jump; it is also how
# late a promotion may be seen.
MAX_READ_GAP_S = 3.0
# The CPU a serving head asks for. During an upgrade one head serves while another starts (which
# takes a core for half a minute); with the 100m other checks ask for, the serving head's share
# of a busy 2-core node is too small to answer in time, which says nothing about KubeRay.
SERVING_HEAD_CPU = "300m"


def serve_svc(cluster: str) -> str:
    """KubeRay's per-cluster Serve Service (utils.GenerateServeServiceName)."""
    return f"{cluster}-serve-svc"


def rayservice_values(base: dict[str, Any], name: str, **overrides: Any) -> dict[str, Any]:
    """Values for manifests/ray/rayservice.yaml: the suite's base values plus this service's."""
    head = base["head_resources"]
    values = {
        **base,
        "head_resources": {**head, "requests": {**head.get("requests", {}), "cpu": SERVING_HEAD_CPU}},
        "name": name,
        "app_configmap": APP_CONFIGMAP,
        "message": "v1",
        "generation": "1",
        "deletion_delay_s": 10,
        "autoscaling": False,
        "upgrade_type": "",
        "gateway_class": "",
        "step_percent": 100,
        "interval_s": 1,
        "max_surge_percent": 100,
    }
    values.update(overrides)
    return values


def create_app(ray: Ray) -> None:
    """The Serve app's ConfigMap, once per namespace."""
    try:
        ray.core.create_namespaced_config_map(
            ray.namespace, render("ray/rayservice-app.yaml", name=APP_CONFIGMAP)
        )
    except ApiException as exc:
        if exc.status != 409:
            raise


def create(ray: Ray, values: dict[str, Any]) -> None:
    create_app(ray)
    ray.create("rayservices", render("ray/rayservice.yaml", **values))


def conditions(svc: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in svc.get("status", {}).get("conditions") or []}


def condition(svc: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in svc.get("status", {}).get("conditions") or [] if c["type"] == kind), {})


def app_status(svc: dict[str, Any], role: str = "activeServiceStatus") -> str:
    apps = svc.get("status", {}).get(role, {}).get("applicationStatuses") or {}
    return apps.get(APP_NAME, {}).get("status", "")


def active_cluster(svc: dict[str, Any]) -> str:
    return svc.get("status", {}).get("activeServiceStatus", {}).get("rayClusterName", "")


def pending_cluster(svc: dict[str, Any]) -> str:
    return svc.get("status", {}).get("pendingServiceStatus", {}).get("rayClusterName", "")


def is_ready(svc: dict[str, Any]) -> bool:
    return (
        conditions(svc).get("Ready") == "True" and app_status(svc) == "RUNNING" and not pending_cluster(svc)
    )


def cluster_suspended(cluster: dict[str, Any]) -> bool:
    """A RayCluster asked to suspend whose pods are all gone: KubeRay's state `suspended`, or the
    condition RayClusterSuspended=True (with the RayClusterStatusConditions gate)."""
    if not cluster.get("spec", {}).get("suspend"):
        return False
    status = cluster.get("status", {})
    kinds = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return status.get("state") == "suspended" or kinds.get("RayClusterSuspended") == "True"


def describe_cluster(cluster: dict[str, Any]) -> str:
    status = cluster.get("status", {})
    kinds = ", ".join(f"{c['type']}={c['status']}" for c in status.get("conditions") or [])
    suspend = cluster.get("spec", {}).get("suspend")
    return f"suspend={suspend}; state={status.get('state') or '-'}; {kinds or 'no conditions'}"


def observed(svc: dict[str, Any]) -> bool:
    """The Ready condition was computed for the current spec."""
    generation = svc.get("metadata", {}).get("generation", 0)
    return condition(svc, "Ready").get("observedGeneration", 0) >= generation


def describe(svc: dict[str, Any]) -> str:
    conds = ", ".join(f"{k}={v}" for k, v in conditions(svc).items()) or "no conditions"
    pending = pending_cluster(svc)
    return f"{conds}; app {app_status(svc) or '-'}; active {active_cluster(svc) or '-'}" + (
        f", pending {pending}" if pending else ""
    )


def wait_ready(ray: Ray, name: str, timeout: float) -> dict[str, Any]:
    with spent(READY):
        return ray.wait(
            "rayservices",
            name,
            is_ready,
            what=f"RayService {name} Ready with its Serve app RUNNING",
            timeout=timeout,
            describe=describe,
        )


def owned(ray: Ray, name: str) -> dict[str, list[str]]:
    """What KubeRay keeps for RayService `name` (by its association labels and the names it gives):
    RayClusters, Services, and, with incremental upgrades, its Gateway and HTTPRoute. Only the kinds
    with something left are keys."""
    selector = f"ray.io/originated-from-cr-name={name},ray.io/originated-from-crd=RayService"
    gateways = Gateways(ray.api, ray.namespace)
    found = {
        "rayclusters": [
            c["metadata"]["name"] for c in ray.list_fn("rayclusters")(label_selector=selector)["items"]
        ],
        "services": [
            s.metadata.name
            for s in ray.core.list_namespaced_service(ray.namespace, label_selector=selector).items
        ],
    }
    for plural, made in (("gateways", f"{name}-gateway"), ("httproutes", f"{name}-httproute")):
        items = gateways.list_fn(plural)(field_selector=f"metadata.name={made}")["items"]
        found[plural] = [made] if items else []
    return {kind: names for kind, names in found.items() if names}


# --- Gateway API -------------------------------------------------------------------------------


@dataclass
class Gateways:
    api: client.ApiClient
    namespace: str

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def list_fn(self, plural: str):  # noqa: ANN201 - a bound list call for wait_for
        def list_objects(**kwargs: Any) -> dict[str, Any]:
            return self.custom.list_namespaced_custom_object(
                GATEWAY_GROUP, "v1", self.namespace, plural, **kwargs
            )

        return list_objects

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GATEWAY_GROUP, "v1", self.namespace, plural, name)

    def create_route(self, name: str, class_name: str, hostname: str, service: str, port: int = 8000) -> None:
        """A Gateway of our own with one HTTPRoute for `hostname` to `service`."""
        for doc in render_all(
            "gateway/route.yaml",
            name=name,
            class_name=class_name,
            hostname=hostname,
            service=service,
            port=port,
        ):
            plural = "gateways" if doc["kind"] == "Gateway" else "httproutes"
            self.custom.create_namespaced_custom_object(GATEWAY_GROUP, "v1", self.namespace, plural, doc)

    def wait_programmed(self, name: str, timeout: float) -> str:
        """Wait until Gateway `name` is Accepted and Programmed with an address; return the address."""
        gateway = wait_for(
            self.list_fn("gateways"),
            lambda gw: condition_true(gw, "Accepted") and condition_true(gw, "Programmed") and address(gw),
            what=f"Gateway {name} Accepted and Programmed with an address",
            timeout=timeout,
            describe=describe_conditions,
            field_selector=f"metadata.name={name}",
        )
        return address(gateway)

    def wait_route_ready(self, name: str, gateway: str, timeout: float) -> dict[str, Any]:
        """Wait until HTTPRoute `name` is Accepted with resolved refs by `gateway`."""
        return wait_for(
            self.list_fn("httproutes"),
            lambda route: route_ready(route, gateway),
            what=f"HTTPRoute {name} Accepted with ResolvedRefs by Gateway {gateway}",
            timeout=timeout,
            describe=describe_route,
            field_selector=f"metadata.name={name}",
        )


def address(gateway: dict[str, Any]) -> str:
    """The Gateway's first IP address, else its first hostname (Istio publishes a ClusterIP
    gateway as `<gateway>-istio.<namespace>.svc.cluster.local`)."""
    entries = [e for e in gateway.get("status", {}).get("addresses") or [] if e.get("value")]
    for wanted in ("IPAddress", "Hostname"):
        for entry in entries:
            if entry.get("type", "IPAddress") == wanted:
                return str(entry["value"])
    return ""


def route_ready(route: dict[str, Any], gateway: str) -> bool:
    """Accepted with ResolvedRefs by `gateway`, for the route's current spec."""
    generation = route.get("metadata", {}).get("generation", 0)
    for parent in route.get("status", {}).get("parents") or []:
        if parent.get("parentRef", {}).get("name") != gateway:
            continue
        states = {
            c["type"]: c["status"]
            for c in parent.get("conditions") or []
            if c.get("observedGeneration", generation) >= generation
        }
        if states.get("Accepted") == "True" and states.get("ResolvedRefs") == "True":
            return True
    return False


def describe_route(route: dict[str, Any]) -> str:
    parents = route.get("status", {}).get("parents") or []
    if not parents:
        return "no parent status yet"
    return "; ".join(
        f"{p.get('parentRef', {}).get('name')}: "
        + ", ".join(f"{c['type']}={c['status']}({c.get('reason')})" for c in p.get("conditions") or [])
        for p in parents
    )


def route_weights(route: dict[str, Any]) -> dict[str, int]:
    """backendRef Service name -> weight, over every rule of the route."""
    weights: dict[str, int] = {}
    for rule in route.get("spec", {}).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            weights[ref["name"]] = int(ref.get("weight", 1))
    return weights


def wait_sole_catch_all(api: client.ApiClient, namespace: str, timeout: float) -> None:
    """Wait until no HTTPRoute without hostnames is left in other namespaces.

    KubeRay's routes match every host on the shared port 80; one still being deleted with an
    earlier check's namespace would take a share of this check's traffic."""
    custom = client.CustomObjectsApi(api)

    def others(**kwargs: Any) -> Any:
        listing = custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "httproutes", **kwargs)
        if kwargs.get("watch"):
            return listing  # the watch's raw stream: wait_gone lists again after each deletion
        listing["items"] = [
            r
            for r in listing["items"]
            if r["metadata"]["namespace"] != namespace and not r.get("spec", {}).get("hostnames")
        ]
        return listing

    wait_gone(others, what="catch-all HTTPRoutes of other namespaces", timeout=timeout)


# --- sampling an upgrade -----------------------------------------------------------------------


@dataclass(frozen=True)
class RayServiceReading:
    """What the RayService status and its HTTPRoute said at one moment (checked in load/traffic.py)."""

    at: float  # epoch seconds
    active: str
    pending: str
    percent: dict[str, int]  # cluster -> trafficRoutedPercent (status)
    capacity: dict[str, int]  # cluster -> targetCapacity (status)
    migrated_at: dict[str, str]  # cluster -> lastTrafficMigratedTime (RFC 3339, whole seconds)
    conditions: dict[str, str]  # condition type -> status
    weights: dict[str, int] = field(default_factory=dict)  # cluster -> HTTPRoute backend weight


def reading_of(svc: dict[str, Any], route: dict[str, Any] | None, at: float) -> RayServiceReading:
    status = svc.get("status", {})
    percent: dict[str, int] = {}
    capacity: dict[str, int] = {}
    migrated: dict[str, str] = {}
    for role in ("activeServiceStatus", "pendingServiceStatus"):
        part = status.get(role) or {}
        cluster = part.get("rayClusterName", "")
        if not cluster:
            continue
        if part.get("trafficRoutedPercent") is not None:
            percent[cluster] = int(part["trafficRoutedPercent"])
        if part.get("targetCapacity") is not None:
            capacity[cluster] = int(part["targetCapacity"])
        if part.get("lastTrafficMigratedTime"):
            migrated[cluster] = str(part["lastTrafficMigratedTime"])
    weights = {
        svc_name.removesuffix("-serve-svc"): weight for svc_name, weight in route_weights(route or {}).items()
    }
    return RayServiceReading(
        at=at,
        active=active_cluster(svc),
        pending=pending_cluster(svc),
        percent=percent,
        capacity=capacity,
        migrated_at=migrated,
        conditions=conditions(svc),
        weights=weights,
    )


class Sampler:
    """Reads the RayService (and its HTTPRoute, if named) in the background until stopped,
    keeping a sample whenever something changed. Since an unchanged status adds no sample, the
    times of all successful reads are kept too: they are what says nothing changed in between."""

    def __init__(self, ray: Ray, name: str, route: str = "") -> None:
        self.ray, self.name, self.route = ray, name, route
        # Reads on a client of its own: the check execs (probes) on its client meanwhile.
        self._reader = Ray(own_client(ray.api), ray.namespace)
        self.gateways = Gateways(self._reader.api, ray.namespace)
        self.samples: list[RayServiceReading] = []
        self.errors: list[str] = []
        self.reads: list[float] = []  # epoch seconds of each successful read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{name}", daemon=True)
        self._started = self._stopped = 0.0
        self._crash: BaseException | None = None

    def __enter__(self) -> Sampler:
        self._started = time.time()
        interrupts.start_thread(self._thread)
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        self._stop.set()
        interrupts.join_thread(self._thread, timeout=10)
        self._stopped = time.time()
        self._reader.api.close()
        if self._crash is not None and exc_type is None:
            raise crashed(f"RayService {self.name}", self._crash) from self._crash

    def latest(self) -> RayServiceReading | None:
        return self.samples[-1] if self.samples else None

    def problems(self) -> list[str]:
        """Why the samples are not a full history: failed reads, too few, or a hole."""
        end = self._stopped or time.time()
        what = f"RayService {self.name}"
        return history_problems(what, self.errors, self.reads, end, MAX_READ_GAP_S, start=self._started)

    def assert_evidence(self) -> None:
        assert_complete(f"RayService {self.name}", self.problems())

    def max_gap_s(self) -> float:
        """The longest time between two successful reads (for the metrics)."""
        times = [self._started, *self.reads, self._stopped or time.time()]
        return round(max(b - a for a, b in pairwise(times)), 2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read()
            except LOST_SAMPLE as exc:  # a missed sample is noted, not fatal
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            except Exception as exc:  # noqa: BLE001 - raised as a harness error when the sampler stops
                self._crash = exc
                return
            self._stop.wait(SAMPLE_INTERVAL_S)

    def _read(self) -> None:
        svc = self._reader.get("rayservices", self.name)
        route = None
        if self.route:
            try:
                route = self.gateways.get("httproutes", self.route)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        sample = reading_of(svc, route, time.time())
        self.reads.append(sample.at)
        last = self.latest()
        if last is None or _changed(last, sample):
            self.samples.append(sample)


def _changed(before: RayServiceReading, after: RayServiceReading) -> bool:
    keys = ("active", "pending", "percent", "capacity", "migrated_at", "conditions", "weights")
    return any(getattr(before, k) != getattr(after, k) for k in keys)
