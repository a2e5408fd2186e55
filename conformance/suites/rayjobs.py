"""RayJob bodies and the programs they run, shared by the rayjob and fault-recovery checks.

The programs run for a set time so that a check can act while they run (suspend, delete,
kill the head). That time is the workload's own, never a harness wait: every wait of the
harness is on the RayJob's status.
"""

from __future__ import annotations

from typing import Any

from conformance.kube.manifests import render

FAILS = "python -c \"import sys; print('failing on purpose'); sys.exit(3)\""


def runs_for(seconds: int, then_print: str = "") -> str:
    """An entrypoint that works for `seconds`, then prints `then_print` (if given) and succeeds."""
    tail = f"; print({then_print!r})" if then_print else ""
    return f'python -c "import time; time.sleep({seconds}){tail}"'  # poll-interval: the job's run time


def retried_task_runs_for(seconds: int, output: str) -> str:
    """An entrypoint whose one-CPU Ray task works for `seconds`, may be retried 5 times, returns `output`."""
    task = f"lambda: (time.sleep({seconds}), {output!r})[1]"  # poll-interval: the task's run time
    return (
        'python -c "import ray, time; ray.init(); '
        f"f = ray.remote(num_cpus=1, max_retries=5)({task}); "
        'print(ray.get(f.remote()))"'
    )


SUCCEEDS = runs_for(4, "rayjob-output-ok")


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
