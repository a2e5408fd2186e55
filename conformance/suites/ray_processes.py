"""Redis for GCS fault tolerance, and Ray's own processes killed or frozen in a pod, shared by
the fault-recovery, rayservice and upgrade checks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from conformance.kube.manifests import render_all
from conformance.kube.pods import is_serving
from conformance.kube.ray import Ray
from conformance.kube.wait import poll_until, wait_for, wait_gone
from conformance.timeouts import Timeouts

REDIS = "redis"
REDIS_ADDRESS = f"{REDIS}:6379"

# Finds a process by its command name inside a Ray container (its own PID namespace, made by
# the check), so the kill below goes to exactly that PID.
FIND_PROCESS = (
    "import os, sys\n"
    "name = sys.argv[1]\n"
    "pids = [p for p in os.listdir('/proc') if p.isdigit()\n"
    "        and open(f'/proc/{p}/comm').read().strip() == name]\n"
    "print(' '.join(pids))\n"
)

# Freezes (SIGSTOP) every process of a command name in a Ray container, now and whenever one
# starts again, until the container ends: a hung process, not a dead one Ray would replace.
# Started detached, so the exec that starts it returns at once.
FREEZE_FOREVER = (
    "import os, signal, sys, time\n"
    "name = sys.argv[1]\n"
    "while True:\n"
    "    for p in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
    "        try:\n"
    "            if open(f'/proc/{p}/comm').read().strip() == name:\n"
    "                os.kill(int(p), signal.SIGSTOP)\n"
    "        except OSError:\n"
    "            pass\n"
    "    time.sleep(0.2)  # poll-interval: a proxy Serve restarts is frozen within this\n"
)
# The state letter of each process of a command name (T: stopped), one per line.
PROCESS_STATES = (
    "import os, sys\n"
    "for p in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    try:\n"
    "        stat = open(f'/proc/{p}/stat').read()\n"
    "    except OSError:\n"
    "        continue\n"
    "    if stat[stat.index('(') + 1:stat.rindex(')')] == sys.argv[1]:\n"
    "        print(stat[stat.rindex(')') + 2])\n"
)


def start_redis(
    ray: Ray, profile: Any, timeouts: Timeouts, password: str = "", user: str = "", node: str = ""
) -> Any:
    """Redis in the check's namespace, Ready (the environment: an error if it never starts). With
    `user`, only that ACL user (and `password`) gets in; with `password` alone, the default user.
    With `node`, it runs there (a node-fault check keeps it off the node it takes away)."""
    from kubernetes import utils  # noqa: PLC0415 - only these checks apply multi-object add-ons

    for obj in render_all("addons/redis.yaml", name=REDIS, image=profile.redis_image,
                          pull_policy=profile.pull_policy, password=password, user=user):  # fmt: skip
        if node and obj["kind"] in ("Deployment", "StatefulSet", "Pod"):
            pod_spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
            pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        utils.create_from_dict(ray.api, obj, namespace=ray.namespace)
    return wait_for(
        ray.core.list_namespaced_pod,
        is_serving,
        what="Redis to be Ready",
        timeout=timeouts.ready,
        namespace=ray.namespace,
        label_selector=f"app.kubernetes.io/name={REDIS}",
    )


def deleted_before_redis(ray: Ray, plural: str, name: str, timeouts: Timeouts) -> Iterator[None]:
    """For a fixture: after the check, its Ray object `plural`/`name`, and with it every GCS fault-
    tolerant RayCluster of the namespace, goes while Redis and the namespace still run.

    KubeRay cleans a deleted cluster's Redis state with a Job, and a terminating namespace admits
    none: the cluster's finalizer would hold the namespace until KubeRay gives up on it (5 minutes
    in 1.7.0), and a check that waits for earlier namespaces would wait that long. Best effort:
    the check's verdict is already made."""
    yield
    with contextlib.suppress(Exception):
        try:
            ray.delete(plural, name)
        except ApiException as exc:
            if exc.status != 404:  # the check deleted it itself
                raise
        wait_gone(ray.list_fn("rayclusters"), what="the check's RayClusters", timeout=timeouts.cleanup)


def redis_keys(ray: Ray, redis_pod: Any, storage_namespace: str, password: str = "", user: str = "") -> int:
    auth = (["--user", user] if user else []) + (["-a", password, "--no-auth-warning"] if password else [])
    out = ray.exec(redis_pod, ["redis-cli", *auth, "--scan", "--pattern", f"*{storage_namespace}*"])
    return len(out.split())


def until_head_answers(ray: Ray, cluster: str, script: str, timeout: float) -> str:
    """Run `script` on the head once Ray there accepts drivers again (it may lag the pod's readiness);
    the script gets `timeout` as its argument."""
    command = ["python", "-c", script, str(timeout)]
    return poll_until(
        lambda: ray.exec(ray.head_pod(cluster), command, timeout=timeout + 60),
        what=f"the new head of {cluster} to run a driver",
        timeout=timeout,
        retry_on=(Exception,),  # exec errors, no head pod yet, API hiccups while it restarts
    )


def the_process(ray: Ray, pod: Any, process: str) -> str:
    """The PID of the one `process` in `pod`'s Ray container; more or none is a harness error."""
    pids = ray.exec(pod, ["python", "-c", FIND_PROCESS, process]).split()
    if len(pids) != 1:
        raise RuntimeError(f"expected one {process} in {pod.metadata.name}, found PIDs {pids}")
    return pids[0]


def kill(ray: Ray, pod: Any, process: str, pid: str) -> None:
    """SIGKILL `pid` in the pod's Ray container. The container may die under this exec, which then
    fails; unless the container has ended or restarted, or the process is gone, the kill did not
    happen: a harness error, never KubeRay's failure."""
    try:
        ray.exec(pod, ["kill", "-9", pid], timeout=30)
        return
    except Exception as exc:  # noqa: BLE001 - decided below from the pod and the process
        failure = exc
    try:
        now = ray.core.read_namespaced_pod(pod.metadata.name, ray.namespace)
    except ApiException as exc:
        if exc.status == 404:  # KubeRay has already deleted the dead pod
            return
        raise
    if now.status.phase in ("Failed", "Succeeded") or now.metadata.deletion_timestamp:
        return  # the container ended (restartPolicy Never: it does not come back in this pod)
    try:
        still = ray.exec(now, ["cat", f"/proc/{pid}/comm"], timeout=30).strip()
    except Exception:  # noqa: BLE001 - the process, or the container, is gone: the kill worked
        return
    if still == process:
        raise RuntimeError(f"could not kill {process} (PID {pid}) in {pod.metadata.name}: {failure}")


def freeze(ray: Ray, pod: Any, process: str, timeout: float) -> None:
    """Freeze every `process` in the pod's Ray container for as long as it lives, and return once
    one is seen stopped. Never seen stopped is a harness error (no such process to fail)."""
    ray.exec(pod, ["sh", "-c", 'nohup python -c "$0" "$1" >/dev/null 2>&1 &', FREEZE_FOREVER, process])
    poll_until(
        lambda: "T" in ray.exec(pod, ["python", "-c", PROCESS_STATES, process]).split() or None,
        what=f"{process} stopped in {pod.metadata.name}",
        timeout=timeout,
        describe=lambda: f"states {ray.exec(pod, ['python', '-c', PROCESS_STATES, process]).split()}",
    )
