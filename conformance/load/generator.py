"""Run vegeta in the cluster at a constant rate and bring its per-request records back.

The generator is a pod with Guaranteed QoS in the check's namespace (manifests/load/vegeta.yaml).
`start` creates it and returns once the attack runs; `stop` ends the attack early with SIGTERM;
`collect` waits for the pod to finish, reads the records it printed and checks that it kept
its rate: a generator more than 5% short is a harness error, never a result.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance.errors import HarnessError, ProvisioningError
from conformance.kube.manifests import render_all
from conformance.kube.ray import ExecError, Ray
from conformance.kube.wait import WaitTimeout, wait_for

from . import analysis
from .records import BEGIN_MARK, END_MARK, Record, extract_block

TEMPLATE = "load/vegeta.yaml"
# Started is "the container runs and said so": the first line of run.sh's output.
_STARTED = "attack started"


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
    name: str, namespace: str, image: str, targets: list[Target], spec: LoadSpec, run_id: str
) -> list[dict]:
    return render_all(
        TEMPLATE,
        name=name,
        namespace=namespace,
        image=image,
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


@dataclass
class LoadGenerator:
    api: client.ApiClient
    namespace: str
    image: str
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
        config_map, pod = render(self.name, self.namespace, self.image, self.targets, self.spec, self.run_id)
        self.core.create_namespaced_config_map(self.namespace, config_map)
        self.core.create_namespaced_pod(self.namespace, pod)
        try:
            wait_for(
                self.core.list_namespaced_pod,
                self._attacking,
                what=f"the load generator ({self.spec.rate} req/s) to start",
                timeout=timeout,
                describe=_describe_pod,
                namespace=self.namespace,
                field_selector=f"metadata.name={self.name}",
            )
        except WaitTimeout as exc:
            raise ProvisioningError(
                f"the load generator did not start: {exc.last_seen}", f"see pod {self.name}"
            ) from exc
        self.started_at = time.time()
        qos = self.core.read_namespaced_pod(self.name, self.namespace).status.qos_class
        if qos != "Guaranteed":
            # Without it the kubelet may throttle or evict the generator first, under pressure.
            raise HarnessError(f"the load generator runs with QoS {qos}, not Guaranteed", "fix its resources")

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
            pod = wait_for(
                self.core.list_namespaced_pod,
                lambda p: p.status.phase in ("Succeeded", "Failed"),
                what="the load generator to hand over its records",
                timeout=timeout,
                describe=_describe_pod,
                namespace=self.namespace,
                field_selector=f"metadata.name={self.name}",
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


def provide_image(provider: Any) -> str:
    """The generator's image reference, built here and loaded into the nodes where the provider
    can load images (local: imported into containerd; kind: `kind load image-archive`); other
    providers (eks, existing) have no way to get it: there is no official vegeta image to pull."""
    if not hasattr(provider, "load_image"):
        raise HarnessError(
            f"provider {type(provider).__name__} cannot load the load generator's image",
            "run the load checks on the local or the kind provider",
        )
    from conformance.providers.local import gobuild, images, pins  # noqa: PLC0415

    tool = pins.TOOLS["vegeta"]
    binary = gobuild.ensure_built(tool, provider.cache) / "vegeta"
    packer = getattr(provider, "image_packer", "buildah")
    archive = images.vegeta_image(provider.cache, binary, tool.version, packer=packer)
    provider.load_image(archive)
    return archive.ref
