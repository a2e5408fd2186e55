"""Root filesystems of images: Debian's minbase through debootstrap, slimming, minimal /etc,
static binaries, and removing trees without ever deleting through a mount point."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import struct
from collections.abc import Sequence
from pathlib import Path

from conformance.build.commands import require, run
from conformance.errors import ProvisioningError

DEBIAN_MIRROR = "http://deb.debian.org/debian"


def debootstrap_command(suite: str, target: Path, mirror: str, packages: Sequence[str]) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        "--components=main",
        f"--include={','.join(packages)}",
        suite,
        str(target),
        mirror,
    ]


def is_static_elf(header: bytes) -> bool:
    """True for a 64-bit little-endian ELF with no program interpreter (PT_INTERP)."""
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (phoff,) = struct.unpack_from("<Q", header, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
    for index in range(phnum):
        offset = phoff + index * phentsize
        if offset + phentsize > len(header):
            raise ValueError("ELF program headers lie beyond the bytes read")
        (p_type,) = struct.unpack_from("<I", header, offset)
        if p_type == 3:  # PT_INTERP: the kernel would need a dynamic loader from the image
            return False
    return True


def mounts_under(path: Path, mountinfo: str) -> list[str]:
    """Mount points at or below `path`, from /proc/self/mountinfo text."""
    root = os.path.normpath(str(path))
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        # Field 5 is the mount point with space, tab, newline and backslash octal-escaped.
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if point == root or point.startswith(root + "/"):
            found.append(point)
    return found


def remove_tree(path: Path) -> None:
    """rmtree, but never through a mount point: that would delete whatever is mounted there."""
    if not path.exists():
        return
    mounted = mounts_under(path, Path("/proc/self/mountinfo").read_text())
    if mounted:
        raise ProvisioningError(
            f"{path} still has mounts ({', '.join(mounted)}), refusing to delete it",
            f"unmount them first: umount -R {mounted[0]}",
        )
    shutil.rmtree(path)


def check_static(binary: Path) -> None:
    try:
        with binary.open("rb") as handle:
            header = handle.read(64 * 1024)
        static = is_static_elf(header)
    except (OSError, ValueError) as exc:
        raise ProvisioningError(
            f"{binary} is not a readable x86-64 ELF program ({exc})",
            "pass the built binary, e.g. from gobuild.ensure_built",
        ) from exc
    if not static:
        raise ProvisioningError(
            f"{binary} is dynamically linked and would not start in a scratch image",
            "build it with CGO_ENABLED=0 (Go) or -static (C)",
        )


def write_minimal_etc(rootfs: Path, user: str, chown: bool = True) -> None:
    # Programs that look up their own user (Go's os/user, logging libraries) need these.
    uid, _, gid = user.partition(":")
    gid = gid or uid
    etc = rootfs / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    users = "root:x:0:0:root:/root:/sbin/nologin\n"
    groups = "root:x:0:\n"
    if uid != "0":
        users += f"nonroot:x:{uid}:{gid}:nonroot:/home/nonroot:/sbin/nologin\n"
        groups += f"nonroot:x:{gid}:\n"
    (etc / "passwd").write_text(users)
    (etc / "group").write_text(groups)
    (etc / "nsswitch.conf").write_text("hosts: files dns\n")
    for directory, mode in (("tmp", 0o1777), ("home/nonroot", 0o755)):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
        (rootfs / directory).chmod(mode)
    if uid != "0" and chown:  # without: the tar packer sets the owner in the layer instead
        os.chown(rootfs / "home/nonroot", int(uid), int(gid))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def debootstrap(rootfs: Path, suite: str, log: Path, packages: Sequence[str]) -> None:
    require("debootstrap", "debootstrap")
    # Its own mount namespace: debootstrap mounts /proc and /sys inside the target, and an
    # interrupted run must not leave them mounted under the cache directory.
    cmd = [require("unshare", "util-linux"), "--mount", "--propagation", "private"]
    cmd += debootstrap_command(suite, rootfs, DEBIAN_MIRROR, packages)
    run(cmd, log, f"debootstrap {suite}", f"check that {DEBIAN_MIRROR} is reachable and serves {suite}")


def slim_rootfs(rootfs: Path, extra: tuple[str, ...] = ()) -> None:
    # Caches, logs, docs and host identity that debootstrap and pip leave behind. Copyright
    # files stay. /etc/resolv.conf and /etc/hostname are bind-mounted by the runtime.
    for pattern in (
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/lib/apt/lists/*_*",
        "var/cache/debconf/*-old",
        "var/lib/dpkg/*-old",
        "var/log/*.log",
        "var/log/apt/*",
        "usr/share/man/*",
        "usr/share/info/*",
        "usr/share/locale/*",
        "usr/share/doc/*/*",
        "root/.cache",
        "etc/hostname",
        "etc/resolv.conf",
        *extra,
    ):
        for path in rootfs.glob(pattern):
            if path.name == "copyright":
                continue
            remove_any(path)
    # The kubelet mounts its own /etc/hosts into pods; this one makes `localhost` resolve
    # anywhere else (ctr run, chroot checks), which KubeRay's wget probes rely on.
    (rootfs / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")


def remove_any(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # already gone through a symlinked directory
        return
    if stat.S_ISDIR(mode):
        remove_tree(path)
    else:
        path.unlink()
