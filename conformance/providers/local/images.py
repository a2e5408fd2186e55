"""Container images for the local provider, built on this machine without a registry.

Nothing can be pulled, so every image a cluster runs (the pod sandbox, the KubeRay
operator, Ray, add-ons) is built here as a directory tree, turned into a docker-archive
tar by buildah, and imported into containerd's `k8s.io` namespace with `ctr`.

A docker-archive is used rather than an OCI archive because `ctr images import` names
images from its manifest.json `RepoTags` (full references are kept as they are), while
an OCI archive carries only a tag and needs `--base-name`. `localhost/...` references
are already fully qualified, so containerd, the CRI plugin and the kubelet all call the
image by exactly `ImageArchive.ref`.

Archives are cached under `<cache_dir>/images/<name>-<version>-<recipe hash>/`. A build
runs in a `.partial` sibling directory and is renamed into place only after the archive
and the `complete` marker are written, so an interrupted build never looks finished.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import ProvisioningError, UsageError
from conformance.progress import progress

from .layout import cache_entry_lock

RECIPE_REVISION = "1"  # bump when the way images are built changes, to invalidate every cached image
RAY_RECIPE_REVISION = "3"  # bump when only the Ray rootfs recipe changes
REGISTRY = "localhost/kuberay-conformance"
PAUSE_VERSION = "1.0.0"
PAUSE_SOURCE = Path(__file__).with_name("pause") / "pause.c"
ARCHIVE_NAME = "image.tar"
MARKER_NAME = "complete"
LOG_NAME = "build.log"
BUILD_CA_PATH = "/tmp/kuberay-conformance-build-ca.pem"  # inside the chroot, during pip only
BUILDAH_BLOB_INFO_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")

DEBIAN_MIRROR = "http://deb.debian.org/debian"
# minbase already brings bash, grep, sed, mawk, coreutils and findutils (Priority: required);
# these are what KubeRay's generated pods call on top: probes use wget, `ps` helps debugging.
RAY_PACKAGES = ("python3", "python3-venv", "wget", "ca-certificates", "procps")
# Installed next to Ray because Ray does not declare them: ray.serve imports jinja2 at
# module scope since 2.57 (ray-project/ray#65507, fixed by PR #65542 after 2.58), so
# without it a RayService's Serve controller cannot even start.
RAY_EXTRA_REQUIREMENTS = ("jinja2",)
# Redis (GCS fault tolerance): Debian's own package; no shell tools are needed beyond minbase.
REDIS_PACKAGES = ("redis-server",)
REDIS_RECIPE_REVISION = "1"
REDIS_DATA = "/data"
RAY_VENV = "/opt/ray"
RAY_HOME = "/home/ray"
# Like the official rayproject/ray images: uid 1000 in group users, numeric so that
# `runAsNonRoot: true` can be verified by the kubelet.
RAY_USER = "1000:100"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NONROOT_USER = "65532:65532"  # distroless' nonroot, for the static-binary images
PAUSE_USER = "65535:65535"  # the uid the upstream pause image runs as
ARCHIVE_LABEL = "kuberay-conformance.io/archive"
CRI_PINNED_LABEL = "io.cri-containerd.pinned=pinned"  # the CRI plugin reports these as pinned: no image GC

_NAME_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_SUITE = re.compile(r"^[a-z][a-z0-9-]*$")
_HOST_ENV_FOR_PIP = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
)


@dataclass(frozen=True)
class ImageArchive:
    ref: str  # full image reference, e.g. "localhost/kuberay-conformance/ray:2.58.0"
    path: Path  # a docker-archive tar whose manifest.json names `ref` in RepoTags


@dataclass(frozen=True)
class ImageConfig:
    """The parts of the image config we set; everything else keeps buildah's defaults."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    workdir: str = ""
    user: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


# --- pure helpers -------------------------------------------------------------------


def image_ref(name: str, version: str) -> str:
    if not all(_NAME_COMPONENT.match(part) for part in name.split("/")):
        raise UsageError(
            f"{name!r} is not a valid image name",
            "use lowercase letters, digits and single separators (. _ -) between them",
        )
    if not _TAG.match(version):
        raise UsageError(
            f"{version!r} is not a valid image tag",
            "use at most 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'",
        )
    return f"{REGISTRY}/{name}:{version}"


