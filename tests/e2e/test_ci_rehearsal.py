"""The nightly kind job rehearsed here: its own `run:` steps, as a fresh unprivileged CI user.

Read from .github/workflows/nightly-kind.yml (tests/workflow_rehearsal.py), so the rehearsal and the
workflow cannot drift apart. The user has its own HOME, no write access to /var, Go and Helm on
PATH (what setup-go and setup-helm give a runner) and a copy of the checkout as its workspace. The
local cluster stands in for kind: the job's PROVIDER is `existing` and its KEYWORD an operator, a
RayJob and a RayService-under-load check, with a profile naming the images built here and the
Traefik installed here. It must reach a conformant verdict with every write in the user's own
directories: the cache, the Go build of the load generator, the virtualenv, the reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from workflow_rehearsal import Contexts, Job, StepResult, run_job, user_env

from conformance.build import gobuild, pins, ray_images
from conformance.install import gateway, kuberay, kuberay_chart, operator_facts, operator_spec
from conformance.kube.target import KubeTarget
from conformance.profiles import load
from conformance.providers.base import Cluster
from conformance.providers.local.provider import LocalProvider

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-kind.yml"
CHECKS = (
    "test_operator_is_ready_and_recovers_after_its_pod_is_deleted",
    "test_k8s_job_mode_reaches_succeeded_and_complete",
    "test_rayservice_becomes_ready_and_answers_through_the_gateway",  # load through the Gateway
)
GATEWAY_CLASS = "traefik"
GO_BIN = Path("/usr/local/go/bin")


@dataclass(frozen=True)
class Runner:
    user: str
    home: Path
    workspace: Path
    temp: Path
    tools: Path


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    """A fresh user with a HOME of its own and a copy of the checkout, gone afterwards."""
    if shutil.which("go") is None and not (GO_BIN / "go").exists():
        pytest.fail("the rehearsal needs Go, as the workflow's setup-go gives the runner")
    user = f"krc-ci-{uuid.uuid4().hex[:6]}"
    root = Path(tempfile.mkdtemp(prefix="krc-rehearsal-", dir="/tmp"))
    root.chmod(0o755)
    home, workspace, temp, tools = (root / name for name in ("home", "workspace", "runner-temp", "tools"))
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                    "--user-group", user], check=True)  # fmt: skip
    try:
        _copy_checkout(workspace)
        for folder in (home, temp, tools):
            folder.mkdir()
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home), str(workspace), str(temp)], check=True)
        yield Runner(user, home, workspace, temp, tools)
    finally:
        subprocess.run(["userdel", user], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _copy_checkout(workspace: Path) -> None:
    """The tracked files as they are now (a clean clone of what is committed, plus what is not yet)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, copy = ROOT / name, workspace / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # conformance/_data links to manifests/ and infra/terraform/
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, copy)


@pytest.fixture(scope="module")
def cluster_ready(local_provider: LocalProvider, local_cluster: Cluster) -> client.ApiClient:
    """KubeRay, Traefik and the Ray image on the local cluster, as on a cluster a user already runs."""
    api = config.new_client_from_config(str(local_cluster.kubeconfig))
    profile = load("default")
    version = gobuild.resolve(kuberay.operator_tool(profile.kuberay.version), local_provider.cache).version
    spec = operator_spec.OperatorSpec(
        version=version,
        namespace=profile.kuberay.namespace,
        feature_gates={**operator_spec.chart_feature_gates(version), **profile.kuberay.feature_gates},
    )
    target = KubeTarget(local_cluster.kubeconfig)
    kuberay_chart.clear_other_installs(target, api, spec.namespace, kuberay_chart.LOCAL_BUILD, 300)
    kuberay.install_local(local_provider, api, spec)
    operator_facts.wait_ready(api, spec, 300)
    gateway.install_local(local_provider, api, GATEWAY_CLASS, timeout=300)
    # The Ray image in the node, as a cluster of one's own has it (the rehearsal's profile names it).
    local_provider.load_image(ray_images.ray_image(local_provider.cache, profile.ray_versions[0]))
    return api


