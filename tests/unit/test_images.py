"""Pure logic of the image recipes (conformance/build/) and their import into containerd:
names, cache keys, commands, checks."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from conformance.build import image_cache, image_pack, ray_images, rootfs, small_images
from conformance.build.image_cache import ImageArchive, ImageConfig
from conformance.errors import ProvisioningError, UsageError
from conformance.providers.local import image_import


def test_image_ref_is_under_the_local_registry() -> None:
    assert image_cache.image_ref("ray", "2.58.0") == "localhost/kuberay-conformance/ray:2.58.0"
    assert (
        image_cache.image_ref("kuberay-operator", "v1.7.0")
        == "localhost/kuberay-conformance/kuberay-operator:v1.7.0"
    )


@pytest.mark.parametrize(
    ("name", "version"), [("Ray", "1"), ("ray", ""), ("ray", "-1"), ("ray", "1+local"), ("a//b", "1")]
)
def test_image_ref_rejects_what_containerd_could_not_name(name: str, version: str) -> None:
    with pytest.raises(UsageError):
        image_cache.image_ref(name, version)


def test_cache_key_is_stable_and_readable() -> None:
    key = image_cache.cache_key("ray", "2.58.0", {"b": 1, "a": [1, 2]})
    assert key == image_cache.cache_key("ray", "2.58.0", {"a": [1, 2], "b": 1})
    assert key.startswith("ray-2.58.0-")
    assert len(key.rsplit("-", 1)[1]) == 12


def test_cache_key_changes_with_any_input_and_the_recipe_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    base = image_cache.cache_key("ray", "2.58.0", {"suite": "bookworm"})
    assert image_cache.cache_key("ray", "2.58.0", {"suite": "trixie"}) != base
    monkeypatch.setattr(image_cache, "RECIPE_REVISION", "changed")
    assert image_cache.cache_key("ray", "2.58.0", {"suite": "bookworm"}) != base


def test_buildah_config_args_use_json_arrays_so_no_shell_wraps_the_entrypoint() -> None:
    config = ImageConfig(
        entrypoint=("/manager",),
        env=("PATH=/bin", "A=b c"),
        workdir="/w",
        user="65532:65532",
        labels={"z": "1", "a": "2"},
    )
    args = image_pack.buildah_config_args(config)
    assert args[:4] == ["--entrypoint", '["/manager"]', "--cmd", "[]"]
    assert args[4:] == [
        "--env", "PATH=/bin", "--env", "A=b c", "--workingdir", "/w", "--user", "65532:65532",
        "--label", "a=2", "--label", "z=1",
    ]  # fmt: skip


def test_ray_image_puts_the_venv_first_on_path_and_runs_as_a_numeric_user() -> None:
    config = ray_images.ray_image_config("2.58.0")
    assert image_cache.env_value(config, "PATH").startswith(f"{ray_images.RAY_VENV}/bin:")
    assert "/bin" in image_cache.env_value(config, "PATH").split(":")
    assert config.workdir == ray_images.RAY_HOME
    assert config.user.split(":")[0].isdigit() and config.user != "0"
    assert image_cache.env_value(config, "MISSING") == ""


def test_debootstrap_command_is_minbase_with_the_packages_kuberay_pods_need() -> None:
    cmd = rootfs.debootstrap_command(
        "bookworm", Path("/x/rootfs"), "http://mirror/debian", ray_images.RAY_PACKAGES
    )
    assert cmd[:2] == ["debootstrap", "--variant=minbase"]
    assert "--include=python3,python3-venv,wget,ca-certificates,procps" in cmd
    assert cmd[-3:] == ["bookworm", "/x/rootfs", "http://mirror/debian"]


def test_pip_env_is_clean_and_points_at_the_copied_ca(tmp_path: Path) -> None:
    host = {
        "PATH": "/host/bin",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "PIP_FIND_LINKS": "/opt/wheels",
        "PYTHONPATH": "/host/lib",
        "HTTPS_PROXY": "http://proxy:3128",
        "PIP_INDEX_URL": "https://mirror/simple",
    }
    env = ray_images.pip_env(host, "/tmp/ca.pem")
    assert env["SSL_CERT_FILE"] == env["PIP_CERT"] == "/tmp/ca.pem"
    assert env["PATH"].startswith(f"{ray_images.RAY_VENV}/bin:")
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["PIP_INDEX_URL"] == "https://mirror/simple"
    assert env["PIP_NO_CACHE_DIR"] == "1"
    assert "PIP_FIND_LINKS" not in env and "PYTHONPATH" not in env


def test_pip_env_without_a_ca_leaves_pip_to_its_own_bundle() -> None:
    env = ray_images.pip_env({}, None)
    assert "SSL_CERT_FILE" not in env and "PIP_CERT" not in env


def test_host_ca_bundle_prefers_pip_cert_then_ssl_cert_file(tmp_path: Path) -> None:
    pip_ca, ssl_ca = tmp_path / "pip.pem", tmp_path / "ssl.pem"
    pip_ca.write_text("x")
    ssl_ca.write_text("y")
    assert ray_images.host_ca_bundle({"PIP_CERT": str(pip_ca), "SSL_CERT_FILE": str(ssl_ca)}) == pip_ca
    assert (
        ray_images.host_ca_bundle({"PIP_CERT": str(tmp_path / "missing"), "SSL_CERT_FILE": str(ssl_ca)})
        == ssl_ca
    )


@pytest.mark.parametrize(
    ("entrypoint", "path"),
    [
        (["/manager"], "/manager"),
        (["/usr/bin/../local/traefik", "--x"], "/usr/local/traefik"),
        (["traefik"], "/usr/local/bin/traefik"),
    ],
)
def test_binary_install_path_follows_the_entrypoint(entrypoint: list[str], path: str) -> None:
    assert small_images.binary_install_path(entrypoint) == path


@pytest.mark.parametrize("entrypoint", [[], [""], ["bin/x"], ["/dir/"]])
def test_binary_install_path_rejects_unusable_entrypoints(entrypoint: list[str]) -> None:
    with pytest.raises(UsageError):
        small_images.binary_install_path(entrypoint)


def _elf(program_header_types: list[int]) -> bytes:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, len(program_header_types))  # e_phentsize, e_phnum
    for p_type in program_header_types:
        entry = bytearray(56)
        struct.pack_into("<I", entry, 0, p_type)
        header += entry
    return bytes(header)


def test_is_static_elf_looks_for_a_program_interpreter() -> None:
    assert rootfs.is_static_elf(_elf([6, 1, 1, 4]))  # PHDR, LOAD, LOAD, NOTE
    assert not rootfs.is_static_elf(_elf([6, 3, 1]))  # PT_INTERP: needs ld.so


@pytest.mark.parametrize(
    "blob",
    [b"#!/bin/sh\n" + bytes(60), b"\x7fELF\x01\x01" + bytes(58), _elf([1])[:70], b"\x7fELF\x02\x01"],
    ids=["script", "32-bit", "truncated-headers", "truncated-elf-header"],
)
def test_is_static_elf_rejects_what_it_cannot_judge(blob: bytes) -> None:
    with pytest.raises(ValueError):
        rootfs.is_static_elf(blob)


def test_mounts_under_finds_nested_and_escaped_mount_points() -> None:
    mountinfo = r"""22 1 8:1 / / rw - ext4 /dev/vda rw
