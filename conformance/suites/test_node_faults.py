"""Area fault-recovery, node level: a worker node lost (also under a RayService serving through the
Gateway), or cut off from the network and healed; the head's node lost.

The provider takes the node away (providers.base.NodeFaults: the local provider with worker nodes, the
default profile's); elsewhere these checks are not applicable. The Ray cluster of a check has its head
kept on a node no fault touches and its one worker preferring the node the check takes away, so
the worker is lost with it and its replacement can go elsewhere. Before the fault the node is
cordoned and the cluster's own services on it (the operator, the Gateway, storage) are moved off:
the fault tests KubeRay's recovery, not the recovery of the operator or of the Gateway themselves.

What Kubernetes does in between is the environment's, not KubeRay's: the node turns NotReady after
the node monitor's grace period, and its pods are evicted once their not-ready/unreachable
tolerations run out (20 s here, set on the worker group, instead of the default 300 s). An evicted
pod on a node that does not answer stays Terminating: nothing confirms its end. KubeRay 1.7.0
counts such a pod as one of the group's replicas (reconcilePods lists the group's pods whatever
their deletion timestamp), so it makes the replacement once the pod is really gone: when the
machine's Node object is deleted (what a cloud does for a terminated instance) and the pod
garbage collector removes its pods, or when the node comes back and its kubelet ends them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.checks import NOT_APPLICABLE
from conformance.environment import Environment
from conformance.kube import rayservice as rs
from conformance.kube.manifests import render
from conformance.kube.nodes import is_node_ready
from conformance.kube.ray import Ray
from conformance.kube.wait import behaviour, poll_until, wait_for, wait_gone
from conformance.load import analysis, traffic
from conformance.profiles import Profile
from conformance.providers.base import NodeFaults
from conformance.suites import ray_processes, serving
from conformance.suites.ray_membership import COUNTER_ACTOR, ray_workers, until_workers_alive
from conformance.timeouts import Timeouts

pytestmark = [
    pytest.mark.area("fault-recovery"),
    pytest.mark.requires("node_faults"),
    pytest.mark.exclusive("takes away a worker node other checks' pods may run on"),
]

EVICTED_AFTER_S = 20  # the worker group's not-ready/unreachable toleration
# Ray's GCS marks a node dead after its health checks fail: Ray 2.58 checks every 3 s, times out
# after 10 s and gives up after 5 failures, about 25-60 s; this is that with slack for 2 cores.
RAY_MARKS_DEAD_S = 120
NODE_STATE_S = 120  # Kubernetes: NotReady after node-monitor-grace-period (50 s), Ready after a restart


def _faults(conformance: Environment) -> NodeFaults:
    provider = conformance.provider
    assert isinstance(provider, NodeFaults)  # `requires("node_faults")` holds only then
    return provider


def _victim_and_keeper(ray: Ray, fault_nodes: tuple[str, ...]) -> tuple[str, str]:
    """A worker node the check may take away that takes CPU pods (no NoSchedule taint), and a
    node that stays, for the head."""
    nodes = ray.core.list_node().items

    def untainted(node: client.V1Node) -> bool:
        return not any(t.effect == "NoSchedule" for t in node.spec.taints or [])

    victims = [n.metadata.name for n in nodes if n.metadata.name in fault_nodes and untainted(n)]
    keepers = [n.metadata.name for n in nodes if n.metadata.name not in fault_nodes and untainted(n)]
    if not victims or not keepers:
        pytest.skip(
            NOT_APPLICABLE + "needs a CPU worker node to take away and another node for the head "
            f"(nodes the provider may take: {list(fault_nodes)})"
        )
    return victims[0], keepers[0]


def _cluster_on(
    ray: Ray, values: dict[str, Any], name: str, victim: str, keeper: str, timeouts: Timeouts
) -> Any:
    """A head on `keeper` and one worker on `victim`, ready and joined; returns the worker pod."""
    group = {"name": "small", "replicas": 1, "prefer_node": victim, "evicted_after_s": EVICTED_AFTER_S}
    ray.create("rayclusters", render("ray/raycluster.yaml", **{**values, "name": name, "workers": [group],
                                                                 "head_node": keeper}))  # fmt: skip
    with behaviour(f"KubeRay makes RayCluster {name} ready"):
        ray.wait_cluster_ready(name, timeouts.ready)
        until_workers_alive(ray, name, timeouts.ready)
    (worker,) = ray.pods(name, "worker")
    if worker.spec.node_name != victim:  # a preference the scheduler did not follow: the environment
        raise RuntimeError(f"the worker landed on {worker.spec.node_name}, not on {victim} as preferred")
    return worker


def _evict(ray: Ray, pod: client.V1Pod) -> None:
    meta = client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace)
    try:
        ray.core.create_namespaced_pod_eviction(meta.name, meta.namespace, client.V1Eviction(metadata=meta))
    except ApiException as exc:
        if exc.status != 404:  # gone already: nothing to move
            raise


def _of_a_service(pod: client.V1Pod) -> bool:
    """Made by a Deployment or a StatefulSet: evicted, it comes back on another node."""
    return any(o.kind in ("ReplicaSet", "StatefulSet") for o in pod.metadata.owner_references or [])


@contextlib.contextmanager
def _only_the_check_on(ray: Ray, node: str, timeout: float) -> Iterator[None]:
    """`node` cordoned, and the cluster's own services on it (the operator, the Gateway, storage,
    DNS: pods of Deployments and StatefulSets of other namespaces) evicted and Ready elsewhere,
    before a fault takes it away: the fault then tests KubeRay's recovery, not the recovery of the
    operator itself or of the Gateway the load goes through, and the check's later pods (its load
    generator) land elsewhere too. Uncordoned at the end (a deleted Node comes back uncordoned)."""

    def services_on_node() -> list[client.V1Pod]:
        pods = ray.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        return [p for p in pods if p.metadata.namespace != ray.namespace and _of_a_service(p)]

    ray.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        moved = services_on_node()
        for pod in moved:
            _evict(ray, pod)
        apps = client.AppsV1Api(ray.api)

        def settled() -> bool | None:
            if services_on_node():
                return None
            for namespace in {p.metadata.namespace for p in moved}:
                for made in apps.list_namespaced_deployment(namespace).items:
                    if (made.status.available_replicas or 0) < (made.spec.replicas or 0):
                        return None
            return True

        names = [f"{p.metadata.namespace}/{p.metadata.name}" for p in moved]
        poll_until(settled, what=f"the cluster's services {names} Ready off {node}", timeout=timeout, every=2)
        yield
    finally:
        with contextlib.suppress(ApiException):  # a Node deleted and not back yet: nothing to undo
            ray.core.patch_node(node, {"spec": {"unschedulable": False}})


def _wait_node(ray: Ray, name: str, ready: bool, since: float = 0.0) -> float:
    """Kubernetes turning the node Ready or NotReady (the environment: a timeout is an error);
    returns the seconds from `since` (epoch) to the Ready condition's change, as the node says."""
    node = wait_for(
        ray.core.list_node,
        lambda n: is_node_ready(n) == ready,
        what=f"node {name} {'Ready' if ready else 'NotReady'}",
        timeout=NODE_STATE_S,
        field_selector=f"metadata.name={name}",
    )
    changed = next(c.last_transition_time for c in node.status.conditions if c.type == "Ready")
    return round(changed.timestamp() - since, 2) if since else 0.0


