"""Watching a RayCluster scale: desired replicas, pods by phase, Ray's alive nodes and, for a
RayService's cluster, a Serve deployment's replicas by state and Serve's live proxies over time.

A `ScaleWatcher` samples in a background thread while a check drives demand up and down,
so the check can assert on the whole history (never above maxReplicas, never a partial
multi-host replica) and the report can draw it. Ray's own view comes from the head's
dashboard through the API server's pod proxy: no exec, no port-forward, cheap enough to
ask every couple of seconds.

A history is only evidence if it was taken: `problems()` says when reads failed or the
samples came further apart than the cadence allows, and a check asserts it is empty. A
watcher that crashed on something other than the API (a harness bug) raises HarnessError
when it stops.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from conformance import interrupts
from conformance.kube.ray import Ray
from conformance.kube.sampling import LOST_SAMPLE, assert_complete, crashed, history_problems, own_client

DASHBOARD_PORT = 8265
SAMPLE_EVERY_S = 2.0
# A sample takes two API reads and a dashboard call (at most 5 s); samples further apart than
# this many periods leave holes in which a pod could come and go unseen.
MAX_GAP_PERIODS = 5


@dataclass(frozen=True)
class GroupReading:
    """One worker group as a `ScaleReading` saw it."""

    desired: int  # spec.workerGroupSpecs[].replicas: what the autoscaler asked for
    pods: dict[str, int]  # pods of the group that are not being deleted, by phase


@dataclass(frozen=True)
class ScaleReading:
    """What a RayCluster's worker groups, Ray and Serve said at one moment (taken by `ScaleWatcher`)."""

    t: float  # seconds since the watcher started
    groups: dict[str, GroupReading]
    ray_alive_workers: int | None  # None: the dashboard did not answer this time
    # Replicas of the watched Serve deployment by state (RUNNING, STOPPING, ...); None: unknown.
    serve_replicas: dict[str, int] | None = None
    # Serve's HTTP proxies not yet drained, one per node that has one; None: unknown.
    serve_proxies: int | None = None

    def replicas(self, state: str = "") -> int | None:
        """Serve replicas in `state` (all listed ones when empty); None when unknown."""
        if self.serve_replicas is None:
            return None
        return self.serve_replicas.get(state, 0) if state else sum(self.serve_replicas.values())

    def pods(self, group: str, phase: str | None = None) -> int:
        counts = self.groups[group].pods if group in self.groups else {}
        return counts.get(phase, 0) if phase else sum(counts.values())


class ReplicaRecording(Protocol):
    """Where a watcher records what it saw: the report's autoscaling timeline
    (conformance/report/timelines.py, `AutoscalingRecording`) is one."""

    def event(self, label: str, t: float | None = None) -> None: ...

    def replicas(
        self, group: str, count: int, desired: int | None = None, t: float | None = None
    ) -> None: ...


