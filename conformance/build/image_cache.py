"""Container images built on this machine: their names, their config, and the cache that keeps them.

Nothing can be pulled where the local provider runs, so every image a cluster runs (the pod
sandbox, the KubeRay operator, Ray, add-ons) is built here as a directory tree and turned into a
docker-archive tar (image_pack.py); the recipes are ray_images.py and small_images.py.

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
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance.build.cache import cache_entry_lock
from conformance.build.rootfs import remove_tree
from conformance.errors import ProvisioningError, UsageError

RECIPE_REVISION = "1"  # bump when the way images are built changes, to invalidate every cached image
REGISTRY = "localhost/kuberay-conformance"
ARCHIVE_NAME = "image.tar"
MARKER_NAME = "complete"
LOG_NAME = "build.log"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAME_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


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


def env_value(config: ImageConfig, name: str) -> str:
    prefix = name + "="
    return next((item[len(prefix) :] for item in config.env if item.startswith(prefix)), "")


def archive_id(archive: ImageArchive) -> str:
    """Which build an imported image came from: its cache entry's name (recipe hash included)."""
    return archive.path.parent.name


def _read_marker(root: Path, ref: str) -> bool:
    marker = root / MARKER_NAME
    if not (marker.is_file() and (root / ARCHIVE_NAME).is_file()):
        return False
    try:
        return json.loads(marker.read_text()).get("ref") == ref
    except (OSError, ValueError):
        return False


Builder = Callable[[Path, str, Path], None]  # (work dir, ref, log) -> writes work/ARCHIVE_NAME


def cached_build(
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
        remove_tree(partial)
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
    remove_tree(root)  # a stale, unmarked directory from an older layout
    partial.rename(root)
