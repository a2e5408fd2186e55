"""RayJob bodies and the programs they run, shared by the rayjob and fault-recovery checks.

The programs run for a set time so that a check can act while they run (suspend, delete,
kill the head). That time is the workload's own, never a harness wait: every wait of the
harness is on the RayJob's status.
"""

from __future__ import annotations

import base64
from typing import Any

from conformance.kube.manifests import render
from conformance.kube.ray import Ray
from conformance.kube.wait import WaitTimeout
from conformance.timeouts import Timeouts

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


# -- following a RayJob's status ----------------------------------------------------------

FINISHED = ("Complete", "Failed", "ValidationFailed")


def status(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("status", {})


def _describe(obj: dict[str, Any]) -> str:
    return f"{status(obj).get('jobDeploymentStatus')}/{status(obj).get('jobStatus')}"


def job_timeout(timeouts: Timeouts) -> float:
    """How long a RayJob may take to run or end: its cluster up plus its objects applied."""
    return timeouts.ready + timeouts.apply


class Tracker:
    """Follows one RayJob and remembers every deployment status it passed through."""

    def __init__(self, ray: Ray, name: str) -> None:
        self.ray, self.name = ray, name
        self.seen: list[str] = []

    def _note(self, obj: dict[str, Any]) -> None:
        state = status(obj).get("jobDeploymentStatus")
        if state and (not self.seen or self.seen[-1] != state):
            self.seen.append(state)

    def until(self, predicate: Any, what: str, timeout: float) -> dict[str, Any]:
        """Wait on the RayJob's status (KubeRay's behaviour): running out is an AssertionError."""

        def observe(obj: dict[str, Any]) -> bool:
            self._note(obj)
            return predicate(obj)

        try:
            return self.ray.wait(
                "rayjobs", self.name, observe, what=what, timeout=timeout, describe=_describe
            )
        except WaitTimeout as exc:
            raise AssertionError(f"{exc} (deployment statuses seen: {self.seen})") from exc

    def running(self, timeouts: Timeouts) -> dict[str, Any]:
        return self.until(
            lambda o: status(o).get("jobDeploymentStatus") == "Running",
            f"RayJob {self.name} to run",
            job_timeout(timeouts),
        )

    def finished(self, timeout: float) -> dict[str, Any]:
        return self.until(
            lambda o: status(o).get("jobDeploymentStatus") in FINISHED,
            f"RayJob {self.name} to finish",
            timeout,
        )


def start(ray: Ray, body: dict[str, Any]) -> Tracker:
    ray.create("rayjobs", body)
    return Tracker(ray, body["metadata"]["name"])


def completed(job: Tracker, timeouts: Timeouts) -> dict[str, Any]:
    """Wait for the job's end: its entrypoint succeeds, so any other end is KubeRay failing it."""
    final = job.finished(job_timeout(timeouts))
    state = status(final).get("jobDeploymentStatus")
    assert state == "Complete", f"RayJob {job.name} ended {state}, not Complete: {status(final)}"
    return final