def _ray_node_of(ray: Ray, cluster: str, pod: Any) -> str:
    return next(node for node, (ip, _) in ray_workers(ray, cluster).items() if ip == pod.status.pod_ip)


def _until_dead_in_ray(ray: Ray, cluster: str, ray_node: str, timeout: float) -> None:
    def dead() -> bool | None:
        return True if not ray_workers(ray, cluster).get(ray_node, ("", False))[1] else None

    poll_until(dead, what=f"Ray node {ray_node[:12]} marked dead", timeout=timeout, every=3,
               retry_on=(Exception,))  # fmt: skip


def test_a_lost_worker_node_s_ray_worker_is_replaced_elsewhere_once_the_node_is_gone(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """The machine of a worker node is lost (kubelet, runtime and containers stopped), then its Node
    object deleted, as a cloud does for a terminated instance. Records `node_not_ready_s`,
    `ray_dead_s` (from the loss) and `recovery_s` (from the Node's deletion to the replacement
    alive in Ray).

    Catches: the lost worker still alive in Ray's view; no replacement once the lost pod is gone,
    a replacement that never joins Ray, or one that reuses the lost node's Ray identity."""
    faults = _faults(conformance)
    victim, keeper = _victim_and_keeper(ray, conformance.capabilities.fault_nodes)
    old = _cluster_on(ray, cluster_values, "lost", victim, keeper, timeouts)
    old_ray_node = _ray_node_of(ray, "lost", old)
    with _only_the_check_on(ray, victim, timeouts.ready):
        try:
            lost, lost_at = time.monotonic(), time.time()
            faults.stop_node(victim)
            with behaviour("Ray marks the lost worker node dead"):
                _until_dead_in_ray(ray, "lost", old_ray_node, RAY_MARKS_DEAD_S)
            metrics["ray_dead_s"] = round(time.monotonic() - lost, 2)
            metrics["node_not_ready_s"] = _wait_node(ray, victim, ready=False, since=lost_at)
            ray.core.delete_node(victim)
            gone = time.monotonic()
            new = ray.wait_replaced("lost", old, "worker", timeouts.ready)
            with behaviour("the replacement worker joins Ray in place of the lost one"):
                joined = until_workers_alive(ray, "lost", timeouts.ready)
            metrics["recovery_s"] = round(time.monotonic() - gone, 2)
        finally:
            faults.start_node(victim)  # returns once the node is Ready again
    assert new.spec.node_name != victim, f"the replacement runs on the lost node {victim}"
    assert list(joined) == [new.metadata.name], f"alive Ray workers {joined}, replacement {new.metadata.name}"
    assert joined[new.metadata.name] != old_ray_node, "the replacement reports the lost worker's Ray node id"


def test_a_worker_node_cut_off_is_dead_to_ray_and_replaced_once_it_is_back(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    timeouts: Timeouts,
    metrics: dict[str, float],
) -> None:
    """A worker node loses its network, its processes alive, and gets it back after its pod was
    evicted. Records `ray_dead_s`, `node_not_ready_s` (from the cut), `replaced_while_cut` (1 when
    KubeRay made the replacement before the node came back) and `recovery_s` (from the heal to
    the replacement alive in Ray).

    Catches: an unreachable worker still alive in Ray's view; the cut-off raylet alive again in
    Ray after the heal (a node GCS marked dead must not come back); no replacement once the
    evicted pod is gone, or one that never joins Ray."""
    faults = _faults(conformance)
    victim, keeper = _victim_and_keeper(ray, conformance.capabilities.fault_nodes)
    old = _cluster_on(ray, cluster_values, "cut", victim, keeper, timeouts)
    old_ray_node = _ray_node_of(ray, "cut", old)
    with _only_the_check_on(ray, victim, timeouts.ready):
        try:
            cut, cut_at = time.monotonic(), time.time()
            faults.isolate_node(victim, cut=True)
            with behaviour("Ray marks the unreachable worker node dead"):
                _until_dead_in_ray(ray, "cut", old_ray_node, RAY_MARKS_DEAD_S)
            metrics["ray_dead_s"] = round(time.monotonic() - cut, 2)
            metrics["node_not_ready_s"] = _wait_node(ray, victim, ready=False, since=cut_at)
            _wait_evicted(ray, old)
            others = [p for p in ray.pods("cut", "worker") if p.metadata.uid != old.metadata.uid]
            metrics["replaced_while_cut"] = float(bool(others))
        finally:
            faults.isolate_node(victim, cut=False)
    healed = time.monotonic()
    new = ray.wait_replaced("cut", old, "worker", timeouts.ready)
    with behaviour("after the heal the replacement joins Ray and the cut-off worker stays dead"):
        joined = until_workers_alive(ray, "cut", timeouts.ready)
    metrics["recovery_s"] = round(time.monotonic() - healed, 2)
    _wait_node(ray, victim, ready=True)
    assert list(joined) == [new.metadata.name], f"alive Ray workers {joined}, replacement {new.metadata.name}"
    assert not ray_workers(ray, "cut").get(old_ray_node, ("", False))[1], (
        f"the cut-off worker's Ray node {old_ray_node[:12]} is alive again after the heal"
    )
    with behaviour("the evicted pod is gone once its node is back"):
        wait_gone(ray.core.list_namespaced_pod, what=f"pod {old.metadata.name}", timeout=NODE_STATE_S,
                  namespace=ray.namespace, field_selector=f"metadata.name={old.metadata.name}")  # fmt: skip


# A detached actor on the worker, made before the head's node is lost and asked again after.
FT_NAMESPACE = "krc-node-ft"
COUNTER = f"""
import sys, ray
ray.init(address="auto", namespace="{FT_NAMESPACE}", logging_level="ERROR")
{COUNTER_ACTOR}
try:
    counter = ray.get_actor("counter")
except ValueError:
    counter = Counter.remote()
print("counter", ray.get(counter.incr.remote(), timeout=60), counter._actor_id.hex())
"""


def _counter(output: str) -> tuple[int, str]:
    """(value, actor id) from what COUNTER printed."""
    words = output.split()
    at = words.index("counter")
    return int(words[at + 1]), words[at + 2]


@pytest.fixture
def headless_goes_before_redis(ray: Ray, timeouts: Timeouts) -> Iterator[None]:
    yield from ray_processes.deleted_before_redis(ray, "rayclusters", "headless", timeouts)


@pytest.mark.kuberay_issue(1141)
@pytest.mark.usefixtures("headless_goes_before_redis")
@pytest.mark.parametrize("gcs_ft", [False, True], ids=["no-gcs-ft", "gcs-ft"])
def test_the_head_s_node_lost_gives_the_cluster_a_new_head_elsewhere(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    profile: Any,
    timeouts: Timeouts,
    metrics: dict[str, float],
    gcs_ft: bool,
) -> None:
    """The machine running the head is lost and its Node deleted (as a cloud does). KubeRay makes a
    new head on another node and the worker, on a node that stays, is alive in its view. With GCS
    fault tolerance (Redis, kept on a node that stays) a detached actor on the worker made before
    answers the new head with its state. Records `node_not_ready_s` and `recovery_s` (from the
    Node's deletion to the worker alive in the new head's view).

    Catches: no new head once the lost one is gone (#1141 on a lost node), a new head on the lost
    node or one whose worker never rejoins; with GCS fault tolerance, the actor or its state lost."""
    faults = _faults(conformance)
    victim, keeper = _victim_and_keeper(ray, conformance.capabilities.fault_nodes)
    values = {**cluster_values, "name": "headless", "head_prefer_node": victim,
              "workers": [{"name": "small", "replicas": 1, "prefer_node": keeper}]}  # fmt: skip
    if gcs_ft:
        ray_processes.start_redis(ray, profile, timeouts, node=keeper)
        values["redis_address"] = ray_processes.REDIS_ADDRESS
    ray.create("rayclusters", render("ray/raycluster.yaml", **values))
    with behaviour("KubeRay makes RayCluster headless ready"):
        ray.wait_cluster_ready("headless", timeouts.ready)
        until_workers_alive(ray, "headless", timeouts.ready)
    old = ray.head_pod("headless")
    (worker,) = ray.pods("headless", "worker")
    if (old.spec.node_name, worker.spec.node_name) != (victim, keeper):  # preferences: the environment
        placed = f"{old.spec.node_name} and {worker.spec.node_name}"
        raise RuntimeError(f"the head and the worker landed on {placed}, not on {victim} and {keeper}")
    before = _counter(ray.python_in_head("headless", COUNTER)) if gcs_ft else (0, "")
    with _only_the_check_on(ray, victim, timeouts.ready):
        try:
            lost_at = time.time()
            faults.stop_node(victim)
            metrics["node_not_ready_s"] = _wait_node(ray, victim, ready=False, since=lost_at)
            ray.core.delete_node(victim)
            gone = time.monotonic()
            new = ray.wait_replaced("headless", old, "head", timeouts.ready)
            with behaviour("the worker is alive in the new head's view"):
                ray.wait_cluster_ready("headless", timeouts.ready)
                until_workers_alive(ray, "headless", timeouts.ready)
            metrics["recovery_s"] = round(time.monotonic() - gone, 2)
            answer = (
                ray_processes.until_head_answers(ray, "headless", COUNTER, timeouts.ready) if gcs_ft else ""
            )
        finally:
            faults.start_node(victim)  # returns once the node is Ready again
    assert new.spec.node_name != victim, f"the new head runs on the lost node {victim}"
    if gcs_ft:
        after = _counter(answer)
        assert after == (before[0] + 1, before[1]), (
            f"the detached actor after the head's node was lost: {after}, before: {before} "
            "(GCS fault tolerance keeps the same actor and its state)"
        )


def _wait_evicted(ray: Ray, pod: Any) -> None:
    """Kubernetes evicting the pod of the unreachable node once its toleration ran out (the
    environment); the pod then waits, Terminating, for a kubelet that cannot answer (so it is
    never gone while the node is cut off)."""
    wait_for(
        ray.core.list_namespaced_pod,
        lambda p: p.metadata.deletion_timestamp is not None,
        what=f"pod {pod.metadata.name} evicted",
        timeout=NODE_STATE_S + EVICTED_AFTER_S,
        namespace=ray.namespace,
        field_selector=f"metadata.name={pod.metadata.name}",
    )


# A RayService on the node-fault layout: its head on the node that stays and kept out of the serve
# Service, two Serve replicas on two workers, one preferring the node taken away and one pinned to
# the node that stays (rayservice.yaml's serve and kept groups). A replica takes a worker's whole
# Ray CPU: the lost replica cannot double up on the kept worker (seen with 0.1 CPU replicas: Serve
# restarted it there before the replacement joined, and a worker without a replica stays out of
# the serve Service by design), so Serve places it on the replacement once that joins.
SERVICE = "nodeloss"
REPLICA_CPUS = 1  # each serve worker's num-cpus in rayservice.yaml
RECOVERED_WINDOW_S = 10  # the load goes on this long once the service is whole
DATA_PLANE_S = 2  # answers this soon after the replacement joined the serve Service are not judged


def _serve_worker(ray: Ray, cluster: str, group: str) -> Any:
    (pod,) = [p for p in ray.pods(cluster, "worker") if p.metadata.labels.get("ray.io/group") == group]
    return pod


@pytest.mark.requires("gateway_api")
def test_a_rayservice_keeps_answering_through_the_gateway_while_a_worker_node_is_lost(
    ray: Ray,
    conformance: Environment,
    cluster_values: dict[str, Any],
    profile: Profile,
    timeouts: Timeouts,
    metrics: dict[str, float],
    request: pytest.FixtureRequest,
) -> None:
    """A Ready RayService with a Serve replica and proxy on a worker node that is lost (then its
    Node deleted, as a cloud does) and another on a node that stays, under 20 req/s through the
    Gateway. Requests the Gateway still sends to the lost proxy fail until Kubernetes marks its
    pod NotReady (measured, not judged: the environment's); the app must keep answering the rest.
    KubeRay replaces the lost worker in the same RayCluster, the replacement is put behind the
    serve Service only once its proxy answers (KubeRay's readiness probe on RayService workers),
    and the RayService stays on its cluster and is Ready. Records `node_not_ready_s`,
    `silence_s` (the longest stretch without an answer), `failed_requests`, `recovery_s` (from
    the Node's deletion to the service whole again) and a per-second timeline.

    Sources (v1.7.0): controllers/ray/common/pod.go (RayService workers' readiness probe checks
    the Serve proxy, `-/healthz`; their ray.io/serve label is always true);
    controllers/ray/rayservice_controller.go (a RayCluster spec unchanged: no new cluster).

    Catches: the lost worker never replaced or its replacement never behind the serve Service; a
    replacement put behind it before its proxy answers (failures once it is behind the Service);
    a node loss answered with a new RayCluster; a RayService not Ready again on its cluster; the
    app silent longer than `thresholds.node_loss_silence_s`."""
    faults = _faults(conformance)
    victim, keeper = _victim_and_keeper(ray, conformance.capabilities.fault_nodes)
    values = rs.rayservice_values(
        cluster_values, SERVICE, serve_workers=1, serve_replicas=2, replica_cpus=REPLICA_CPUS,
        head_node=keeper, serve_prefer_node=victim, serve_evicted_after_s=EVICTED_AFTER_S,
        kept_serve_node=keeper,
    )  # fmt: skip
    gateway_class = profile.gateway_class
    svc, address, host = serving.ready_behind_own_gateway(ray, values, gateway_class, timeouts, metrics)
    cluster, service = rs.active_cluster(svc), f"{SERVICE}-serve-svc"
    lost, kept = _serve_worker(ray, cluster, "serve"), _serve_worker(ray, cluster, "kept")
    if lost.spec.node_name != victim:  # a preference the scheduler did not follow: the environment
        raise RuntimeError(f"the serve worker landed on {lost.spec.node_name}, not on {victim} as preferred")
    with behaviour(f"the serve Service {service} has both workers' proxies"):
        serving.wait_serve_endpoints(ray, service, [lost, kept], "both workers", timeouts.ready)
    marks: list[tuple[float, str]] = []
    load = serving.FaultLoad(ray, conformance, (address, host), "a worker node lost while serving",
                             SERVICE, cluster, marks)  # fmt: skip
    with _only_the_check_on(ray, victim, timeouts.ready):
        try:
            with load.running(timeouts, metrics, request) as (gen, sampler):
                lost_at = time.time()
                faults.stop_node(victim)
                marks.append((lost_at, f"node {victim} lost"))
                metrics["node_not_ready_s"] = _wait_node(ray, victim, ready=False, since=lost_at)
                ray.core.delete_node(victim)
                gone = time.time()
                marks.append((gone, f"Node {victim} deleted"))
                new = ray.wait_replaced(cluster, lost, "worker", timeouts.ready, group="serve")
                with behaviour(f"the replacement worker's proxy joins the serve Service {service}"):
                    both = "the replacement and the kept worker"
                    serving.wait_serve_endpoints(ray, service, [new, kept], both, timeouts.ready)
                behind = time.time()
                marks.append((behind, f"{new.metadata.name} behind {service}"))
                serving.ready_again_on(ray, SERVICE, cluster, timeouts)
                whole = time.time()
                marks.append((whole, f"RayService {SERVICE} Ready on {cluster}"))
                metrics["recovery_s"] = round(whole - gone, 2)
                time.sleep(RECOVERED_WINDOW_S)  # poll-interval: a load window once whole, judged below
        finally:
            faults.start_node(victim)  # returns once the node is Ready again
    records = gen.records
    budget = profile.thresholds["node_loss_silence_s"]
    metrics["silence_s"], metrics["silence_budget_s"] = traffic.longest_silence_s(records), budget
    assert not [s for s in sampler.samples if s.pending], "the node loss made a pending RayCluster"
    answered = {r.backend for r in records if r.ok}
    assert answered == {cluster}, f"answers came from {sorted(answered)}, not only {cluster}"
    assert new.spec.node_name != victim, f"the replacement runs on the lost node {victim}"
    assert metrics["silence_s"] <= budget, (
        f"the app did not answer for {metrics['silence_s']}s while a worker node was lost, over the "
        f"{budget}s budget (thresholds.node_loss_silence_s): {analysis.summarize(records).describe()}"
    )
    late = [r for r in records if r.sent > behind + DATA_PLANE_S and not r.ok]
    assert not late, (
        f"{len(late)} failed requests once the replacement {new.metadata.name} was behind {service}: "
        f"{analysis.error_details(late)}"
    )
