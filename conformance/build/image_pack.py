"""A rootfs directory turned into a one-layer docker-archive: with buildah (as root), or in
Python only (for users without root, whose archives kind loads)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from conformance.build.commands import require, run
from conformance.build.image_cache import ImageConfig
from conformance.build.rootfs import remove_tree, sha256_file

BUILDAH_BLOB_INFO_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")


def buildah_config_args(config: ImageConfig) -> list[str]:
    # JSON arrays so buildah does not wrap entrypoint or cmd in `/bin/sh -c`.
    args = ["--entrypoint", json.dumps(list(config.entrypoint)), "--cmd", json.dumps(list(config.cmd))]
    for item in config.env:
        args += ["--env", item]
    if config.workdir:
        args += ["--workingdir", config.workdir]
    if config.user:
        args += ["--user", config.user]
    for key, value in sorted(config.labels.items()):
        args += ["--label", f"{key}={value}"]
    return args


def _buildah(storage: Path) -> list[str]:
    # vfs: plain directories, so no overlay mounts can be left behind; storage is per build
    # and deleted after the commit, so nothing lands in /var/lib/containers.
    return [
        require("buildah", "buildah"),
        "--root",
        str(storage / "root"),
        "--runroot",
        str(storage / "run"),
        "--storage-driver",
        "vfs",
    ]


def _buildah_env(storage: Path) -> dict[str, str]:
    # Our own storage.conf and policy, so host settings (overlay mount programs, strict
    # signature policies) cannot change what we build.
    storage.mkdir(parents=True, exist_ok=True)
    conf = storage / "storage.conf"
    conf.write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{storage / "root"}"\nrunroot = "{storage / "run"}"\n'
    )
    (storage / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf)}


def pack_rootfs(rootfs: Path, ref: str, config: ImageConfig, out: Path, *, work: Path, log: Path) -> None:
    """Turn a directory into a one-layer docker-archive at `out` named `ref`."""
    with buildah_host_traces_removed():
        _buildah_pack(rootfs, ref, config, out, work / "buildah", log)


GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def pack_rootfs_tar(
    rootfs: Path,
    ref: str,
    config: ImageConfig,
    out: Path,
    owners: Mapping[str, tuple[int, int]] | None = None,
) -> None:
    """Turn a directory into a one-layer docker-archive at `out` named `ref`, in Python only.

    For users without root (a CI runner feeding `kind load image-archive`), where buildah cannot
    mount. Every entry is owned by root unless `owners` names its path (relative to the rootfs);
    times are zero and entries sorted, so the same rootfs always gives the same layer digest.
    """
    owners = owners or {}
    layer = out.with_name("layer.tar")
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*"), key=lambda p: p.relative_to(rootfs).as_posix()):
            name = path.relative_to(rootfs).as_posix()
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid, info.gid = owners.get(name, (0, 0))
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    diff_id = sha256_file(layer)
    image_config: dict[str, object] = {
        "architecture": GOARCH.get(os.uname().machine, os.uname().machine),
        "os": "linux",
        "config": {
            key: value
            for key, value in (
                ("Entrypoint", list(config.entrypoint)),
                ("Cmd", list(config.cmd)),
                ("Env", list(config.env)),
                ("WorkingDir", config.workdir),
                ("User", config.user),
                ("Labels", dict(config.labels)),
            )
            if value
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "kuberay-conformance pack_rootfs_tar"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{diff_id}/layer.tar"]}]
    with tarfile.open(out, "w") as archive:
        files = ((config_name, config_bytes), ("manifest.json", json.dumps(manifest).encode()))
        info = tarfile.TarInfo(f"{diff_id}/layer.tar")  # owner root, mtime 0, like the rest
        info.size = layer.stat().st_size
        with layer.open("rb") as handle:
            archive.addfile(info, handle)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    layer.unlink()


@contextmanager
def buildah_host_traces_removed(cache_file: Path = BUILDAH_BLOB_INFO_CACHE) -> Iterator[None]:
    """Remove the blob-info cache that buildah's commit creates in /var/lib/containers.

    As root, containers/image records layer digests in /var/lib/containers/cache whatever
    --root says, and buildah has no flag to move it. It is only a lookup cache; whatever
    did not exist before the build is removed after it (pre-existing files are left alone).
    """
    chain = [cache_file.parent.parent, cache_file.parent, cache_file]
    created = [path for path in chain if not path.exists()]
    try:
        yield
    finally:
        for path in reversed(created):  # the file first, then its directories if empty
            try:
                if path.is_dir():
                    path.rmdir()
                else:
                    path.unlink(missing_ok=True)
            except OSError:  # not empty: other containers tooling started using it meanwhile
                break


def _buildah_pack(rootfs: Path, ref: str, config: ImageConfig, out: Path, storage: Path, log: Path) -> None:
    env = _buildah_env(storage)
    buildah = _buildah(storage)
    policy = ["--signature-policy", str(storage / "policy.json")]
    fix = "check that buildah works as root (buildah from scratch)"
    try:
        container = run(
            [*buildah, "from", *policy, "scratch"], log, "buildah from", fix, env=env, capture=True
        ).strip()
        mount = run([*buildah, "mount", container], log, "buildah mount", fix, env=env, capture=True).strip()
        # cp -a keeps owners, modes, hard links and xattrs, which `buildah copy` would reset.
        run(["cp", "-a", f"{rootfs}/.", mount], log, "copying the rootfs into the image", fix)
        run([*buildah, "umount", container], log, "buildah umount", fix, env=env)
        run(
            [*buildah, "config", *buildah_config_args(config), container], log, "buildah config", fix, env=env
        )
        # --rm removes the working container once the archive is written.
        target = f"docker-archive:{out}:{ref}"
        commit = [*buildah, "commit", "--rm", "--format", "docker", *policy, container, target]
        run(commit, log, "buildah commit", fix, env=env)
    finally:
        remove_tree(storage)
