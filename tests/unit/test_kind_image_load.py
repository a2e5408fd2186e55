"""The kind provider's way to load an image built here, without a cluster: the archive packed
in Python (no root, no buildah) and `kind load image-archive` against a recording stand-in `kind`
on PATH, in the style of test_terraform_orchestration_only.py. Loading into real kind nodes is
untested on this machine (no Docker engine); the archive itself was read and run with buildah.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from pathlib import Path

import pytest
import standins as standin_tools

from conformance.build import image_cache, image_pack
from conformance.errors import ProvisioningError
from conformance.providers.kind import KindProvider, cluster_name

STANDIN_KIND = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"args": args}}) + "\\n")
if args and args[0] == os.environ.get("STANDIN_FAIL"):
    print("ERROR: simulated " + args[0] + " failure", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return standin_tools.install(tmp_path, monkeypatch, STANDIN_KIND, "kind")


def test_kind_loads_an_archive_into_the_runs_cluster(standins: Path, tmp_path: Path) -> None:
    provider = KindProvider(run_id="20261129T100000Z-ab12")
    archive = image_cache.ImageArchive("localhost/kuberay-conformance/vegeta:v12", tmp_path / "image.tar")
    provider.load_image(archive)
    (call,) = standin_tools.calls(standins)
    assert call["args"] == ["load", "image-archive", str(archive.path), "--name", "krc-20261129t100000z-ab12"]
    assert cluster_name("20261129T100000Z-ab12") == "krc-20261129t100000z-ab12"
    assert provider.image_packer == "tar"


def test_a_failed_kind_load_is_an_environment_error(
    standins: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "load")
    archive = image_cache.ImageArchive("localhost/x:1", tmp_path / "image.tar")
    with pytest.raises(ProvisioningError, match="simulated load failure"):
        KindProvider(run_id="r1").load_image(archive)


def test_the_tar_packer_writes_a_docker_archive_any_user_can_make(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "home/nonroot").mkdir(parents=True)
    (rootfs / "bin/busybox").write_bytes(b"\x7fELF")
    (rootfs / "bin/sh").symlink_to("busybox")
    config = image_cache.ImageConfig(entrypoint=("/bin/sh",), env=("PATH=/bin",), user="65532:65532")
    out = [tmp_path / "a.tar", tmp_path / "b.tar"]
    for path in out:
        image_pack.pack_rootfs_tar(
            rootfs, "localhost/kuberay-conformance/vegeta:v1", config, path, {"home/nonroot": (65532, 65532)}
        )
    assert out[0].read_bytes() == out[1].read_bytes()  # the same rootfs, the same archive
    with tarfile.open(out[0]) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert manifest["RepoTags"] == ["localhost/kuberay-conformance/vegeta:v1"]
        image_config = json.load(archive.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        layer_bytes = archive.extractfile(manifest["Layers"][0]).read()  # type: ignore[union-attr]
    assert image_config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer_bytes).hexdigest()}"]
    assert image_config["config"] == {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/bin"], "User": "65532:65532"}
    (tmp_path / "layer.tar").write_bytes(layer_bytes)
    with tarfile.open(tmp_path / "layer.tar") as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert list(members) == ["bin", "bin/busybox", "bin/sh", "home", "home/nonroot"]
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert (members["home/nonroot"].uid, members["bin/busybox"].uid) == (65532, 0)
    assert {m.mtime for m in members.values()} == {0}
