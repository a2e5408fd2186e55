"""What an unprivileged CI user needs: a cache of its own, and the Helm already on its PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.build import cache
from conformance.errors import ProvisioningError
from conformance.install import cli_tools


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    monkeypatch.delenv("KRC_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_user_caches_under_home_not_var_cache(as_user: Path) -> None:
    assert cache.cache_dir() == as_user / ".cache" / "kuberay-conformance"


def test_a_user_caches_under_xdg_cache_home(as_user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(as_user / "xdg"))
    assert cache.cache_dir() == as_user / "xdg" / "kuberay-conformance"


def test_a_relative_xdg_cache_home_is_ignored(as_user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache.cache_dir() == as_user / ".cache" / "kuberay-conformance"


def test_krc_cache_dir_wins_for_anyone(as_user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KRC_CACHE_DIR", "/srv/krc")
    assert cache.cache_dir() == Path("/srv/krc")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cache.cache_dir() == Path("/srv/krc")


def test_root_shares_the_machine_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv("KRC_CACHE_DIR", raising=False)
    assert cache.cache_dir() == Path("/var/cache/kuberay-conformance")


def test_the_kind_provider_uses_the_same_cache(as_user: Path) -> None:
    from conformance.providers.kind import KindProvider  # noqa: PLC0415

    assert KindProvider(run_id="r1").cache == cache.cache_dir()


@pytest.mark.parametrize(
    ("name", "text", "accepted"),
    [
        ("helm", "v3.22.0+g1a2b3c4", True),
        ("helm", "v3.10.3+gdeadbee", True),
        ("helm", "v3.9.4+g1234567", False),
        ("helm", "v4.0.1+g7654321", False),  # Helm 4 changed --wait: not what was tested
        ("helm", "not a version", False),
        ("kustomize", "v5.8.2", True),
        ("kustomize", "{Version:kustomize/v4.5.7 GitCommit:56d82a8}", False),
    ],
)
def test_which_versions_on_path_are_compatible(name: str, text: str, accepted: bool) -> None:
    assert cli_tools.COMPATIBLE[name].accepts(text) is accepted


def _fake_program(folder: Path, name: str, prints: str) -> Path:
    folder.mkdir(exist_ok=True)
    program = folder / name
    program.write_text(f"#!/bin/sh\necho '{prints}'\n")
    program.chmod(0o755)
    return program


def test_a_compatible_helm_on_path_is_used_even_with_go_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helm = _fake_program(tmp_path / "bin", "helm", "v3.19.2+g8766e71")
    go = _fake_program(tmp_path / "bin", "go", "go version go1.26.8 linux/amd64")
    monkeypatch.setenv("PATH", str(go.parent))
    monkeypatch.setattr(cli_tools.gobuild, "ensure_built", _must_not_build)
    assert cli_tools.tool_binary("helm") == str(helm)


def test_an_incompatible_helm_without_go_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_program(tmp_path / "bin", "helm", "v4.0.1+g7654321")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ProvisioningError) as refused:
        cli_tools.tool_binary("helm")
    assert "no helm 3.x (at least 3.10) on PATH, and no Go to build it" in str(refused.value)
    assert "install Go" in refused.value.fix


def test_an_incompatible_helm_with_go_there_is_built_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_program(tmp_path / "bin", "helm", "v4.0.1+g7654321")
    _fake_program(tmp_path / "bin", "go", "go version go1.26.8 linux/amd64")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("KRC_CACHE_DIR", str(tmp_path / "cache"))
    built: list[Path] = []

    def build(_tool: object, cache: Path) -> Path:
        built.append(cache)
        return cache / "b"

    monkeypatch.setattr(cli_tools.gobuild, "ensure_built", build)
    assert cli_tools.tool_binary("helm") == str(tmp_path / "cache" / "b" / "helm")
    assert built == [tmp_path / "cache"]


def _must_not_build(*_args: object) -> Path:
    raise AssertionError("built helm although a compatible one is on PATH")
