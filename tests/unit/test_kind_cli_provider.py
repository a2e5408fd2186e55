"""The kind provider's orchestration of the kind CLI, against stand-in `kind` and `podman` programs
that record their argv and keep a list of clusters. A real kind cluster made by the same code on
this machine is in docs/kind-on-this-machine.md and benchmarks/README.md (needs root and Podman)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import standins as standin_tools
import yaml

from conformance.errors import ProvisioningError, UsageError
from conformance.providers import get_provider
from conformance.providers.kind import (
    GPU_TAINT,
    KindProvider,
    check_kind_version,
    config_patches,
    kind_config,
)

STANDIN = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path
tool, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"tool": tool, "args": args}}) + "\\n")
clusters = Path(os.environ["STANDIN_CLUSTERS"])
names = clusters.read_text().split() if clusters.exists() else []
if tool == "kind" and args[:1] == ["version"]:
    print(os.environ.get("STANDIN_KIND_VERSION", "kind v0.33.0 go1.26.8 linux/amd64"))
elif tool == "kind" and args[:2] == ["get", "clusters"]:
    print("\\n".join(names))
elif tool == "kind" and args[:2] == ["create", "cluster"]:
    name = args[args.index("--name") + 1]
    Path(args[args.index("--kubeconfig") + 1]).write_text("apiVersion: v1\\nkind: Config\\n")
    clusters.write_text("\\n".join([*names, name]))
elif tool == "kind" and args[:2] == ["delete", "cluster"]:
    name = args[args.index("--name") + 1]
    clusters.write_text("\\n".join(n for n in names if n != name))
elif tool == "podman" and args[:1] == ["pull"]:
    sys.exit(125)
"""


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = standin_tools.install(tmp_path, monkeypatch, STANDIN, "kind", "podman")
    monkeypatch.setenv("STANDIN_CLUSTERS", str(tmp_path / "clusters"))
    monkeypatch.setenv("KRC_KIND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KRC_KIND_GPU_WORKERS", "0")  # the simulated GPUs are patched through a real API
    monkeypatch.setenv("KRC_KIND_NODE_IMAGE", "kindest/node:v1.35.0")
    for name in ("KIND_EXPERIMENTAL_PROVIDER", "KRC_KIND_CONFIG_PATCHES", "KRC_KIND_VIA", "KRC_KIND_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    return log


def _argv(log: Path, tool: str = "kind") -> list[list[str]]:
    return [call["args"] for call in standin_tools.calls(log) if call["tool"] == tool]


def test_the_config_has_a_control_plane_cpu_workers_and_gpu_workers_like_eks_gpu_nodes() -> None:
    config = kind_config("krc-r1", workers=1, gpu_workers=1, patches={})
    roles = [node["role"] for node in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker"] and config["name"] == "krc-r1"
    gpu = config["nodes"][2]
    assert (
        gpu["labels"]["nvidia.com/gpu.present"] == "true"
        and gpu["labels"]["kuberay-conformance.io/gpu"] == "true"
    )
    (join,) = gpu["kubeadmConfigPatches"]
    assert yaml.safe_load(join) == {"kind": "JoinConfiguration", "nodeRegistration": {"taints": [GPU_TAINT]}}
    assert GPU_TAINT == {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_a_machines_patches_are_added_to_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patches = tmp_path / "patches.yaml"
    patches.write_text(yaml.safe_dump({"containerdConfigPatches": ["restrict_oom_score_adj = true"]}))
    monkeypatch.setenv("KRC_KIND_CONFIG_PATCHES", str(patches))
    config = kind_config("krc-r1", 0, 0, config_patches())
    assert config["containerdConfigPatches"] == ["restrict_oom_score_adj = true"]
    patches.write_text(yaml.safe_dump({"nodes": []}))
    with pytest.raises(UsageError, match="must map kind config keys to lists"):
        config_patches()


@pytest.mark.parametrize(
    ("text", "ok"),
    [("kind v0.33.0 go1.26.8 linux/amd64", True), ("kind v0.24.0 go1.22", False), ("", False)],
)
def test_kind_older_than_the_release_this_harness_runs_is_refused(text: str, ok: bool) -> None:
    if ok:
        check_kind_version(text)
    else:
        with pytest.raises(UsageError, match=r"install kind v0\.33\.0"):
            check_kind_version(text)


def test_up_creates_the_runs_cluster_from_the_config_it_wrote(standins: Path, tmp_path: Path) -> None:
    cluster = KindProvider(run_id="20261207T2000Z-ab12").up()
    create = next(args for args in _argv(standins) if args[:2] == ["create", "cluster"])
    assert create[create.index("--name") + 1] == "krc-20261207t2000z-ab12"
    assert create[create.index("--image") + 1] == "kindest/node:v1.35.0"
    config = yaml.safe_load(Path(create[create.index("--config") + 1]).read_text())
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]
    assert (
        cluster.kubeconfig == Path(create[create.index("--kubeconfig") + 1]) and cluster.kubeconfig.exists()
    )
    assert cluster.kubeconfig.is_relative_to(tmp_path / "state")


def test_a_taken_name_is_refused_before_anything_is_created(standins: Path, tmp_path: Path) -> None:
    (tmp_path / "clusters").write_text("krc-r1")
    with pytest.raises(ProvisioningError, match="a kind cluster named krc-r1 already exists"):
        KindProvider(run_id="r1").up()
    assert not any(args[:1] in (["create"], ["delete"]) for args in _argv(standins))


def test_an_old_kind_is_refused_before_anything_is_created(
    standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_KIND_VERSION", "kind v0.20.0 go1.20")
    with pytest.raises(UsageError, match=r"older than v0\.33\.0"):
        KindProvider(run_id="r1").up()
    assert [args[:1] for args in _argv(standins)] == [["version"]]


def test_no_engine_is_a_usage_error(standins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIND_EXPERIMENTAL_PROVIDER", "docker")  # not on PATH here
    with pytest.raises(UsageError, match="no container engine"):
        KindProvider(run_id="r1").up()


def test_down_deletes_this_harness_clusters_and_the_network_kind_left(standins: Path, tmp_path: Path) -> None:
    (tmp_path / "clusters").write_text("krc-a\nsomeone-else\nkrc-b")
    assert KindProvider().down() == []
    deleted = [args[-1] for args in _argv(standins) if args[:2] == ["delete", "cluster"]]
    assert deleted == ["krc-a", "krc-b"]
    assert ["network", "rm", "kind"] not in _argv(standins, "podman"), "someone-else's cluster still uses it"
    (tmp_path / "clusters").write_text("krc-c")
    assert KindProvider(run_id="c").down() == []
    assert ["network", "rm", "kind"] in _argv(standins, "podman")


def test_the_terraform_way_is_chosen_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(get_provider("kind")).__name__ == "KindProvider"
    monkeypatch.setenv("KRC_KIND_VIA", "terraform")
    assert type(get_provider("kind")).__name__ == "KindTerraformProvider"
    monkeypatch.setenv("KRC_KIND_VIA", "helm")
    with pytest.raises(UsageError, match="neither cli nor terraform"):
        get_provider("kind")
