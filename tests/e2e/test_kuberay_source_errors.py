"""Bad `--kuberay-source` input: one line naming cause and fix, exit 3 (usage) or 2 (environment),
before anything is provisioned or installed (real helm, kustomize and Go; no cluster is touched)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_runs import run_cli

from conformance.install import kuberay
from conformance.profiles import BUNDLED


def _run(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=1200)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The v1.6.2 module laid out as a checkout without a chart (as in test_kuberay_from_source.py)."""
    root = tmp_path / "kuberay"
    shutil.copytree(kuberay.module_dir("v1.6.2"), root / "ray-operator")
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return root


def _refused(done: subprocess.CompletedProcess, code: int, *words: str, run_dir: Path) -> str:
    # Progress lines of a build may come first; the error is one line, the last.
    lines = [
        line for line in done.stderr.strip().splitlines() if line.startswith("kuberay-conformance: error:")
    ]
    assert done.returncode == code, done.stderr + done.stdout[-2000:]
    assert len(lines) == 1 and done.stderr.strip().endswith(lines[0]), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not run_dir.exists(), "a refused run wrote results"
    return lines[0]


def test_a_folder_that_is_not_a_checkout(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = _run("--kuberay-source", str(tmp_path), "--run-dir", str(run_dir))
    _refused(done, 3, "is not a KubeRay checkout", "--kuberay-source the root of", run_dir=run_dir)


def test_kuberay_version_without_a_checkout(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = _run("--kuberay-version", "v1.7.0", "--run-dir", str(run_dir))
    _refused(done, 3, "--kuberay-version", "--kuberay-source DIR", run_dir=run_dir)


def test_an_unknown_feature_gate_in_the_profile(checkout: Path, tmp_path: Path) -> None:
    profile = yaml.safe_load((BUNDLED / "default.yaml").read_text())
    profile["kuberay"]["feature_gates"] = {"RayServiceIncrementalUpgrade": True, "NoSuchGate": True}
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    run_dir = tmp_path / "run"
    done = _run("--kuberay-source", str(checkout), "--profile", str(path), "--run-dir", str(run_dir))
    _refused(done, 3, "no feature gate NoSuchGate", "remove it from the profile", run_dir=run_dir)


def test_a_chart_that_does_not_render(checkout: Path, tmp_path: Path) -> None:
    chart = checkout / "helm-chart" / "kuberay-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: kuberay-operator\nversion: 1.6.2\n")
    (chart / "values.yaml").write_text("featureGates: []\n")
    (chart / "templates" / "deployment.yaml").write_text(
        "kind: Deployment\nx: {{ .Values.missing.deeper }}\n"
    )
    run_dir = tmp_path / "run"
    done = _run("--kuberay-source", str(checkout), "--run-dir", str(run_dir))
    _refused(done, 3, "helm template of", "nil pointer", "helm lint", run_dir=run_dir)


def test_a_kustomize_config_that_does_not_build(checkout: Path, tmp_path: Path) -> None:
    default = checkout / "ray-operator" / "config" / "default" / "kustomization.yaml"
    default.write_text(default.read_text().replace("- ../manager", "- ../no-such-folder"))
    run_dir = tmp_path / "run"
    done = _run("--kuberay-source", str(checkout), "--run-dir", str(run_dir))
    _refused(done, 3, "kustomize build config/default failed", "so `kustomize build", run_dir=run_dir)


def test_an_operator_that_does_not_build(checkout: Path, tmp_path: Path) -> None:
    main = checkout / "ray-operator" / "main.go"
    main.write_text(main.read_text() + "\nfunc broken( {\n")
    run_dir = tmp_path / "run"
    done = _run("--kuberay-source", str(checkout), "--run-dir", str(run_dir))
    line = _refused(done, 2, "does not build", "go build .", run_dir=run_dir)
    assert "build.log" in line