40 22 0:5 / /cache/images/ray.partial/rootfs/proc rw - proc proc rw
41 22 0:6 / /cache/images/ray.partial/with\040space rw - tmpfs tmpfs rw
42 22 0:7 / /cache/images/ray.partial-other rw - tmpfs tmpfs rw
"""
    found = rootfs.mounts_under(Path("/cache/images/ray.partial/"), mountinfo)
    assert found == ["/cache/images/ray.partial/rootfs/proc", "/cache/images/ray.partial/with space"]
    assert rootfs.mounts_under(Path("/elsewhere"), mountinfo) == []


def test_import_command_keeps_the_archive_name_and_pins_by_default() -> None:
    archive = ImageArchive("localhost/kuberay-conformance/ray:2.58.0", Path("/c/images/ray/image.tar"))
    cmd = image_import.import_command(archive, Path("/bin/ctr"), Path("/run/c.sock"), "k8s.io", pin=True)
    assert cmd == [
        "/bin/ctr", "--address", "/run/c.sock", "-n", "k8s.io", "images", "import",
        "--label", "kuberay-conformance.io/archive=ray",
        "--label", "io.cri-containerd.pinned=pinned", "/c/images/ray/image.tar",
    ]  # fmt: skip
    assert "--base-name" not in cmd and "--local" not in cmd
    unpinned = image_import.import_command(
        archive, Path("/bin/ctr"), Path("/run/c.sock"), "k8s.io", pin=False
    )
    assert "io.cri-containerd.pinned=pinned" not in unpinned


def _fake_build(calls: list[str], fail: bool = False) -> image_cache.Builder:
    def build(work: Path, ref: str, log: Path) -> None:
        calls.append(ref)
        log.write_text("building\n")
        if fail:
            raise RuntimeError("interrupted")
        (work / image_cache.ARCHIVE_NAME).write_bytes(b"tar")

    return build


def test_cache_builds_once_then_returns_the_marked_archive(tmp_path: Path) -> None:
    calls: list[str] = []
    first = image_cache.cached_build(tmp_path, "thing", "1.0", {"x": 1}, _fake_build(calls))
    second = image_cache.cached_build(tmp_path, "thing", "1.0", {"x": 1}, _fake_build(calls))
    assert first == second
    assert calls == ["localhost/kuberay-conformance/thing:1.0"]
    assert first.path.read_bytes() == b"tar"
    marker = json.loads((first.path.parent / image_cache.MARKER_NAME).read_text())
    assert marker["ref"] == first.ref
    assert not list(tmp_path.glob("images/*.partial"))


def test_an_interrupted_build_never_looks_complete(tmp_path: Path) -> None:
    calls: list[str] = []
    with pytest.raises(RuntimeError):
        image_cache.cached_build(tmp_path, "thing", "1.0", {"x": 1}, _fake_build(calls, fail=True))
    key = image_cache.cache_key("thing", "1.0", {"x": 1})
    assert not (tmp_path / "images" / key).exists()
    assert (tmp_path / "images" / f"{key}.partial" / image_cache.LOG_NAME).exists()  # kept for diagnosis
    archive = image_cache.cached_build(tmp_path, "thing", "1.0", {"x": 1}, _fake_build(calls))
    assert archive.path.exists() and len(calls) == 2


def test_a_builder_that_writes_no_archive_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ProvisioningError, match="produced no archive"):
        image_cache.cached_build(tmp_path, "thing", "1.0", {}, lambda work, ref, log: None)


def test_buildah_traces_are_removed_when_the_build_created_them(tmp_path: Path) -> None:
    cache_file = tmp_path / "containers" / "cache" / "blob-info-cache-v1.boltdb"
    with image_pack.buildah_host_traces_removed(cache_file):
        cache_file.parent.mkdir(parents=True)
        cache_file.write_bytes(b"bolt")
    assert not (tmp_path / "containers").exists()


def test_buildah_traces_that_existed_before_are_left_alone(tmp_path: Path) -> None:
    cache_file = tmp_path / "containers" / "cache" / "blob-info-cache-v1.boltdb"
    cache_file.parent.mkdir(parents=True)
    with image_pack.buildah_host_traces_removed(cache_file):
        cache_file.write_bytes(b"bolt")
    assert not cache_file.exists() and cache_file.parent.is_dir()
    cache_file.write_bytes(b"someone else's")
    with image_pack.buildah_host_traces_removed(cache_file):
        pass
    assert cache_file.read_bytes() == b"someone else's"


def test_buildah_traces_in_a_directory_others_now_use_stay(tmp_path: Path) -> None:
    cache_file = tmp_path / "containers" / "cache" / "blob-info-cache-v1.boltdb"
    with image_pack.buildah_host_traces_removed(cache_file):
        cache_file.parent.mkdir(parents=True)
        cache_file.write_bytes(b"bolt")
        (cache_file.parent / "other-tool.db").write_bytes(b"x")
    assert not cache_file.exists()
    assert (cache_file.parent / "other-tool.db").exists()


def test_redis_image_runs_as_the_numeric_user_the_package_created(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0::/root:/bin/bash\nredis:x:100:101::/var/lib/redis:/usr/sbin/nologin\n"
    )
    assert ray_images._passwd_ids(tmp_path, "redis") == "100:101"
    with pytest.raises(ProvisioningError, match="valkey user is missing"):
        ray_images._passwd_ids(tmp_path, "valkey")
