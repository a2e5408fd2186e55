"""RayJob bodies and the programs they run, shared by the rayjob and fault-recovery checks.

The programs run for a set time so that a check can act while they run (suspend, delete,
kill the head). That time is the workload's own, never a harness wait: every wait of the
harness is on the RayJob's status.
"""

from __future__ import annotations

import base64
from typing import Any

from conformance.kube.manifests import render

FAILS = "python -c \"import sys; print('failing on purpose'); sys.exit(3)\""


def runs_for(seconds: int, then_print: str = "") -> str:
    """An entrypoint that works for `seconds`, then prints `then_print` (if given) and succeeds."""
    tail = f"; print({then_print!r})" if then_print else ""
    return f'python -c "import time; time.sleep({seconds}){tail}"'  # poll-interval: the job's run time


def program(script: str) -> str:
    """An entrypoint that runs a multi-line Python `script` (base64, so no shell quoting applies)."""
    encoded = base64.b64encode(script.encode()).decode()
    return f"python -c \"import base64; exec(base64.b64decode('{encoded}'))\""


RETRIED_TASK_NAME = "retried_task"
# A one-CPU task that works for 20 s and may be retried 5 times; once it is done, the driver asks
# Ray's state API for the task's attempts (events reach it asynchronously, so it asks a while).
RETRIED_TASK_SCRIPT = f"""
import time
import ray
from ray.util.state import list_tasks
ray.init()

@ray.remote(num_cpus=1, max_retries=5)
def {RETRIED_TASK_NAME}():
    time.sleep(20)  # poll-interval: the task's run time, during which its worker is lost
    return "task-done"

print(ray.get({RETRIED_TASK_NAME}.remote()))
attempts = []
for _ in range(30):
    tasks = list_tasks(filters=[("name", "=", "{RETRIED_TASK_NAME}")])
    attempts = sorted(t.attempt_number for t in tasks)
    if any(t.state == "FINISHED" for t in tasks):
        break
    time.sleep(1)  # poll-interval: task events reach the state API asynchronously
print("task-attempts", ",".join(map(str, attempts)))
"""
RETRIED_TASK = program(RETRIED_TASK_SCRIPT)


def task_attempts(output: str) -> list[int]:
    """The attempt numbers RETRIED_TASK printed (0 is the first attempt)."""
    for line in output.splitlines():
        if line.startswith("task-attempts"):
            return [int(n) for n in line.split(" ", 1)[1].split(",") if n.strip()]
    return []


SUCCEEDS = runs_for(4, "rayjob-output-ok")


def brief(status: dict[str, Any]) -> str:
    """A RayJob status for an assertion message: the fields a reader judges it by, never cut short
    (pytest shortens a dict given as the message to about 240 characters)."""
    fields = ("jobDeploymentStatus", "jobStatus", "reason", "failed", "succeeded", "rayClusterName")
    text = ", ".join(f"{name}={status.get(name)}" for name in fields)
    message = (status.get("message") or "").strip()
    return f"{text}, message={message[:300]!r}" if message else text


def job(values: dict[str, Any], name: str, entrypoint: str = SUCCEEDS, **spec: Any) -> dict[str, Any]:
    """A RayJob with its own head-only RayCluster; `spec` fields are set on top."""
    body = render("ray/rayjob.yaml", **{**values, "name": name, "entrypoint": entrypoint})
    body["spec"].update(spec)
    return body


def fixed_workers(values: dict[str, Any], replicas: int = 1) -> list[dict[str, Any]]:
    """workerGroupSpecs with one group of exactly `replicas` workers."""
    group = {
        "groupName": "small",
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        "rayStartParams": {},
        "template": {"spec": {"containers": [{
            "name": "ray-worker", "image": values["image"], "imagePullPolicy": values["pull_policy"],
            "resources": values["worker_resources"]}]}},
    }  # fmt: skip
    return [group]