def _profile(runner: Runner) -> Path:
    """attach.yaml with the images built here (nothing can be pulled) and the Traefik installed here."""
    profiles_dir = ROOT / "conformance" / "profiles"
    attach = yaml.safe_load((profiles_dir / "attach.yaml").read_text())
    local = yaml.safe_load((profiles_dir / "default.yaml").read_text())
    attach["images"].update({key: local["images"][key] for key in ("ray", "redis")})
    attach["gateway"] = {"class_name": GATEWAY_CLASS, "install": "existing"}
    path = runner.home / "rehearsal-profile.yaml"
    path.write_text(yaml.safe_dump(attach))
    return path


def _kubeconfig(runner: Runner, cluster: Cluster) -> Path:
    """The user's own copy, as kind writes ~/.kube/config for the user who made the cluster."""
    path = runner.home / ".kube" / "config"
    path.parent.mkdir()
    shutil.copyfile(cluster.kubeconfig, path)
    return path


def _helm_on_path(runner: Runner, local_provider: LocalProvider) -> None:
    helm = gobuild.ensure_built(pins.TOOLS["helm"], local_provider.cache) / "helm"
    shutil.copy2(helm, runner.tools / "helm")
    (runner.tools / "helm").chmod(0o755)


def _rehearse(runner: Runner, cluster: Cluster, local_provider: LocalProvider) -> list[StepResult]:
    _helm_on_path(runner, local_provider)
    profile, kubeconfig = _profile(runner), _kubeconfig(runner, cluster)
    subprocess.run(["chown", "-R", f"{runner.user}:{runner.user}", str(runner.home)], check=True)
    job = Job.read(WORKFLOW, "conformance")
    # No shard: every selected check (matrix.shard is empty here anyway).
    job.env.update(PROVIDER="existing", PROFILE=str(profile), KEYWORD=" or ".join(CHECKS), SHARD="")
    contexts = Contexts(
        {
            "github": {"workspace": str(runner.workspace), "run_id": "rehearsal", "run_attempt": "1",
                       "ref": "refs/heads/rehearsal", "repository": "kuberay-conformance"},
            "matrix": {"profile": "kind"},
            "runner": {"temp": str(runner.temp)},
        }
    )  # fmt: skip
    path = [runner.tools, GO_BIN, Path("/usr/local/bin"), Path("/usr/bin"), Path("/bin")]
    env = {**user_env(runner.home, path), "KUBECONFIG": str(kubeconfig)}
    return run_job(job, contexts, runner.user, runner.workspace, env)


def test_the_nightly_jobs_steps_reach_a_verdict_as_an_unprivileged_user(
    runner: Runner, local_provider: LocalProvider, local_cluster: Cluster, cluster_ready: client.ApiClient
) -> None:
    results = {r.name: r for r in _rehearse(runner, local_cluster, local_provider)}
    log = "\n".join(f"--- {r.name} (exit {r.exit_code})\n{r.output[-3000:]}" for r in _ran(results))
    assert all(r.exit_code == 0 for r in results.values()), log
    assert results["Conformance run on kind"].ran and not results["Conformance failures"].ran, log
    assert not results["Harness or environment error"].ran, log
    run_dir = runner.workspace / "reports" / "nightly-kind-rehearsal-1"
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = {t["id"].rsplit("::", 1)[-1].split("[")[0]: t for t in summary["tests"]}
    assert summary["provider"] == "existing" and set(outcomes) == set(CHECKS), log
    assert {t["outcome"] for t in outcomes.values()} == {"passed"}, json.dumps(summary["tests"], indent=1)
    load_check = outcomes["test_rayservice_becomes_ready_and_answers_through_the_gateway"]
    assert load_check["metrics"]["requests_total"] > 0
    # Every build the run needed went to the user's own cache, none to the machine's.
    cache = runner.home / ".cache" / "kuberay-conformance" / "go"
    assert any(entry.name.startswith("vegeta") for entry in cache.iterdir()), sorted(os.listdir(cache))
    assert _owned_by(runner.user, Path("/var/cache/kuberay-conformance")) == []


def _owned_by(user: str, folder: Path) -> list[str]:
    if not folder.exists():
        return []
    done = subprocess.run(["find", str(folder), "-user", user], capture_output=True, text=True, check=False)
    return done.stdout.split()


def _ran(results: dict[str, StepResult]) -> list[StepResult]:
    return [r for r in results.values() if r.ran]
