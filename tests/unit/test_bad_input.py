"""Bad input to `kuberay-conformance run`, each refused in one line naming cause and fix, with the
documented exit code, before anything is provisioned and leaving nothing behind.

Profile keys with a wrong type, unknown keys and modes are tried key by key in
test_profile_schema.py; here each kind goes through the command a user types. A cluster without
KubeRay CRDs under `attach` needs a real cluster: tests/e2e/test_conformance_run.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conformance import profiles
from conformance.errors import EXIT_USAGE

DEFAULT = yaml.safe_load((profiles.BUNDLED / "default.yaml").read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "cwd"
    folder.mkdir()
    return folder


@pytest.fixture
def trap(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose one context points at a socket that only listens."""
    listener = socket.create_server(("127.0.0.1", 0))
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: trap\n"
        f"clusters: [{{name: trap, cluster: {{server: 'https://127.0.0.1:{listener.getsockname()[1]}'}}}}]\n"
        "contexts: [{name: trap, context: {cluster: trap, user: trap}}]\n"
        "users: [{name: trap, user: {token: x}}]\n"
    )
    yield path
    listener.close()


def _run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run_in(workdir, workdir / "run", *args)


def _run_in(workdir: Path, run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = Path(sys.executable).with_name("kuberay-conformance")
    return subprocess.run(
        [str(program), "run", "--run-dir", str(run_dir), *args],
        capture_output=True, text=True, check=False, cwd=workdir, timeout=120,
    )  # fmt: skip


def _refused(done: subprocess.CompletedProcess[str], workdir: Path, *expected: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_USAGE, done.stderr
    assert lines[0].startswith("kuberay-conformance: error: "), done.stderr
    for text in expected:
        assert text in done.stderr
    assert list(workdir.iterdir()) == []  # no run folder, no reports/, nothing
    return done.stderr.strip()


def _profile(tmp_path: Path, change: dict) -> Path:
    data = yaml.safe_load(yaml.safe_dump(DEFAULT))
    for dotted, value in change.items():
        *path, last = dotted.split(".")
        target = data
        for key in path:
            target = target[key]
        target[last] = value
    out = tmp_path / "p.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def test_wrongly_typed_keys_are_all_listed(tmp_path: Path, workdir: Path) -> None:
    path = _profile(tmp_path, {"gpu.count": "two", "timeouts.ready": "soon", "gpu.simulated": "no"})
    line = _refused(_run(workdir, "--profile", str(path)), workdir, "has 3 problems")
    assert len(line.splitlines()) == 4  # the heading and one line per problem


def test_an_unknown_key(tmp_path: Path, workdir: Path) -> None:
    path = _profile(tmp_path, {"thresholds.scale_down_bound": 60})
    line = _refused(
        _run(workdir, "--profile", str(path)), workdir, "thresholds.scale_down_bound: unknown key"
    )
    assert len(line.splitlines()) == 1


def test_an_unknown_install_mode(tmp_path: Path, workdir: Path) -> None:
    path = _profile(tmp_path, {"kuberay.install": "kustomize"})
    line = _refused(_run(workdir, "--profile", str(path)), workdir, "use one of local-build, helm, existing")
    assert len(line.splitlines()) == 1


def test_a_missing_kubeconfig(tmp_path: Path, workdir: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    done = _run(workdir, "--provider", "existing", "--profile", "attach", "--kubeconfig", str(missing))
    line = _refused(done, workdir, f"kubeconfig {missing} does not exist", "pass --kubeconfig")
    assert len(line.splitlines()) == 1


def test_a_context_that_does_not_exist(trap: Path, workdir: Path) -> None:
    done = _run(workdir, "--provider", "existing", "--profile", "attach", "--kubeconfig", str(trap),
                "--context", "prod")  # fmt: skip
    line = _refused(done, workdir, "has no context 'prod' (it has: trap)", "pass --context")
    assert len(line.splitlines()) == 1


def test_a_run_directory_that_cannot_be_written(tmp_path: Path, workdir: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = _run_in(workdir, blocker / "run")
    line = _refused(done, workdir, f"run directory {blocker / 'run'} cannot be written", "--run-dir")
    assert len(line.splitlines()) == 1


def test_a_run_directory_name_that_cannot_label_the_runs_namespaces(tmp_path: Path, workdir: Path) -> None:
    name = "finished-job-cluster-deleted-whatever-the-policy-20261202T045204Z"  # 65 characters
    done = _run_in(workdir, workdir / name)
    line = _refused(done, workdir, f"run directory name {name!r} is the run id", "shorter or plainer")
    assert len(line.splitlines()) == 1


def test_a_ray_version_the_image_template_cannot_make(workdir: Path) -> None:
    done = _run(workdir, "--ray-version", "2.58.0 nightly")
    line = _refused(done, workdir, "is not a valid image reference", "give a Ray version such as 2.58.0")
    assert len(line.splitlines()) == 1


def test_an_unquoted_version_in_a_profile(tmp_path: Path, workdir: Path) -> None:
    path = tmp_path / "p.yaml"
    text = (profiles.BUNDLED / "default.yaml").read_text()
    path.write_text(text.replace('ray_versions: ["2.58.0"]', "ray_versions: [2.10]"))
    _refused(_run(workdir, "--profile", str(path)), workdir, 'quote it: "2.10"')


@pytest.mark.parametrize("from_source", [False, True], ids=["helm", "source"])
def test_operator_arguments_that_the_helm_chart_cannot_pass(
    tmp_path: Path, workdir: Path, from_source: bool
) -> None:
    path = _profile(
        tmp_path, {"kuberay.install": "helm", "kuberay.extra_args": ["--reconcile-concurrency=2"]}
    )
    args = ["--profile", str(path)]
    if from_source:  # refused before the checkout is even looked at
        args += ["--kuberay-source", str(tmp_path / "no-checkout-here")]
    line = _refused(_run(workdir, *args), workdir, "kuberay.extra_args cannot be passed", "use kuberay.env")
    assert len(line.splitlines()) == 1
