"""Run vegeta in the cluster at a constant rate and bring its per-request records back.

The generator is a pod with Guaranteed QoS in the check's namespace (manifests/load/vegeta.yaml).
`start` creates it and returns once the attack runs; `stop` ends the attack early with SIGTERM;
`collect` waits for the pod to finish, reads the records it printed and checks that it kept
its rate: a generator more than 5% short is a harness error, never a result.

How vegeta reaches a node, on every provider alike (`Delivery`): the pod runs the Ray image the
profile names, which every node of a cluster under test can already run (pulled from the user's
registry on kind and EKS, imported on the local provider), and the harness copies in the vegeta
binary it built from the Go module proxy through the exec API. No image of the harness's own has
to be loaded into nodes or pushed to a registry, so an attached cluster measures load too.
"""

from __future__ import annotations

import base64
import gzip
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from conformance.errors import HarnessError, ProvisioningError
from conformance.kube.manifests import render_all
from conformance.kube.ray import ExecError, Ray
from conformance.kube.wait import WaitTimeout, wait_for
from conformance.profiles import Profile

from . import analysis
from .records import BEGIN_MARK, END_MARK, Record, extract_block

TEMPLATE = "load/vegeta.yaml"
# Started is "the container runs and said so": the first line of run.sh's output.
_STARTED = "attack started"
# Where the pod waits for the binary (an emptyDir); the name appears only once the copy is whole.
BIN_DIR = "/krc-bin"
# Exec frames of this size keep each websocket message small for API servers and proxies alike.
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Delivery:
    """How the generator gets onto a node: an image the cluster already runs, and vegeta to copy in."""

    image: str  # the profile's Ray image: it has /bin/sh, head, base64 and gzip
    pull_policy: str  # the profile's images.pull_policy
    vegeta: Path  # a static linux/amd64 vegeta built here

    def payload(self) -> bytes:
        """The binary as the pod's upload command reads it: gzip, then base64 (text-safe on any exec)."""
        return base64.b64encode(gzip.compress(self.vegeta.read_bytes(), compresslevel=6))


@dataclass(frozen=True)
class Target:
    """One request the generator repeats: a URL and, for name-based routing, a Host header."""

    url: str
    host: str = ""
    method: str = "GET"

    def vegeta(self) -> str:
        lines = [f"{self.method} {self.url}"]
        if self.host:
            lines.append(f"Host: {self.host}")
        return "\n".join(lines)


@dataclass(frozen=True)
class LoadSpec:
    rate: int  # requests per second, sent whatever the server does (open model)
    max_duration_s: int  # the attack ends by itself after this long
    timeout_s: int = 10  # per request
    max_workers: int = 256  # bounds concurrency when answers stall
    cpu: str = "250m"
    memory: str = "256Mi"


def targets_text(targets: list[Target]) -> str:
    # vegeta's http format: targets separated by a blank line.
    return "\n\n".join(t.vegeta() for t in targets) + "\n"


def render(
    name: str, namespace: str, delivery: Delivery, targets: list[Target], spec: LoadSpec, run_id: str
) -> list[dict]:
    return render_all(
        TEMPLATE,
        name=name,
        namespace=namespace,
        image=delivery.image,
        pull_policy=delivery.pull_policy,
        bin_dir=BIN_DIR,
        rate=spec.rate,
        duration_s=spec.max_duration_s,
        timeout_s=spec.timeout_s,
        max_workers=spec.max_workers,
        targets=targets_text(targets),
        cpu=spec.cpu,
        memory=spec.memory,
        run_id=run_id,
        begin_mark=BEGIN_MARK,
        end_mark=END_MARK,
    )


# What must happen once before the next load generator of this process starts: the plugin's wait
# for earlier checks' namespaces to go, for a check marked exclusive(quiet=BEFORE_LOAD) (exclusive.py).
_before_attack: list[Callable[[], None]] = []


def before_next_attack(step: Callable[[], None]) -> None:
    _before_attack.append(step)


def forget_before_attack() -> None:
    """The check ended: what it did not need is not carried into the next one."""
    _before_attack.clear()


def _run_before_attack() -> None:
    while _before_attack:
        _before_attack.pop(0)()


