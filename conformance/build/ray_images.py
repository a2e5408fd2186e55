"""The images Ray's pods run, from Debian packages and PyPI: Ray itself and Redis (GCS fault
tolerance). KubeRay's generated pods need /bin/bash, the `ray` CLI, wget, grep and python."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from conformance.build.commands import chroot
from conformance.build.image_cache import (
    ARCHIVE_NAME,
    SYSTEM_PATH,
    ImageArchive,
    ImageConfig,
    cached_build,
    image_ref,
)
from conformance.build.image_pack import buildah_config_args, pack_rootfs
from conformance.build.rootfs import DEBIAN_MIRROR, debootstrap, remove_any, remove_tree, slim_rootfs
from conformance.errors import ProvisioningError, UsageError
from conformance.progress import progress

RAY_RECIPE_REVISION = "3"  # bump when only the Ray rootfs recipe changes
BUILD_CA_PATH = "/tmp/kuberay-conformance-build-ca.pem"  # inside the chroot, during pip only
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
            debootstrap(rootfs, debian_suite, log, RAY_PACKAGES)
            line.update(f"pip install ray {ray_version}")
            _install_ray(rootfs, ray_version, log)
            line.update("slimming")
            slim_rootfs(rootfs)
            line.update("checking the rootfs")
            _verify_ray_rootfs(rootfs, config, ray_version, log)
            _clean_runtime_leftovers(rootfs)
            line.update("packing")
            pack_rootfs(rootfs, ref, config, work / ARCHIVE_NAME, work=work, log=log)
            remove_tree(rootfs)

    return cached_build(cache_dir, "ray", ray_version, inputs, build)


def _ray_requirement(ray_version: str) -> str:
    return f"ray[default,serve]=={ray_version}"


def _install_ray(rootfs: Path, ray_version: str, log: Path) -> None:
    uid, _, gid = RAY_USER.partition(":")
    env = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}
    fix = "see the log"
    useradd = ["useradd", "--uid", uid, "--gid", gid, "--create-home", "--home-dir", RAY_HOME]
    chroot(rootfs, [*useradd, "--shell", "/bin/bash", "ray"], log, "creating the ray user", fix, env=env)
    chroot(rootfs, ["python3", "-m", "venv", RAY_VENV], log, "creating the Ray venv", fix, env=env)
    # A login shell (`bash -lc`, as KubeRay's autoscaler-v2-overwrite-cmd sample runs) reads
    # Debian's /etc/profile, which sets PATH anew: keep the venv on it, as the image's ENV does.
    (rootfs / "etc/profile.d/ray-venv.sh").write_text(f'export PATH="{RAY_VENV}/bin:$PATH"\n')
    requirement = _ray_requirement(ray_version)
    with _build_only_files(rootfs) as ca_in_chroot:
        chroot(
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


def _clean_runtime_leftovers(rootfs: Path) -> None:
    # The check run may leave caches; /dev is provided by the runtime, like in Docker's debian images.
    for pattern in ("tmp/*", f"{RAY_HOME.lstrip('/')}/.cache", "root/.cache", "dev/*"):
        for path in rootfs.glob(pattern):
            remove_any(path)


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
    out = chroot(
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
            debootstrap(rootfs, debian_suite, log, REDIS_PACKAGES)
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
            remove_tree(rootfs)

    return cached_build(cache_dir, "redis", debian_suite, inputs, build)


def _passwd_ids(rootfs: Path, name: str) -> str:
    """`uid:gid` of a user the packages created: numeric, so the kubelet can check runAsNonRoot."""
    for line in (rootfs / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return f"{fields[2]}:{fields[3]}"
    raise ProvisioningError(f"the {name} user is missing from the image", "check the package list")


def _redis_version(rootfs: Path, user: str, log: Path) -> str:
    out = chroot(
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
