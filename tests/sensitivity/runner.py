"""Seed one fault, run its checks through the real CLI, put the healthy operator back: one lock hold.

The cluster is shared: with KRC_CLUSTER_LOCK set (a lock file, the one `flock` takes), each fault
takes it for its seed, run and restore only, so other users of the cluster get turns in between.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkouts
import yaml
from checkouts import OLDER_MODULE
from kubernetes import client, config

from conformance import profiles
from conformance.environment import Environment, RunOptions
from conformance.install import operator_spec
from conformance.providers.local.provider import LocalProvider

from .faults import Fault, target
from .rogue import LOG_ENV, ROGUE_ENV

ROOT = Path(__file__).resolve().parents[2]
# Where this package is importable from under the name pytest gave it (the first folder up
# without an __init__.py): the run's process loads the rogue plugin from there.
PLUGIN_PATH = Path(__file__).resolve().parents[1]
LOCK_ENV = "KRC_CLUSTER_LOCK"
RUNS = ROOT / "reports" / "sensitivity"
HEALTHY_PROFILE = "default"
INTERRUPTED_RUN_CLEANUP_S = 300  # an interrupted run deletes its namespaces (Ray pods: 30 s grace)


@dataclass
class Observed:
    summary: dict[str, Any]
    exit_code: int
    output: str  # the run's last lines, for assertion messages
    run_s: float
    restore_s: float
    rogue_log: list[str]
    seeded_operator: dict[str, Any]  # the operator Deployment's env and args as the run left them


@contextlib.contextmanager
def cluster_lock() -> Iterator[None]:
    path = os.environ.get(LOCK_ENV)
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def seeded_profile(fault: Fault, where: Path) -> Path:
    """The default profile with the fault's operator settings on top, as a file the run reads."""
    healthy = yaml.safe_load((profiles.BUNDLED / f"{HEALTHY_PROFILE}.yaml").read_text())
    seeded = copy.deepcopy(healthy)
    seeded["name"] = f"sensitivity-{fault.name}"
    kuberay = seeded["kuberay"]
    kuberay["feature_gates"] = {**kuberay.get("feature_gates", {}), **fault.feature_gates}
    if fault.env:
        kuberay["env"] = dict(fault.env)
    if fault.extra_args:
        kuberay["extra_args"] = list(fault.extra_args)
    if fault.version:
        kuberay["version"] = fault.version
    if fault.attached:  # read back what the healthy install left; install nothing
        kuberay["install"] = "existing"
        seeded["gateway"]["install"] = "existing"
    path = where / f"{fault.name}.yaml"
    path.write_text(yaml.safe_dump(seeded, sort_keys=False))
    return path


def run(fault: Fault, where: Path) -> Observed:
    profile = seeded_profile(fault, where)
    # Kept with the other runs (reports/ is not committed), so a recorded run id can be opened.
    # Its name is the run id, which labels namespaces: at most 63 characters.
    run_dir = RUNS / f"{fault.name[:45]}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    rogue_log = where / "rogue.log"
    env = dict(os.environ)
    if fault.rogue:
        env.update({
            "PYTHONPATH": str(PLUGIN_PATH), "PYTEST_PLUGINS": f"{__package__}.rogue",
            ROGUE_ENV: target(fault.rogue), LOG_ENV: str(rogue_log),
        })  # fmt: skip
    command = [
        sys.executable, "-m", "conformance.cli", "run", "--profile", str(profile), "-k", fault.keyword(),
        "--keep-cluster", "--run-dir", str(run_dir), *fault.run_args,
    ]  # fmt: skip
    if fault.on_checkout:
        command += ["--kuberay-source", str(checkouts.named_checkout())]
    if fault.attached:
        command += ["--provider", "existing", "--kubeconfig", str(LocalProvider().cluster().kubeconfig)]
    if fault.claimed_version:
        command += [
            "--kuberay-source",
            str(checkouts.module_as_checkout(OLDER_MODULE, where)),
            "--kuberay-version",
            fault.claimed_version,
        ]
    with cluster_lock():
        started = time.monotonic()
        done = _run_to_its_end(command, env)
        run_s = time.monotonic() - started
        seeded_operator = _operator_container()
        started = time.monotonic()
        restore()
        restore_s = time.monotonic() - started
    summary_path = run_dir / "summary.json"
    return Observed(
        summary=json.loads(summary_path.read_text()) if summary_path.exists() else {"tests": []},
        exit_code=done.returncode,
        output=(done.stdout + done.stderr)[-4000:],
        run_s=round(run_s, 1),
        restore_s=round(restore_s, 1),
        rogue_log=rogue_log.read_text().splitlines() if rogue_log.exists() else [],
        seeded_operator=seeded_operator,
    )


def _run_to_its_end(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The run's process, waited for. On Ctrl-C the run (in this process group) got the same SIGINT:
    it is given time to clean up, its namespaces and its cluster lock, instead of the SIGKILL
    `subprocess.run` sends after a quarter second (that left the lock for the next run to wait out)."""
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as child:
        try:
            output, _ = child.communicate()
        except KeyboardInterrupt:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.communicate(timeout=INTERRUPTED_RUN_CLEANUP_S)
            child.kill()
            raise
    return subprocess.CompletedProcess(command, child.returncode, output, "")


def _healthy_environment() -> Environment:
    return Environment(
        RunOptions(
            provider="local",
            profile=profiles.load(HEALTHY_PROFILE),
            run_dir=RUNS / "restore",
            run_id="sensitivity-restore",
            keep_cluster=True,
        )
    )


def restore() -> None:
    """Prepare as a healthy run does: the default profile's operator, gateway and images again."""
    _healthy_environment().prepare()
    container = _operator_container()
    expected = profiles.load(HEALTHY_PROFILE).kuberay
    if container["env"] != expected.env or any(a in container["args"] for a in expected.extra_args):
        raise RuntimeError(f"the healthy operator was not put back: {container}")


def _operator_container() -> dict[str, Any]:
    """The env and args of the operator container that runs now."""
    api = config.new_client_from_config(str(LocalProvider().cluster().kubeconfig))
    namespace = profiles.load(HEALTHY_PROFILE).kuberay.namespace
    # By name: a kustomize install from source labels it otherwise than the chart.
    deployment = client.AppsV1Api(api).read_namespaced_deployment(operator_spec.NAME, namespace)
    container = deployment.spec.template.spec.containers[0]
    return {
        "image": container.image,
        "args": list(container.args or []),
        "env": {e.name: e.value for e in container.env or []},
        "replicas": deployment.spec.replicas,
    }