@dataclass
class LoadGenerator:
    api: client.ApiClient
    namespace: str
    delivery: Delivery
    targets: list[Target]
    spec: LoadSpec
    name: str = "load"
    run_id: str = ""
    started_at: float = 0.0  # epoch seconds, when the attack was seen running
    records: list[Record] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def start(self, timeout: float) -> None:
        _run_before_attack()
        config_map, pod = render(
            self.name, self.namespace, self.delivery, self.targets, self.spec, self.run_id
        )
        self.core.create_namespaced_config_map(self.namespace, config_map)
        self.core.create_namespaced_pod(self.namespace, pod)
        self._wait_running(timeout)
        self._copy_vegeta(timeout)
        try:
            self._wait_pod(self._attacking, f"the load generator ({self.spec.rate} req/s) to start", timeout)
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"the load generator did not start: {exc.last_seen}", f"see pod {self.name}"
            ) from exc
        self.started_at = time.time()
        qos = self.core.read_namespaced_pod(self.name, self.namespace).status.qos_class
        if qos != "Guaranteed":
            # Without it the kubelet may throttle or evict the generator first, under pressure.
            raise HarnessError(f"the load generator runs with QoS {qos}, not Guaranteed", "fix its resources")

    def _wait_pod(self, condition: Callable[[client.V1Pod], bool], what: str, timeout: float) -> client.V1Pod:
        return wait_for(
            self.core.list_namespaced_pod,
            condition,
            what=what,
            timeout=timeout,
            describe=_describe_pod,
            namespace=self.namespace,
            field_selector=f"metadata.name={self.name}",
        )

    def _wait_running(self, timeout: float) -> None:
        try:
            self._wait_pod(_running, "the load generator's pod to run", timeout)
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"the load generator's pod ({self.delivery.image}) did not run: {exc.last_seen}",
                f"check that the cluster can run the profile's Ray image; see pod {self.name}",
            ) from exc

    def _copy_vegeta(self, timeout: float) -> None:
        """Copy vegeta into the running pod; its command starts the attack once the file is there."""
        payload = self.delivery.payload()
        # head -c ends the copy at the right byte whether or not the API server passes stdin's close.
        script = (
            f"head -c {len(payload)} | base64 -d | gzip -d > {BIN_DIR}/vegeta.part"
            f" && chmod 755 {BIN_DIR}/vegeta.part && mv {BIN_DIR}/vegeta.part {BIN_DIR}/vegeta"
        )
        resp = stream(
            self.core.connect_get_namespaced_pod_exec,
            self.name,
            self.namespace,
            container="vegeta",
            command=["/bin/sh", "-c", script],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        try:
            for offset in range(0, len(payload), _CHUNK):
                resp.write_stdin(payload[offset : offset + _CHUNK].decode("ascii"))
            resp.run_forever(timeout=timeout)
            output = resp.read_stdout() + resp.read_stderr()
            code = resp.returncode
        finally:
            resp.close()
        if code != 0:
            raise HarnessError(
                f"copying vegeta into the load generator's pod failed (exit {code}): {output[-400:]}"
            )

    def _attacking(self, pod: client.V1Pod) -> bool:
        if pod.status.phase in ("Succeeded", "Failed"):
            raise HarnessError(f"the load generator ended before it was stopped: {self._log()[-400:]}")
        return pod.status.phase == "Running" and _STARTED in self._log()

    def _log(self) -> str:
        try:
            return self.core.read_namespaced_pod_log(self.name, self.namespace, container="vegeta")
        except ApiException:
            return ""

    def stop(self) -> None:
        """End the attack now (requests in flight finish or time out)."""
        pod = self.core.read_namespaced_pod(self.name, self.namespace)
        if pod.status.phase != "Running":
            return
        # It may have ended by itself between the read and the exec; collect() tells.
        with suppress(ExecError):
            Ray(self.api, self.namespace).exec(pod, ["/bin/sh", "-c", "kill -TERM $(cat /tmp/attack.pid)"])

    def collect(self, timeout: float, check: bool = True) -> list[Record]:
        """Wait for the pod to finish, read the records and (unless `check` is False: call
        `check()` later) check that the generator kept its rate."""
        try:
            pod = self._wait_pod(
                lambda p: p.status.phase in ("Succeeded", "Failed"),
                "the load generator to hand over its records",
                timeout,
            )
        except WaitTimeout as exc:
            raise HarnessError(f"the load generator did not finish: {exc.last_seen}") from exc
        log = self._log()
        if pod.status.phase != "Succeeded":
            raise HarnessError(f"the load generator failed: {log[-400:]}")
        try:
            self.records = extract_block(log)
        except ValueError as exc:
            raise HarnessError(f"the load generator's records are unreadable: {exc}") from exc
        if check:
            self.check()
        return self.records

    def check(self) -> float:
        """The achieved rate; LoadShortfall (a harness error) if the generator did not keep it."""
        return analysis.check_rate(self.records, self.spec.rate)


def _running(pod: client.V1Pod) -> bool:
    if pod.status.phase in ("Succeeded", "Failed"):
        raise HarnessError(
            f"the load generator's pod ended before vegeta was copied in: phase {pod.status.phase}"
        )
    return pod.status.phase == "Running"


def _describe_pod(pod: client.V1Pod) -> str:
    waiting = [
        s.state.waiting.reason for s in pod.status.container_statuses or [] if s.state and s.state.waiting
    ]
    return f"phase {pod.status.phase}" + (f" ({', '.join(waiting)})" if waiting else "")


@contextmanager
def running(generator: LoadGenerator, timeout: float, check: bool = True) -> Iterator[LoadGenerator]:
    """Start the generator; on leaving, stop it and collect its records, also when the block
    failed (then without the rate check, so the block's own error is the one reported). A check
    reads `generator.records` after; with `check=False` it calls `generator.check()` itself,
    after it has saved what it measured."""
    generator.start(timeout)
    collect_timeout = timeout + generator.spec.timeout_s
    try:
        yield generator
    except BaseException:
        generator.stop()
        with suppress(HarnessError, ApiException):
            generator.collect(collect_timeout, check=False)
        raise
    generator.stop()
    generator.collect(collect_timeout, check=check)


def deliver(profile: Profile, ray_version: str) -> Delivery:
    """vegeta built (or found in the cache) for the pod of the profile's Ray image at `ray_version`."""
    from conformance.build import gobuild, pins  # noqa: PLC0415 - the build floor
    from conformance.build.cache import cache_dir  # noqa: PLC0415

    tool = pins.TOOLS["vegeta"]
    if shutil.which("go") is None and not gobuild.is_built(tool, cache_dir()):
        raise ProvisioningError(
            "the load generator (vegeta) is not built and there is no Go to build it",
            "install Go 1.26 (the harness builds vegeta from the Go module proxy into its cache)",
        )
    binary = gobuild.ensure_built(tool, cache_dir()) / "vegeta"
    return Delivery(profile.ray_image(ray_version), profile.pull_policy, binary)
