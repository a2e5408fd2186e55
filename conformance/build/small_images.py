"""Small images: the pod sandbox (pause, compiled here), one static binary (the KubeRay operator,
Traefik, vegeta, the local-path provisioner), and a toolbox with a shell and kubectl."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from conformance.build.commands import require, run
from conformance.build.image_cache import ARCHIVE_NAME, SYSTEM_PATH, ImageArchive, ImageConfig, cached_build
from conformance.build.image_pack import pack_rootfs
from conformance.build.rootfs import check_static, remove_tree, sha256_file, write_minimal_etc
from conformance.errors import ProvisioningError, UsageError
from conformance.progress import progress

PAUSE_VERSION = "1.0.0"
PAUSE_SOURCE = Path(__file__).with_name("pause") / "pause.c"
NONROOT_USER = "65532:65532"  # distroless' nonroot, for the static-binary images
PAUSE_USER = "65535:65535"  # the uid the upstream pause image runs as


def binary_install_path(entrypoint: Sequence[str]) -> str:
    """Where the binary goes: at the entrypoint's path, or on PATH when the entrypoint is a bare name."""
    if not entrypoint or not entrypoint[0] or entrypoint[0].endswith("/"):
        raise UsageError("an image entrypoint must start with the program to run", "pass e.g. ['/manager']")
    program = entrypoint[0]
    if program.startswith("/"):
        return os.path.normpath(program)
    if "/" in program:
        raise UsageError(f"entrypoint {program!r} is a relative path", "use an absolute path or a bare name")
    return f"/usr/local/bin/{program}"


def _gcc_version() -> str:
    gcc = require("gcc", "gcc libc6-dev")
    return subprocess.run(
        [gcc, "-dumpfullversion"], check=False, capture_output=True, text=True
    ).stdout.strip()


def pause_image(cache_dir: Path) -> ImageArchive:
    source = PAUSE_SOURCE.read_bytes()
    inputs = {
        "kind": "pause",
        "version": PAUSE_VERSION,
        "source_sha256": hashlib.sha256(source).hexdigest(),
        "gcc": _gcc_version(),
        "user": PAUSE_USER,
    }

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}"):
            rootfs = work / "rootfs"
            rootfs.mkdir()
            binary = rootfs / "pause"
            run(
                [
                    "gcc",
                    "-Os",
                    "-static",
                    "-s",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    f'-DVERSION="{PAUSE_VERSION}"',
                    "-o",
                    str(binary),
                    str(PAUSE_SOURCE),
                ],
                log,
                "compiling pause.c",
                "install a static C library: apt-get install -y gcc libc6-dev",
            )
            out = run(
                [str(binary), "-v"], log, "running the pause binary", "see the compiler output", capture=True
            )
            if PAUSE_VERSION not in out:
                raise ProvisioningError(f"pause -v printed {out.strip()!r}", f"see {log}")
            config = ImageConfig(entrypoint=("/pause",), user=PAUSE_USER)
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            remove_tree(rootfs)

    return cached_build(cache_dir, "pause", PAUSE_VERSION, inputs, build)


def binary_image(
    cache_dir: Path, name: str, version: str, binary: Path, entrypoint: list[str], *, user: str = NONROOT_USER
) -> ImageArchive:
    """An image holding one static binary at `entrypoint[0]` (or /usr/local/bin/<name> for a bare name)."""
    install_path = binary_install_path(entrypoint)
    if not re.fullmatch(r"\d+(:\d+)?", user):
        raise UsageError(f"image user {user!r} is not numeric", "use uid or uid:gid, e.g. 65532:65532")
    check_static(binary)
    inputs = {
        "kind": "binary",
        "binary_sha256": sha256_file(binary),
        "install_path": install_path,
        "entrypoint": list(entrypoint),
        "user": user,
    }

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}"):
            rootfs = work / "rootfs"
            write_minimal_etc(rootfs, user)
            target = rootfs / install_path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(binary, target)
            target.chmod(0o755)
            config = ImageConfig(
                entrypoint=tuple(entrypoint),
                env=(f"PATH={SYSTEM_PATH}",),
                user=user,
                labels={"org.opencontainers.image.version": version},
            )
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            remove_tree(rootfs)

    return cached_build(cache_dir, name, version, inputs, build)


BUSYBOX = Path("/bin/busybox")


def _busybox_version() -> str:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "busybox-static"], check=False, capture_output=True, text=True
    )
    if done.returncode != 0 or not BUSYBOX.exists():
        raise ProvisioningError("busybox-static is not installed", "apt-get install busybox-static")
    return done.stdout.strip()


def toolbox_image(cache_dir: Path, kubectl: Path) -> ImageArchive:
    """A small image for checks that need a shell in a pod: Debian's static busybox and our kubectl.

    kubectl in a pod with no kubeconfig uses the in-cluster config, which is what the RBAC
    checks exercise.
    """
    busybox_version = _busybox_version()
    check_static(BUSYBOX)
    inputs = {
        "kind": "toolbox",
        "busybox": busybox_version,
        "busybox_sha256": sha256_file(BUSYBOX),
        "kubectl_sha256": sha256_file(kubectl),
    }
    tag = re.sub(r"[^A-Za-z0-9_.-]", "-", busybox_version)

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}"):
            rootfs = work / "rootfs"
            write_minimal_etc(rootfs, "0")
            bin_dir = _install_busybox(rootfs)
            shutil.copyfile(kubectl, bin_dir / "kubectl")
            (bin_dir / "kubectl").chmod(0o755)
            config = ImageConfig(entrypoint=("/bin/sh",), env=("PATH=/bin",), user="0:0", labels={})
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            remove_tree(rootfs)

    return cached_build(cache_dir, "toolbox", tag, inputs, build)


def _install_busybox(rootfs: Path) -> Path:
    """Debian's static busybox as /bin/sh and every applet; returns /bin of the rootfs."""
    bin_dir = rootfs / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(BUSYBOX, bin_dir / "busybox")
    (bin_dir / "busybox").chmod(0o755)
    applets = subprocess.run([str(BUSYBOX), "--list"], check=True, capture_output=True, text=True)
    for applet in applets.stdout.split():
        if applet != "busybox":
            (bin_dir / applet).symlink_to("busybox")
    return bin_dir
