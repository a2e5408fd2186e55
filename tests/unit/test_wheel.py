"""A wheel that works: built from the source, installed into a fresh virtualenv outside the source
tree, it finds its profiles, manifests and Terraform modules as package data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SKIP_ANYWHERE = shutil.ignore_patterns(".venv", "reports", "*.egg-info", "__pycache__", ".git", ".*_cache")


def _skip(folder: str, names: list[str]) -> set[str]:
    """What a clean tree lacks: setuptools' build/ output at the top only, since conformance/build/
    is a package of the harness."""
    skipped = set(_SKIP_ANYWHERE(folder, names))
    return skipped | ({"build"} & set(names)) if Path(folder) == ROOT else skipped


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's bin/ folder. Its dependencies come from this venv's site-packages through a
    .pth file (no downloads); the package itself only from the wheel."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_skip)  # a clean tree: nothing built in ROOT
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(work / "dist")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    wheel = next((work / "dist").glob("kuberay_conformance-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "krc-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    shutil.rmtree(source)  # what runs next can only use the installed wheel
    return venv / "bin"


def _run(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv_ = [str(bin_dir / argv[0]), *argv[1:]]
    return subprocess.run(argv_, capture_output=True, text=True, cwd=cwd, check=False)


def test_the_installed_package_is_the_wheel_with_real_data_files(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import conformance, conformance.resources as r\n"
        "from conformance.kube import manifests\n"
        "from conformance.providers import terraform\n"
        "print(conformance.__file__)\n"
        "for name in ('profiles', 'manifests', 'terraform'): print(r.path(name))\n"
        "print(terraform.modules_dir())\n"
        "print((manifests.MANIFESTS / 'ray' / 'raycluster.yaml').is_file())\n"
    )
    result = _run(installed, "python", "-c", probe, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    module, profiles, manifest_dir, terraform_dir, modules, raycluster = result.stdout.splitlines()
    venv = str(installed.parent)
    for path in (module, profiles, manifest_dir, terraform_dir, modules):
        assert path.startswith(venv) and str(ROOT) not in path, path
    assert (Path(terraform_dir) / "eks" / "main.tf").is_file() and (Path(terraform_dir) / "kind").is_dir()
    assert Path(modules) == Path(terraform_dir)
    assert raycluster == "True"


def test_list_and_profile_check_work_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    listed = _run(installed, "kuberay-conformance", "list", "--area", "operator", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1].endswith("areas (operator)")
    assert all(line.startswith("operator  ") for line in listed.stdout.splitlines()[:-1])
    good = _run(installed, "kuberay-conformance", "profile", "check", "kind", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    refused = _run(installed, "kuberay-conformance", "profile", "check", str(bad), cwd=tmp_path)
    assert refused.returncode == 3
    assert "description: missing" in refused.stderr