def cache_key(name: str, version: str, inputs: Mapping[str, object]) -> str:
    """A directory name that changes whenever anything that shapes the image changes."""
    blob = json.dumps({"inputs": inputs, "rev": RECIPE_REVISION}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{name.replace('/', '_')}-{version}-{digest}"


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


def ray_image_config(ray_version: str) -> ImageConfig:
    return ImageConfig(
        cmd=("/bin/bash",),
        env=(
            f"PATH={RAY_VENV}/bin:{SYSTEM_PATH}",
            f"HOME={RAY_HOME}",
            "LANG=C.UTF-8",
            f"VIRTUAL_ENV={RAY_VENV}",
        ),
        workdir=RAY_HOME,
        user=RAY_USER,
        labels={"org.opencontainers.image.version": ray_version},
    )


def env_value(config: ImageConfig, name: str) -> str:
    prefix = name + "="
    return next((item[len(prefix) :] for item in config.env if item.startswith(prefix)), "")


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


def host_ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The bundle this host trusts, which includes the TLS-intercepting proxy's CA if there is one."""
    for candidate in (env.get("PIP_CERT"), env.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def pip_env(host_env: Mapping[str, str], ca_in_chroot: str | None) -> dict[str, str]:
    """A clean environment for pip inside the chroot: host paths mean nothing there."""
    env = {
        "PATH": f"{RAY_VENV}/bin:{SYSTEM_PATH}",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_DEFAULT_TIMEOUT": host_env.get("PIP_DEFAULT_TIMEOUT", "180"),
        "PIP_PROGRESS_BAR": "off",
    }
    env.update({key: host_env[key] for key in _HOST_ENV_FOR_PIP if key in host_env})
    if ca_in_chroot:
        env["SSL_CERT_FILE"] = ca_in_chroot
        env["PIP_CERT"] = ca_in_chroot
    return env


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


def import_command(archive: ImageArchive, ctr: Path, address: Path, namespace: str, pin: bool) -> list[str]:
    # No --base-name: ctr then keeps full references from RepoTags as they are (it only
    # prefixes bare tags). No --local: the daemon's transfer service imports and unpacks
    # for the default platform into the default snapshotter (overlayfs), which CRI uses.
    cmd = [str(ctr), "--address", str(address), "-n", namespace, "images", "import"]
    cmd += ["--label", f"{ARCHIVE_LABEL}={archive_id(archive)}"]
    if pin:
        cmd += ["--label", CRI_PINNED_LABEL]
    return [*cmd, str(archive.path)]


def archive_id(archive: ImageArchive) -> str:
    """Which build an imported image came from: its cache entry's name (recipe hash included)."""
    return archive.path.parent.name


# --- running things ----------------------------------------------------------------


def _require(program: str, package: str) -> str:
    found = shutil.which(program)
    if not found:
        raise ProvisioningError(f"{program} is not installed", f"install it: apt-get install -y {package}")
    return found


def _tail(log: Path, lines: int = 1) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def _run(
    cmd: Sequence[str],
    log: Path,
    what: str,
    fix: str,
    *,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
) -> str:
    """Run `cmd` with its output streamed into the build log; raise on failure.

    With `capture`, stdout is returned (and copied into the log afterwards) instead.
    """
    with log.open("a") as sink:
        sink.write(f"[{time.strftime('%H:%M:%S')}] $ {' '.join(cmd)}\n")
        sink.flush()
        done = subprocess.run(
            list(cmd),
            check=False,
            stdout=subprocess.PIPE if capture else sink,
            stderr=sink,
            text=True,
            env=dict(env) if env else None,
        )
        sink.write(done.stdout or "")
    if done.returncode != 0:
        raise ProvisioningError(
            f"{what} failed (exit {done.returncode}): {_tail(log)}", f"{fix}; full log: {log}"
        )
    return done.stdout or ""


def _chroot(
    rootfs: Path,
    argv: Sequence[str],
    log: Path,
    what: str,
    fix: str,
    *,
    env: Mapping[str, str],
    user: str = "",
    capture: bool = False,
) -> str:
    # A private mount and PID namespace: /proc is mounted for the command only and vanishes
    # with it, even if we are killed, so nothing stays mounted inside the cache directory.
    cmd = [_require("unshare", "util-linux"), "--mount", "--pid", "--fork", f"--mount-proc={rootfs}/proc"]
    cmd += [_require("chroot", "coreutils")]
    if user:
        cmd += [f"--userspec={user}"]
    return _run([*cmd, str(rootfs), *argv], log, what, fix, env=env, capture=capture)


def _remove_tree(path: Path) -> None:
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


# --- the cache ----------------------------------------------------------------------


def _read_marker(root: Path, ref: str) -> bool:
    marker = root / MARKER_NAME
    if not (marker.is_file() and (root / ARCHIVE_NAME).is_file()):
        return False
    try:
        return json.loads(marker.read_text()).get("ref") == ref
    except (OSError, ValueError):
        return False


Builder = Callable[[Path, str, Path], None]  # (work dir, ref, log) -> writes work/ARCHIVE_NAME


def _cached_build(
    cache_dir: Path, name: str, version: str, inputs: Mapping[str, object], build: Builder
) -> ImageArchive:
    ref = image_ref(name, version)
    images_dir = cache_dir / "images"
    key = cache_key(name, version, inputs)
    root = images_dir / key
    archive = ImageArchive(ref, root / ARCHIVE_NAME)
    if _read_marker(root, ref):
        return archive
    with cache_entry_lock(images_dir / f"{key}.lock"):
        if _read_marker(root, ref):  # another process finished it while we waited
            return archive
        partial = images_dir / f"{key}.partial"
        _remove_tree(partial)
        partial.mkdir(parents=True)
        (partial / "recipe.json").write_text(json.dumps(inputs, indent=2, sort_keys=True, default=str) + "\n")
        started = time.monotonic()
        build(partial, ref, partial / LOG_NAME)
        _finish(partial, root, ref, time.monotonic() - started)
    return archive


def _finish(partial: Path, root: Path, ref: str, seconds: float) -> None:
    archive = partial / ARCHIVE_NAME
    if not archive.is_file():
        raise ProvisioningError(f"building {ref} produced no archive", f"see {partial / LOG_NAME}")
    marker = {"ref": ref, "archive_bytes": archive.stat().st_size, "build_seconds": round(seconds, 1)}
    (partial / MARKER_NAME).write_text(json.dumps(marker) + "\n")
    _remove_tree(root)  # a stale, unmarked directory from an older layout
    partial.rename(root)


# --- rootfs -> docker-archive --------------------------------------------------------


def _buildah(storage: Path) -> list[str]:
    # vfs: plain directories, so no overlay mounts can be left behind; storage is per build
    # and deleted after the commit, so nothing lands in /var/lib/containers.
    return [
        _require("buildah", "buildah"),
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
    diff_id = _sha256_file(layer)
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
        container = _run(
            [*buildah, "from", *policy, "scratch"], log, "buildah from", fix, env=env, capture=True
        ).strip()
        mount = _run([*buildah, "mount", container], log, "buildah mount", fix, env=env, capture=True).strip()
        # cp -a keeps owners, modes, hard links and xattrs, which `buildah copy` would reset.
        _run(["cp", "-a", f"{rootfs}/.", mount], log, "copying the rootfs into the image", fix)
        _run([*buildah, "umount", container], log, "buildah umount", fix, env=env)
        _run(
            [*buildah, "config", *buildah_config_args(config), container], log, "buildah config", fix, env=env
        )
        # --rm removes the working container once the archive is written.
        target = f"docker-archive:{out}:{ref}"
        commit = [*buildah, "commit", "--rm", "--format", "docker", *policy, container, target]
        _run(commit, log, "buildah commit", fix, env=env)
    finally:
        _remove_tree(storage)


# --- pause ---------------------------------------------------------------------------


def _gcc_version() -> str:
    gcc = _require("gcc", "gcc libc6-dev")
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
            _run(
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
            out = _run(
                [str(binary), "-v"], log, "running the pause binary", "see the compiler output", capture=True
            )
            if PAUSE_VERSION not in out:
                raise ProvisioningError(f"pause -v printed {out.strip()!r}", f"see {log}")
            config = ImageConfig(entrypoint=("/pause",), user=PAUSE_USER)
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            _remove_tree(rootfs)

    return _cached_build(cache_dir, "pause", PAUSE_VERSION, inputs, build)


# --- a static binary -------------------------------------------------------------------


def _check_static(binary: Path) -> None:
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


def _write_minimal_etc(rootfs: Path, user: str, chown: bool = True) -> None:
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


def binary_image(
    cache_dir: Path, name: str, version: str, binary: Path, entrypoint: list[str], *, user: str = NONROOT_USER
) -> ImageArchive:
    """An image holding one static binary at `entrypoint[0]` (or /usr/local/bin/<name> for a bare name)."""
    install_path = binary_install_path(entrypoint)
    if not re.fullmatch(r"\d+(:\d+)?", user):
        raise UsageError(f"image user {user!r} is not numeric", "use uid or uid:gid, e.g. 65532:65532")
    _check_static(binary)
    inputs = {
        "kind": "binary",
        "binary_sha256": _sha256_file(binary),
        "install_path": install_path,
        "entrypoint": list(entrypoint),
        "user": user,
    }

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}"):
            rootfs = work / "rootfs"
            _write_minimal_etc(rootfs, user)
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
            _remove_tree(rootfs)

    return _cached_build(cache_dir, name, version, inputs, build)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- Ray -----------------------------------------------------------------------------


def ray_image(cache_dir: Path, ray_version: str, debian_suite: str = "bookworm") -> ImageArchive:
    if not _SUITE.match(debian_suite):
        raise UsageError(f"{debian_suite!r} is not a Debian suite name", "use e.g. bookworm or trixie")
    image_ref("ray", ray_version)  # validate before a minute of debootstrap
    config = ray_image_config(ray_version)
    inputs = {
        "kind": "ray",
        "recipe": RAY_RECIPE_REVISION,
        "ray": ray_version,
        "suite": debian_suite,
        "mirror": DEBIAN_MIRROR,
        "packages": list(RAY_PACKAGES),
        "pip": [_ray_requirement(ray_version), *RAY_EXTRA_REQUIREMENTS],
        "venv": RAY_VENV,
        "config": buildah_config_args(config),
    }

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}") as line:
            rootfs = work / "rootfs"
            line.update("debootstrap")
            _debootstrap(rootfs, debian_suite, log)
            line.update(f"pip install ray {ray_version}")
            _install_ray(rootfs, ray_version, log)
            line.update("slimming")
            slim_rootfs(rootfs)
            line.update("checking the rootfs")
            _verify_ray_rootfs(rootfs, config, ray_version, log)
            _clean_runtime_leftovers(rootfs)
            line.update("packing")
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            _remove_tree(rootfs)

    return _cached_build(cache_dir, "ray", ray_version, inputs, build)


def _ray_requirement(ray_version: str) -> str:
    return f"ray[default,serve]=={ray_version}"


def _debootstrap(rootfs: Path, suite: str, log: Path, packages: Sequence[str] = RAY_PACKAGES) -> None:
    _require("debootstrap", "debootstrap")
    # Its own mount namespace: debootstrap mounts /proc and /sys inside the target, and an
    # interrupted run must not leave them mounted under the cache directory.
    cmd = [_require("unshare", "util-linux"), "--mount", "--propagation", "private"]
    cmd += debootstrap_command(suite, rootfs, DEBIAN_MIRROR, packages)
    _run(cmd, log, f"debootstrap {suite}", f"check that {DEBIAN_MIRROR} is reachable and serves {suite}")


def _install_ray(rootfs: Path, ray_version: str, log: Path) -> None:
    uid, _, gid = RAY_USER.partition(":")
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}
    fix = "see the log"
    useradd = ["useradd", "--uid", uid, "--gid", gid, "--create-home", "--home-dir", RAY_HOME]
    _chroot(rootfs, [*useradd, "--shell", "/bin/bash", "ray"], log, "creating the ray user", fix, env=env)
    _chroot(rootfs, ["python3", "-m", "venv", RAY_VENV], log, "creating the Ray venv", fix, env=env)
    # A login shell (`bash -lc`, as KubeRay's autoscaler-v2-overwrite-cmd sample runs) reads
    # Debian's /etc/profile, which sets PATH anew: keep the venv on it, as the image's ENV does.
    (rootfs / "etc/profile.d/ray-venv.sh").write_text(f'export PATH="{RAY_VENV}/bin:$PATH"\n')
    requirement = _ray_requirement(ray_version)
    with _build_only_files(rootfs) as ca_in_chroot:
        _chroot(
            rootfs,
            [f"{RAY_VENV}/bin/pip", "install", "--retries", "5", requirement, *RAY_EXTRA_REQUIREMENTS],
            log,
            f"pip install {requirement}",
            "check that PyPI (or PIP_INDEX_URL) is reachable and serves this Ray version for "
            "this Debian suite's Python",
            env=pip_env(os.environ, ca_in_chroot),
        )


@contextmanager
def _build_only_files(rootfs: Path) -> Iterator[str | None]:
    """The host's CA bundle and resolver config, present in the chroot only while pip runs.

    The bundle holds the CA of this host's TLS-intercepting proxy; it must never ship.
    """
    ca = host_ca_bundle(os.environ)
    ca_in_chroot = BUILD_CA_PATH if ca else None
    resolv = rootfs / "etc/resolv.conf"
    try:
        if ca and ca_in_chroot:
            shutil.copyfile(ca, rootfs / ca_in_chroot.lstrip("/"))
        if Path("/etc/resolv.conf").exists():
            resolv.unlink(missing_ok=True)
            shutil.copyfile("/etc/resolv.conf", resolv)
        yield ca_in_chroot
    finally:
        if ca_in_chroot:
            (rootfs / ca_in_chroot.lstrip("/")).unlink(missing_ok=True)
        resolv.unlink(missing_ok=True)


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
            _remove_any(path)
    # The kubelet mounts its own /etc/hosts into pods; this one makes `localhost` resolve
    # anywhere else (ctr run, chroot checks), which KubeRay's wget probes rely on.
    (rootfs / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")


def _clean_runtime_leftovers(rootfs: Path) -> None:
    # The check run may leave caches; /dev is provided by the runtime, like in Docker's debian images.
    for pattern in ("tmp/*", f"{RAY_HOME.lstrip('/')}/.cache", "root/.cache", "dev/*"):
        for path in rootfs.glob(pattern):
            _remove_any(path)


def _remove_any(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # already gone through a symlinked directory
        return
    if stat.S_ISDIR(mode):
        _remove_tree(path)
    else:
        path.unlink()


def _verify_ray_rootfs(rootfs: Path, config: ImageConfig, ray_version: str, log: Path) -> None:
    """Run what KubeRay's pods run, as the image's user and with the image's environment."""
    if (rootfs / BUILD_CA_PATH.lstrip("/")).exists():
        raise ProvisioningError("the build CA bundle is still in the Ray rootfs", f"see {log}")
    env = {item.split("=", 1)[0]: item.split("=", 1)[1] for item in config.env}
    script = (
        "set -e; for tool in bash grep wget python python3 ray awk ps; do command -v $tool; done; "
        "bash -lc 'command -v ray'; "
        "getent hosts localhost; "
        "python --version; ray --version; "
        # The extras KubeRay's pods use: the dashboard (probes, job submission) and Serve.
        "python -c 'import ray.dashboard.modules.job.sdk, ray.serve'; "
        "python -c 'import ray.autoscaler._private.kuberay.run_autoscaler'"
    )
    out = _chroot(
        rootfs,
        ["/bin/bash", "-c", script],
        log,
        "checking the Ray rootfs",
        "see the log: a tool KubeRay's pods call is missing",
        env=env,
        user=config.user,
        capture=True,
    )
    if f"version {ray_version}" not in out:
        raise ProvisioningError(f"`ray --version` in the image did not report {ray_version}", f"see {log}")


# --- Redis ---------------------------------------------------------------------------


def redis_image(cache_dir: Path, debian_suite: str = "bookworm") -> ImageArchive:
    """Redis for GCS fault tolerance: Debian's redis-server package on a minbase rootfs.

    Tagged by the Debian suite (its Redis is what that suite ships); the exact Redis
    version is a label of the image and is checked when it is built.
    """
    if not _SUITE.match(debian_suite):
        raise UsageError(f"{debian_suite!r} is not a Debian suite name", "use e.g. bookworm or trixie")
    inputs = {
        "kind": "redis",
        "recipe": REDIS_RECIPE_REVISION,
        "suite": debian_suite,
        "mirror": DEBIAN_MIRROR,
        "packages": list(REDIS_PACKAGES),
    }

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}") as line:
            rootfs = work / "rootfs"
            line.update("debootstrap")
            _debootstrap(rootfs, debian_suite, log, REDIS_PACKAGES)
            slim_rootfs(rootfs)
            user = _passwd_ids(rootfs, "redis")
            data = rootfs / REDIS_DATA.lstrip("/")
            data.mkdir(parents=True, exist_ok=True)
            os.chown(data, *(int(part) for part in user.split(":")))
            line.update("checking the rootfs")
            version = _redis_version(rootfs, user, log)
            config = ImageConfig(
                entrypoint=("/usr/bin/redis-server",),
                env=(f"PATH={SYSTEM_PATH}",),
                workdir=REDIS_DATA,
                user=user,
                labels={"org.opencontainers.image.version": version},
            )
            line.update("packing")
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            _remove_tree(rootfs)

    return _cached_build(cache_dir, "redis", debian_suite, inputs, build)


def _passwd_ids(rootfs: Path, name: str) -> str:
    """`uid:gid` of a user the packages created: numeric, so the kubelet can check runAsNonRoot."""
    for line in (rootfs / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return f"{fields[2]}:{fields[3]}"
    raise ProvisioningError(f"the {name} user is missing from the image", "check the package list")


def _redis_version(rootfs: Path, user: str, log: Path) -> str:
    out = _chroot(
        rootfs,
        ["/usr/bin/redis-server", "--version"],
        log,
        "checking redis-server in the rootfs",
        "see the log",
        env={"PATH": SYSTEM_PATH},
        user=user,
        capture=True,
    )
    match = re.search(r"\bv=(\d+\.\d+\.\d+)", out)
    if not match:
        raise ProvisioningError(f"`redis-server --version` printed no version: {out[:200]}", f"see {log}")
    return match.group(1)


# --- import --------------------------------------------------------------------------


def import_image(
    archive: ImageArchive, ctr: Path, address: Path, namespace: str = "k8s.io", *, pin: bool = True
) -> None:
    """Import into containerd and check the image is there under `archive.ref`.

    `pin` labels the image io.cri-containerd.pinned=pinned: the CRI plugin reports it as
    pinned and the kubelet's image GC never removes it, since nothing can be pulled again.
    """
    log = archive.path.with_name("import.log")
    log.write_text("")
    fix = f"check that containerd is running and listening on {address}"
    ctr_images = [str(ctr), "--address", str(address), "-n", namespace, "images", "ls", "-q"]
    same_build = f'name=={archive.ref},labels."{ARCHIVE_LABEL}"=={archive_id(archive)}'
    if archive.ref in _run([*ctr_images, same_build], log, "ctr images ls", fix, capture=True).split():
        return  # this very build is already there; importing 500 MB again would change nothing
    with progress(f"importing {archive.ref} into containerd"):
        _run(import_command(archive, ctr, address, namespace, pin), log, f"ctr import of {archive.ref}", fix)
        listed = _run(
            [str(ctr), "--address", str(address), "-n", namespace, "images", "ls", "-q"],
            log,
            "ctr images ls",
            fix,
            capture=True,
        )
    if archive.ref not in listed.split():
        raise ProvisioningError(
            f"ctr imported {archive.path} but no image is named {archive.ref}",
            f"compare the archive's manifest.json RepoTags with `ctr -n {namespace} images ls`; log: {log}",
        )


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
    _check_static(BUSYBOX)
    inputs = {
        "kind": "toolbox",
        "busybox": busybox_version,
        "busybox_sha256": _sha256_file(BUSYBOX),
        "kubectl_sha256": _sha256_file(kubectl),
    }
    tag = re.sub(r"[^A-Za-z0-9_.-]", "-", busybox_version)

    def build(work: Path, ref: str, log: Path) -> None:
        with progress(f"building image {ref}"):
            rootfs = work / "rootfs"
            _write_minimal_etc(rootfs, "0")
            bin_dir = _install_busybox(rootfs)
            shutil.copyfile(kubectl, bin_dir / "kubectl")
            (bin_dir / "kubectl").chmod(0o755)
            config = ImageConfig(entrypoint=("/bin/sh",), env=("PATH=/bin",), user="0:0", labels={})
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            _remove_tree(rootfs)

    return _cached_build(cache_dir, "toolbox", tag, inputs, build)


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


__all__ = [
    "ImageArchive",
    "binary_image",
    "import_image",
    "pack_rootfs_tar",
    "pause_image",
    "ray_image",
    "redis_image",
    "toolbox_image",
]
