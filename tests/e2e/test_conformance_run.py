"""The main job end to end: `kuberay-conformance run` on the local cluster writes a conformant report.

A smoke over the operator area (it installs KubeRay and checks it); the full suites run in
`make conformance`. Bad input is refused before anything is provisioned.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from cli_runs import run_cli
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from conformance.install import kuberay, operator_spec
from conformance.install.modes import RAY_CRDS
from conformance.kube.wait import wait_gone
from conformance.providers.base import Cluster

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=1800)


def _run_existing(kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    """A run through the `existing` provider: the local cluster reached as any cluster would be."""
    return _run("--provider", "existing", "--kubeconfig", kubeconfig, *args)


def test_operator_area_runs_and_writes_summary_junit_and_allure(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    done = _run("--area", "operator", "--run-dir", str(run_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = {t["id"].rsplit("::", 1)[-1]: t["outcome"] for t in summary["tests"]}
    assert "error" not in outcomes.values(), f"harness errors: {summary['tests']}\n{done.stdout[-3000:]}"
    assert done.returncode == {"conformant": 0, "not conformant": 1}[summary["verdict"]]
    assert set(summary["areas"]) == {"operator"}
    assert summary["provider"] == "local" and summary["profile"] == "default"
    assert summary["versions"]["kubernetes"] == "v1.35.4"
    assert summary["versions"]["kuberay"].startswith("v1.")
    assert len(outcomes) >= 4
    recovery = next(t for t in summary["tests"] if "recovers" in t["id"])
    assert recovery["metrics"]["operator_recovery_s"] > 0
    junit = ET.parse(run_dir / "junit.xml").getroot()
    assert int(junit.find("testsuite").get("tests")) == len(outcomes)
    assert list((run_dir / "allure-results").glob("*-result.json"))


def test_autoscaling_and_gpu_areas_record_outcomes_reasons_and_a_timeline(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    """A slice of the autoscaling and GPU areas: a validation outcome, a live scale change with its
    timeline (sampled through the API server's pod proxy), and a check not applicable on simulated GPUs."""
    run_dir = tmp_path / "scaling"
    done = _run("--area", "autoscaling", "--area", "gpu", "-k", "min_and_max or together or cuda",
                "--run-dir", str(run_dir))  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = {t["id"].rsplit("::", 1)[-1].split("[")[0]: t for t in summary["tests"]}
    assert (
        outcomes["test_min_and_max_replicas_changed_on_a_live_cluster_take_effect"]["outcome"] == "passed"
    ), done.stdout[-3000:]
    assert outcomes["test_group_resources_and_ray_start_gpus_together_are_rejected"]["outcome"] == "passed"
    cuda = outcomes["test_cuda_operation_runs_in_a_ray_task"]
    assert cuda["outcome"] == "not_applicable" and "simulated" in cuda["reason"]
    (timeline,) = (run_dir / "timelines").glob("*min-and-max*.json")
    series = json.loads(timeline.read_text())["series"]
    assert max(count for _, count in series["small"]) == 1, series["small"]
    assert max(count for _, count in series["Ray alive workers"]) == 1, series["Ray alive workers"]
    assert series["small"][-1][1] == 0, "the last sample still had a worker after maxReplicas 0"


def test_an_unknown_profile_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _run("--profile", "nope", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0 and "unknown profile 'nope'" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_timeout_override_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _run("--timeout", "nap=5", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 3
    assert "unknown timeout kind nap" in done.stderr
    assert not (tmp_path / "run").exists()


def test_existing_provider_attaches_to_a_running_kuberay_and_checks_it(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    """The local cluster, reached as any existing cluster would be: nothing installed, all read back.

    Runs after the operator-area run above, which left KubeRay installed. The node pulls
    nothing, so the attach profile gets the images built here instead of public ones.
    """
    run_dir = tmp_path / "attach"
    done = _run_existing(
        str(local_cluster.kubeconfig),
        "--profile",
        str(_attach_profile_with_local_images(tmp_path)),
        "--area",
        "operator",
        "--run-dir",
        str(run_dir),
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["provider"] == "existing"
    assert [t["outcome"] for t in summary["tests"]].count("error") == 0, done.stdout[-3000:]
    assert summary["versions"]["kuberay"].startswith("v1.")
    assert done.returncode == {"conformant": 0, "not conformant": 1}[summary["verdict"]]


def _attach_profile_with_local_images(folder: Path) -> Path:
    profiles_dir = ROOT / "conformance" / "profiles"
    attach = yaml.safe_load((profiles_dir / "attach.yaml").read_text())
    local = yaml.safe_load((profiles_dir / "default.yaml").read_text())
    attach["images"].update({key: local["images"][key] for key in ("ray", "redis")})
    path = folder / "attach-local-images.yaml"
    path.write_text(yaml.safe_dump(attach))
    return path


def test_existing_provider_refuses_a_profile_that_builds_images_locally(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    done = _run_existing(
        str(local_cluster.kubeconfig),
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert done.returncode == 3
    assert "cannot load" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_existing_provider_refuses_an_unreachable_cluster(local_cluster: Cluster, tmp_path: Path) -> None:
    text = local_cluster.kubeconfig.read_text().replace("https://10.213.0.2:6443", "https://127.0.0.1:9")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    done = _run_existing(
        str(kubeconfig),
        "--profile",
        "attach",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert done.returncode == 2  # the environment, not the user's input
    assert "does not answer" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.runs_last
def test_existing_cluster_without_kuberay_crds_is_refused_before_anything_runs(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    """Runs after every check that needs KubeRay: it removes the operator and its CRDs."""
    api = config.new_client_from_config(str(local_cluster.kubeconfig))
    _remove_ray_objects(api)
    kuberay.uninstall_local(api, operator_spec.OperatorSpec(version="v1.6.2"), remove_crds=True)
    for crd in RAY_CRDS:  # a CRD lingers while objects of its kind still have finalizers
        wait_gone(
            client.ApiextensionsV1Api(api).list_custom_resource_definition,
            what=f"the {crd} CRD",
            timeout=120,
            field_selector=f"metadata.name={crd}",
        )
    done = _run_existing(
        str(local_cluster.kubeconfig),
        "--profile",
        "attach",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert done.returncode == 3, done.stderr
    assert "no KubeRay CRDs (rayclusters.ray.io, rayjobs.ray.io, rayservices.ray.io missing)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def _remove_ray_objects(api: client.ApiClient) -> None:
    """Delete every Ray object left on the cluster and wait until the operator lets them go.

    Earlier runs delete their namespaces without waiting, and a run killed outright (a CI runner
    stopped, a session ended) leaves its namespace and objects behind. The operator must remove
    their finalizers (a RayService's, say) before it goes, or their CRDs never go. These tests own
    the local cluster and take it down at the end, and they do not start while a live run holds it."""
    custom = client.CustomObjectsApi(api)
    for plural in ("rayjobs", "rayservices", "rayclusters"):

        def listing(plural: str = plural, **kwargs: object) -> object:
            return custom.list_cluster_custom_object("ray.io", "v1", plural, **kwargs)

        for item in listing()["items"]:
            namespace, name = item["metadata"]["namespace"], item["metadata"]["name"]
            with contextlib.suppress(ApiException):  # gone meanwhile
                custom.delete_namespaced_custom_object("ray.io", "v1", namespace, plural, name)
        wait_gone(listing, what=f"every {plural} object of earlier runs", timeout=300)
