"""How many checks the cluster can hold at once: the worker count of `run --workers auto`.

A typical check makes one RayCluster of a head and two workers. Memory is counted by the
profile's `resources` (the pods' limits): a pod over its limit is killed, whatever else runs.
CPU is counted by what a running check keeps busy on average, one core (CORES_PER_CHECK), within
the cores of the nodes a Ray pod can land on, and never beyond what the pods request
(POD_REQUESTS, 100m each; a worker pod holds 200m while KubeRay's wait-gcs-ready init container
counts, WORKER_INIT_CPU) leaves free. The result is at least 1 and at most MAX_WORKERS.

Not by the CPU limits (2 per check): the checks mostly wait on KubeRay (idle timeouts, TTLs,
deadlines), and counting limits gave 1 worker on the 2-core machine CI runs on. Not by the
requests alone either: on 2026-12-01 on that machine they gave 5 workers, Ray heads then failed
their probes and RayJobs sat in Initializing until their waits ran out. With 2 workers (one per
core) the whole main job on KubeRay 1.7.0 was conformant, 0 failed, 0 errors, with the machine's
CPUs 59 % busy on average and at 95 % or more in 18 % of its seconds (2026-12-02;
benchmarks/README.md, "Parallel runs"). A starved machine must not pass for a misbehaving KubeRay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from conformance.kube.nodes import is_node_ready
from conformance.profiles import POD_REQUESTS, Profile

WORKERS_PER_CHECK = 2  # Ray worker pods beside the head in a typical check
MAX_WORKERS = 8  # each worker is a Python process of the harness on this machine too
CORES_PER_CHECK = Decimal(1)  # a running check keeps less than this busy on average (measured, see above)
# KubeRay (1.1 and later) gives every worker pod a wait-gcs-ready init container requesting 200m,
# and the scheduler counts a pod at the larger of its init containers and its containers' sum.
WORKER_INIT_CPU = Decimal("0.2")


@dataclass(frozen=True)
class Room:
    """Free CPU (cores) and memory (bytes) for the suites' pods, and all the cores they may use."""

    cpu: Decimal  # allocatable less what running pods request
    memory: Decimal
    cores: Decimal  # allocatable, all of it
    source: str  # where the figures come from, for the line the CLI prints


def per_check(profile: Profile) -> tuple[Decimal, Decimal]:
    """(CPU cores, memory bytes) one typical check may use: its pods' limits (their requests if none)."""

    def limit(resources: dict[str, str], name: str) -> Decimal:
        return parse_quantity(resources.get(name, POD_REQUESTS[name]))

    cpu = limit(profile.head_resources, "cpu") + limit(profile.worker_resources, "cpu") * WORKERS_PER_CHECK
    memory = limit(profile.head_resources, "memory")
    memory += limit(profile.worker_resources, "memory") * WORKERS_PER_CHECK
    return cpu, memory


def requested_per_check() -> Decimal:
    """CPU cores the pods of a typical check hold of the scheduler's room (the harness's manifests
    give every pod POD_REQUESTS; a worker pod's init container asks WORKER_INIT_CPU)."""
    pod = parse_quantity(POD_REQUESTS["cpu"])
    return pod + max(pod, WORKER_INIT_CPU) * WORKERS_PER_CHECK


def workers_for(room: Room, profile: Profile) -> int:
    _, memory = per_check(profile)
    by_cpu = min(room.cores // CORES_PER_CHECK, room.cpu // requested_per_check())
    fits = min(by_cpu, room.memory // memory)
    return int(max(1, min(MAX_WORKERS, fits)))


def room_in_cluster(api: client.ApiClient) -> Room:
    """Allocatable minus requested, over the Ready nodes without a NoSchedule/NoExecute taint."""
    core = client.CoreV1Api(api)
    nodes = [n for n in core.list_node().items if _takes_ray_pods(n)]
    cpu = sum((parse_quantity(n.status.allocatable.get("cpu", "0")) for n in nodes), Decimal(0))
    memory = sum((parse_quantity(n.status.allocatable.get("memory", "0")) for n in nodes), Decimal(0))
    cores = cpu
    names = {n.metadata.name for n in nodes}
    running = "status.phase!=Succeeded,status.phase!=Failed"
    for pod in core.list_pod_for_all_namespaces(field_selector=running).items:
        if pod.spec.node_name not in names:
            continue
        cpu -= effective_request(pod.spec, "cpu")
        memory -= effective_request(pod.spec, "memory")
    return Room(cpu, memory, cores, f"{len(nodes)} node(s) of the cluster, less what running pods request")


def effective_request(spec: client.V1PodSpec, resource: str) -> Decimal:
    """What the scheduler holds for a pod: the larger of its containers' sum and any one init container."""

    def asked(container: client.V1Container) -> Decimal:
        requests = (container.resources and container.resources.requests) or {}
        return parse_quantity(requests.get(resource, "0"))

    containers = sum((asked(c) for c in spec.containers), Decimal(0))
    return max([containers, *(asked(c) for c in spec.init_containers or [])])


def room_on_this_machine() -> Room:
    """For a local cluster not made yet: its one node will be this machine."""
    meminfo = Path("/proc/meminfo").read_text().split()
    total_kib = Decimal(meminfo[meminfo.index("MemTotal:") + 1])
    cores = Decimal(os.cpu_count() or 1)
    return Room(cores, total_kib * 1024, cores, "this machine (the local cluster is not up yet)")


def within_this_machine(room: Room) -> Room:
    """A local cluster's nodes all report this machine's cores and memory: several of them hold
    no more than the machine does."""
    machine = room_on_this_machine()
    if room.cores <= machine.cores and room.memory <= machine.memory:
        return room
    return Room(
        min(room.cpu, machine.cpu),
        min(room.memory, machine.memory),
        min(room.cores, machine.cores),
        f"{room.source}, within this machine (its nodes share it)",
    )


# Providers whose nodes are processes or containers on the machine the harness runs on: every node
# reports the whole machine, so together they hold no more than the machine does.
SHARES_THE_HOST = ("local", "kind")


def room_for(provider: str, api: client.ApiClient) -> Room:
    """The room of a cluster that exists, within this machine where its nodes share it."""
    room = room_in_cluster(api)
    return within_this_machine(room) if provider in SHARES_THE_HOST else room


def describe(room: Room, count: int, profile: Profile) -> str:
    """The line a run prints about its worker count, so a reader can check the arithmetic."""
    _, memory = per_check(profile)
    free = f"{room.cpu:.1f} CPU and {room.memory / 2**30:.1f} GiB free"
    free += f", {room.cores:.1f} cores, on {room.source}"
    takes = (
        f"a check keeps under {CORES_PER_CHECK} core busy and its pods have memory limits of "
        f"{memory / 2**30:.1f} GiB"
    )
    return f"workers: {count} (auto: {free}; {takes})"


def _takes_ray_pods(node: client.V1Node) -> bool:
    ready = is_node_ready(node)
    blocked = any(t.effect in ("NoSchedule", "NoExecute") for t in (node.spec.taints or []))
    return ready and not blocked and not node.spec.unschedulable
