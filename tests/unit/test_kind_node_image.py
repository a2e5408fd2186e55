"""The kind node image builder's pure logic: names, configs, archives (no engine, no build)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from conformance.build import image_cache, image_pack, pins
from conformance.build import kind_node_image as k
from conformance.errors import ProvisioningError, UsageError

CNI_GO = """package nodeimage

const kindnetdImage = "docker.io/kindest/kindnetd:v20260820-69b56db7"

var defaultCNIImages = []string{kindnetdImage}
"""
STORAGE_GO = """package nodeimage

const storageProvisionerImage = "docker.io/kindest/local-path-provisioner:v20260820-69b56db7"
const storageHelperImage = "docker.io/kindest/local-path-helper:v20260131-7181c60a"
"""
KUBEADM_LIST = """registry.k8s.io/kube-apiserver:v1.35.4
registry.k8s.io/kube-controller-manager:v1.35.4
registry.k8s.io/kube-scheduler:v1.35.4
registry.k8s.io/kube-proxy:v1.35.4
registry.k8s.io/coredns/coredns:v1.13.1
registry.k8s.io/pause:3.10.1
registry.k8s.io/etcd:3.6.6-0
"""


def test_kind_images_are_read_from_kinds_go_constants():
    found = k.kind_images(CNI_GO, STORAGE_GO)
    assert found.kindnetd == "docker.io/kindest/kindnetd:v20260820-69b56db7"
    assert found.local_path_provisioner.startswith("docker.io/kindest/local-path-provisioner:")
    assert found.local_path_helper == "docker.io/kindest/local-path-helper:v20260131-7181c60a"


def test_kind_images_names_the_constant_kind_no_longer_declares():
    with pytest.raises(ProvisioningError, match="kindnetdImage"):
        k.kind_images("package nodeimage\n", STORAGE_GO)


def test_kubeadm_images_by_component_including_nested_repositories():
    found = k.kubeadm_images(KUBEADM_LIST)
    assert found["coredns"] == "registry.k8s.io/coredns/coredns:v1.13.1"
    assert found["etcd"] == "registry.k8s.io/etcd:3.6.6-0"
    assert found["kube-apiserver"] == "registry.k8s.io/kube-apiserver:v1.35.4"
    assert len(found) == 7


def test_kubeadm_images_refuses_a_listing_without_etcd():
    with pytest.raises(ProvisioningError, match="etcd"):
        k.kubeadm_images(KUBEADM_LIST.replace("registry.k8s.io/etcd:3.6.6-0", ""))


def test_sandbox_image_is_replaced_and_nothing_else():
    config = (
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n  x = 1\n'
    )
    out = k.with_sandbox_image(config, "localhost/kuberay-conformance/pause:1.0.0")
    assert 'sandbox_image = "localhost/kuberay-conformance/pause:1.0.0"' in out
    assert out.replace("localhost/kuberay-conformance/pause:1.0.0", "registry.k8s.io/pause:3.10") == config
    with pytest.raises(ProvisioningError, match="sandbox_image"):
        k.with_sandbox_image("version = 2\n", "x")


def test_cri_base_spec_drops_rlimits_and_adds_kinds_hook_without_touching_the_input():
    spec = {"process": {"rlimits": [{"type": "RLIMIT_NOFILE"}], "cwd": "/"}, "hooks": {}}
    out = k.cri_base_spec(spec)
    assert "rlimits" not in out["process"]
    assert out["hooks"]["createContainer"] == [{"path": "/kind/bin/mount-product-files.sh"}]
    assert "rlimits" in spec["process"]


def test_repositories_member_groups_tags_by_repository():
    data = json.loads(k.repositories_member(["a.io/x:1", "a.io/x:2", "localhost/y/z:3"], ["l1", "l1", "l2"]))
    assert data == {"a.io/x": {"1": "l1", "2": "l1"}, "localhost/y/z": {"3": "l2"}}
    with pytest.raises(UsageError):
        k.repositories_member(["untagged"], ["l"])


def _single_image(tmp_path: Path, name: str, content: bytes) -> Path:
    rootfs = tmp_path / f"{name}-rootfs"
    rootfs.mkdir()
    (rootfs / name).write_bytes(content)
    out = tmp_path / f"{name}.tar"
    image_pack.pack_rootfs_tar(
        rootfs, f"localhost/t/{name}:1", image_cache.ImageConfig(entrypoint=(f"/{name}",)), out
    )
    return out


def test_merged_archive_carries_every_image_and_kind_sees_every_tag(tmp_path):
    one = _single_image(tmp_path, "one", b"1")
    two = _single_image(tmp_path, "two", b"2")
    out = tmp_path / "merged.tar"
    k.merge_docker_archives(
        [
            k.ArchivePart(one, ("registry.k8s.io/one:v1",)),
            k.ArchivePart(
                two, ("registry.k8s.io/etcd:3.6.6-0", "localhost/kuberay-conformance/etcd:v3.6.16")
            ),
        ],
        out,
    )
    with tarfile.open(out) as merged:
        names = merged.getnames()
        manifest = json.loads(merged.extractfile("manifest.json").read())
    # kind stops at the first of `repositories` and `manifest.json`: it must be `repositories`.
    assert names[0] == "repositories"
    assert [entry["RepoTags"] for entry in manifest] == [
        ["registry.k8s.io/one:v1"],
        ["registry.k8s.io/etcd:3.6.6-0", "localhost/kuberay-conformance/etcd:v3.6.16"],
    ]
    assert sorted(k.archive_tags(out)) == sorted(
        [
            "registry.k8s.io/one:v1",
            "registry.k8s.io/etcd:3.6.6-0",
            "localhost/kuberay-conformance/etcd:v3.6.16",
        ]
    )
    for entry in manifest:  # every config and layer the manifest names is in the archive
        assert entry["Config"] in names
        assert all(layer in names for layer in entry["Layers"])


def test_merging_the_same_image_twice_keeps_one_copy_of_its_blobs(tmp_path):
    one = _single_image(tmp_path, "one", b"1")
    out = tmp_path / "merged.tar"
    k.merge_docker_archives([k.ArchivePart(one, ("a.io/a:1",)), k.ArchivePart(one, ("a.io/b:1",))], out)
    with tarfile.open(out) as merged:
        names = merged.getnames()
    assert len(names) == len(set(names))


def test_server_tarball_has_the_layout_kind_build_type_file_reads(tmp_path):
    binaries = {}
    for name in k.SERVER_BINARIES:
        binaries[name] = tmp_path / name
        binaries[name].write_bytes(name.encode())
    archives = {}
    for name in k.SERVER_IMAGES:
        archives[name] = tmp_path / f"{name}.tar"
        archives[name].write_bytes(b"tar")
    out = tmp_path / "server.tar.gz"
    k.write_server_tarball(out, "v1.35.4", binaries, archives)
    with gzip.open(out) as raw, tarfile.open(fileobj=io.BytesIO(raw.read())) as tar:
        assert tar.extractfile("kubernetes/version").read().decode().strip() == "v1.35.4"
        names = set(tar.getnames())
    assert {f"kubernetes/server/bin/{name}" for name in k.SERVER_BINARIES} <= names
    assert {f"kubernetes/server/bin/{name}.tar" for name in k.SERVER_IMAGES} <= names


def test_server_tarball_names_what_is_missing(tmp_path):
    with pytest.raises(ProvisioningError, match=r"kubeadm.*kube-proxy\.tar"):
        k.write_server_tarball(tmp_path / "x.tgz", "v1.35.4", {}, {})


def test_kindnet_conflist_is_json_for_the_nodes_pod_cidr():
    conf = json.loads(k.kindnet_conflist("10.244.1.0/24"))
    ptp, portmap = conf["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24"}]]
    assert ptp["ipMasq"] is False
    assert portmap["type"] == "portmap"


def test_kindnet_script_is_valid_sh_and_carries_the_conflist():
    done = subprocess.run(["sh", "-n"], input=k.KINDNET_SCRIPT, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert '"type": "ptp"' in k.KINDNET_SCRIPT
    assert "__CONFLIST__" not in k.KINDNET_SCRIPT


def test_kindnet_script_writes_the_conflist_the_python_template_renders(tmp_path):
    # The sed substitution in the script must give exactly the Python rendering.
    snippet = k.KINDNET_SCRIPT.split("conf=$(", 1)[1].split(")\n", 1)[0]
    done = subprocess.run(
        ["sh", "-c", f"cidr=10.244.2.0/24; printf '%s' \"$({snippet})\""],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == json.loads(k.kindnet_conflist("10.244.2.0/24"))


def _run_shim(tmp_path: Path, *args: str) -> list[str]:
    """The shim with a fake podman that prints its arguments, one per line."""
    (tmp_path / "podman").write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "image exists present:1" ] && exit 0\n'
        '[ "$1 $2" = "image exists" ] && exit 1\nprintf "%s\\n" "$@"\n'
    )
    (tmp_path / "podman").chmod(0o755)
    (tmp_path / "docker").write_text(k.docker_shim("podman"))
    (tmp_path / "docker").chmod(0o755)
    done = subprocess.run(
        [str(tmp_path / "docker"), *args],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    return done.stdout.splitlines()


def test_docker_shim_passes_commands_through_and_skips_pulling_present_images(tmp_path):
    assert _run_shim(tmp_path, "cp", "/a b", "c:/d") == ["cp", "/a b", "c:/d"]
    assert _run_shim(tmp_path, "pull", "--platform=linux/amd64", "present:1") == []
    assert _run_shim(tmp_path, "pull", "--platform=linux/amd64", "absent:1") == [
        "pull", "--platform=linux/amd64", "absent:1",
    ]  # fmt: skip
    with pytest.raises(UsageError):
        k.docker_shim("nerdctl")


def test_docker_shim_commit_resets_cmd_and_splits_kinds_proxy_reset(tmp_path):
    entrypoint = 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]'
    out = _run_shim(
        tmp_path, "commit", "--change", entrypoint, "--change", k.KIND_COMMIT_PROXY_RESET, "cid", "img:1"
    )
    assert out == [
        "commit", "--change", "CMD []", "--change", entrypoint,
        "--change", 'ENV HTTP_PROXY=""', "--change", 'ENV HTTPS_PROXY=""', "--change", 'ENV NO_PROXY=""',
        "cid", "img:1",
    ]  # fmt: skip


def test_kind_build_argv_uses_a_file_build_with_our_base():
    argv = k.kind_build_argv(Path("/c/kind"), Path("/w/k.tgz"), "localhost/b:1", "localhost/n:1")
    assert argv == [
        "/c/kind", "build", "node-image", "--type", "file", "/w/k.tgz",
        "--base-image", "localhost/b:1", "--image", "localhost/n:1",
    ]  # fmt: skip


def test_base_image_changes_match_kinds_dockerfile():
    changes = k.base_image_changes("abc")
    assert "STOPSIGNAL SIGRTMIN+3" in changes
    assert 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' in changes
    assert "ENV container=docker" in changes
    assert f"LABEL {k.RECIPE_LABEL}=abc" in changes


def test_node_image_ref_and_recipe_digest():
    assert (
        k.node_image_ref("v1.35.4", "0123abcd") == "localhost/kuberay-conformance/kind-node:v1.35.4-0123abcd"
    )
    one = k.recipe_digest({"a": 1, "b": [1, 2]})
    assert one == k.recipe_digest({"b": [1, 2], "a": 1})
    assert one != k.recipe_digest({"a": 2, "b": [1, 2]})
    assert len(one) == 12


@pytest.mark.parametrize(
    ("env", "available", "engine"),
    [
        ({}, ["docker", "podman"], "docker"),
        ({}, ["podman"], "podman"),
        ({"KIND_EXPERIMENTAL_PROVIDER": "podman"}, ["docker", "podman"], "podman"),
    ],
)
def test_engine_follows_kinds_choice(env, available, engine):
    assert k.engine_from_env(env, available) == engine


def test_engine_errors_name_the_cause_and_fix():
    with pytest.raises(ProvisioningError, match="no container engine"):
        k.engine_from_env({}, [])
    with pytest.raises(ProvisioningError, match="podman is not installed"):
        k.engine_from_env({"KIND_EXPERIMENTAL_PROVIDER": "podman"}, ["docker"])
    with pytest.raises(UsageError, match="nerdctl"):
        k.engine_from_env({"KIND_EXPERIMENTAL_PROVIDER": "nerdctl"}, ["docker"])


def test_kubeadm_is_built_like_the_other_kubernetes_binaries():
    kubeadm = k.kubeadm_tool()
    kubernetes = pins.TOOLS["kubernetes"]
    assert kubeadm.packages == ("k8s.io/kubernetes/cmd/kubeadm",)
    assert (kubeadm.version, kubeadm.ldflags, kubeadm.staging_version) == (
        kubernetes.version,
        kubernetes.ldflags,
        kubernetes.staging_version,
    )
    assert kubeadm.name != kubernetes.name  # its own cache entry
