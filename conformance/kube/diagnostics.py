"""The diagnostics bundle collected when a check fails, before its namespace is removed.

Events sorted by time, logs of every container (previous instances too), the Ray custom
resources as YAML, the operator's logs, and `ray status` from each head. Collecting
never raises: a bundle that is partly missing says what could not be read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.stream import stream

RAY_KINDS = ("rayclusters", "rayjobs", "rayservices", "raycronjobs")
LOG_TAIL_LINES = 2000


def collect(
    api: client.ApiClient,
    namespace: str,
    operator_namespace: str,
    out: Path,
    redact: Callable[[str], str] = lambda s: s,
) -> list[Path]:
    """Write the bundle for `namespace` under `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    core = client.CoreV1Api(api)
    written: list[Path] = []

    def save(name: str, read: Callable[[], str]) -> None:
        try:
            text = read()
        except Exception as exc:  # noqa: BLE001 - a bundle records what failed and goes on
            text = f"could not collect: {type(exc).__name__}: {exc}"
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact(text))
        written.append(path)

    save("events.txt", lambda: _events(core, namespace))
    save("ray-resources.yaml", lambda: _ray_resources(api, namespace))
    save(
        "pods.yaml",
        lambda: yaml.safe_dump(
            api.sanitize_for_serialization(core.list_namespaced_pod(namespace)), sort_keys=False
        ),
    )
    for pod in _pods(core, namespace):
        _save_logs(save, core, pod, "logs")
        if (pod.metadata.labels or {}).get("ray.io/node-type") == "head" and pod.status.phase == "Running":
            save(f"ray-status/{pod.metadata.name}.txt", lambda p=pod: _ray_status(core, p))
    for pod in _pods(core, operator_namespace):
        _save_logs(save, core, pod, "operator")
    return written


def _save_logs(
    save: Callable[[str, Callable[[], str]], None], core: client.CoreV1Api, pod: client.V1Pod, folder: str
) -> None:
    """Every container's log, and the previous instance's where it restarted."""
    for container, previous in _containers(pod):
        suffix = ".previous" if previous else ""
        save(
            f"{folder}/{pod.metadata.name}.{container}{suffix}.log",
            lambda c=container, prev=previous: core.read_namespaced_pod_log(
                pod.metadata.name,
                pod.metadata.namespace,
                container=c,
                previous=prev,
                tail_lines=LOG_TAIL_LINES,
            ),
        )


def _pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    try:
        return core.list_namespaced_pod(namespace).items
    except Exception:  # noqa: BLE001 - no pods readable means none to collect
        return []


def _containers(pod: client.V1Pod) -> list[tuple[str, bool]]:
    found = []
    for status in (pod.status.container_statuses or []) + (pod.status.init_container_statuses or []):
        found.append((status.name, False))
        if status.restart_count:
            found.append((status.name, True))
    return found


def _events(core: client.CoreV1Api, namespace: str) -> str:
    events = core.list_namespaced_event(namespace).items

    def when(event: client.CoreV1Event) -> str:
        stamp = (
            event.last_timestamp
            or event.event_time
            or event.first_timestamp
            or event.metadata.creation_timestamp
        )
        return stamp.isoformat() if stamp else ""

    lines = []
    for event in sorted(events, key=when):
        obj = event.involved_object
        lines.append(f"{when(event)} {event.type} {obj.kind}/{obj.name} {event.reason}: {event.message}")
    return "\n".join(lines) + "\n"


def _ray_resources(api: client.ApiClient, namespace: str) -> str:
    custom = client.CustomObjectsApi(api)
    docs = []
    for plural in RAY_KINDS:
        try:
            docs += custom.list_namespaced_custom_object("ray.io", "v1", namespace, plural)["items"]
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
    return yaml.safe_dump_all(docs, sort_keys=False)


def _ray_status(core: client.CoreV1Api, pod: client.V1Pod) -> str:
    container = pod.spec.containers[0].name
    return stream(
        core.connect_get_namespaced_pod_exec,
        pod.metadata.name,
        pod.metadata.namespace,
        container=container,
        command=["ray", "status"],
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _request_timeout=60,
    )