@dataclass
class ScaleWatcher:
    ray: Ray
    cluster: str
    recording: ReplicaRecording | None = None
    every_s: float = SAMPLE_EVERY_S
    serve_deployment: tuple[str, str] | None = None  # (application, deployment) to count replicas of
    samples: list[ScaleReading] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scale-watcher-{self.cluster}", daemon=True)
        self._started = time.monotonic()
        self._started_epoch = time.time()
        self._stopped_at: float | None = None
        self._crash: BaseException | None = None
        self._reader = Ray(own_client(self.ray.api), self.ray.namespace)  # never the check's client

    def __enter__(self) -> ScaleWatcher:
        interrupts.start_thread(self._thread)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        interrupts.join_thread(self._thread, timeout=30)
        self._stopped_at = round(time.monotonic() - self._started, 2)
        self._reader.api.close()
        if self._crash is not None and exc_type is None:
            raise crashed(f"RayCluster {self.cluster}", self._crash) from self._crash

    def problems(self) -> list[str]:
        """Why the samples are not a full history: failed reads, too few samples, or a gap longer
        than the cadence allows (from the start to the stop)."""
        end = self._stopped_at if self._stopped_at is not None else round(time.monotonic() - self._started, 2)
        times = [s.t for s in self.samples]
        return history_problems(
            f"RayCluster {self.cluster}", self.errors, times, end, MAX_GAP_PERIODS * self.every_s, start=0.0
        )

    def assert_evidence(self) -> None:
        """The history the check judged was really taken: no lost reads, no holes."""
        assert_complete(f"RayCluster {self.cluster}", self.problems())

    def event(self, label: str) -> float:
        """Mark a moment (demand added, demand removed); returns its time on the watcher's clock."""
        t = round(time.monotonic() - self._started, 2)
        if self.recording:
            self.recording.event(label)
        return t

    def clock(self, epoch: float) -> float:
        """An epoch time (a load record's, say) on the watcher's clock."""
        return round(epoch - self._started_epoch, 2)

    def max_desired(self, group: str) -> int:
        return max((s.groups[group].desired for s in self.samples if group in s.groups), default=0)

    def max_pods(self, group: str) -> int:
        return max((s.pods(group) for s in self.samples), default=0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._take()
            except LOST_SAMPLE as exc:  # one lost sample is not a reason to stop watching
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            except Exception as exc:  # noqa: BLE001 - raised as a harness error when the watcher stops
                self._crash = exc
                return
            self._stop.wait(self.every_s)  # poll-interval: the sampling period of the timeline

    def _take(self) -> None:
        cluster = self._reader.get("rayclusters", self.cluster)
        pods = [p for p in self._reader.pods(self.cluster) if p.metadata.deletion_timestamp is None]
        groups = {}
        for spec in cluster["spec"].get("workerGroupSpecs", []):
            name = spec["groupName"]
            mine = [p for p in pods if p.metadata.labels.get("ray.io/group") == name]
            phases = dict(Counter(p.status.phase for p in mine))
            groups[name] = GroupReading(int(spec.get("replicas", 0)), phases)
        head = next((p for p in pods if p.metadata.labels.get("ray.io/node-type") == "head"), None)
        alive = self._alive_workers(head)
        replicas, proxies = self._serve(head) if self.serve_deployment else (None, None)
        sample = ScaleReading(round(time.monotonic() - self._started, 2), groups, alive, replicas, proxies)
        self.samples.append(sample)
        self._record(sample)

    def _alive_workers(self, head: Any) -> int | None:
        answer = self._dashboard(head, "api/v0/nodes")
        return None if answer is None else _or_none(alive_workers, answer)

    def _serve(self, head: Any) -> tuple[dict[str, int] | None, int | None]:
        answer = self._dashboard(head, "api/serve/applications/")
        if answer is None:
            return None, None
        return _or_none(replica_states, answer, *self.serve_deployment), _or_none(live_proxies, answer)

    def _dashboard(self, head: Any, path: str) -> Any:
        """The head dashboard's JSON answer at `path`; None while it is down or not up yet."""
        if head is None or head.status.phase != "Running":
            return None
        try:
            raw = self._reader.core.connect_get_namespaced_pod_proxy_with_path(
                f"{head.metadata.name}:{DASHBOARD_PORT}",
                self._reader.namespace,
                path,
                _preload_content=False,
                _request_timeout=5,
            )
            return json.loads(raw.data)
        except (*LOST_SAMPLE, ValueError):
            return None

    def _record(self, sample: ScaleReading) -> None:
        if not self.recording:
            return
        for name, group in sample.groups.items():
            self.recording.replicas(name, group.pods.get("Running", 0), group.desired, t=sample.t)
            self.recording.replicas(f"{name} pending", group.pods.get("Pending", 0), t=sample.t)
        if sample.ray_alive_workers is not None:
            self.recording.replicas("Ray alive workers", sample.ray_alive_workers, t=sample.t)
        if sample.serve_replicas is not None:
            self.recording.replicas("Serve replicas running", sample.replicas("RUNNING"), t=sample.t)
            self.recording.replicas("Serve replicas listed", sample.replicas(), t=sample.t)
        if sample.serve_proxies is not None:
            self.recording.replicas("Serve proxies", sample.serve_proxies, t=sample.t)


def _or_none(read: Any, answer: Any, *args: str) -> Any:
    """`read(answer, *args)`, or None when the answer lacks what it reads (not up yet)."""
    try:
        return read(answer, *args)
    except (KeyError, TypeError):
        return None


def live_proxies(applications: dict[str, Any]) -> int:
    """Serve's proxies not DRAINED in a `GET /api/serve/applications/` answer. A node keeps a
    proxy (an actor, so the node is not idle) until Serve has drained it after its last replica."""
    return sum(1 for p in applications["proxies"].values() if p.get("status") != "DRAINED")


def replica_states(applications: dict[str, Any], app: str, deployment: str) -> dict[str, int]:
    """Replicas of `deployment` of `app` by state, in a `GET /api/serve/applications/` answer."""
    replicas = applications["applications"][app]["deployments"][deployment]["replicas"]
    return dict(Counter(r.get("state", "") for r in replicas))


def alive_workers(listing: dict[str, Any]) -> int:
    """Alive non-head nodes in a `GET /api/v0/nodes` answer of Ray's state API."""
    nodes = listing["data"]["result"]["result"]
    return sum(1 for n in nodes if n.get("state") == "ALIVE" and not n.get("is_head_node"))


def partial_replica_streak(samples: list[ScaleReading], group: str, hosts: int) -> int:
    """The longest run of consecutive samples in which `group` had a partial multi-host replica
    (a pod count that is not a multiple of `hosts`): one sample may catch pods mid-creation."""
    longest = current = 0
    for sample in samples:
        current = current + 1 if sample.pods(group) % hosts else 0
        longest = max(longest, current)
    return longest
