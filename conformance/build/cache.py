"""The build cache: where built binaries, images and npm packages are kept, keyed by version.

It outlives clusters and is shared by every provider and installer (and by parallel runs on one
machine, hence the per-entry lock). Go builds (gobuild.py) and images keep their recipe hashes in
the names of their entries, so a changed pin or recipe rebuilds exactly what it shapes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SYSTEM_CACHE_DIR = Path("/var/cache/kuberay-conformance")
CACHE_NAME = "kuberay-conformance"


def cache_dir() -> Path:
    """Where builds (Go tools, images, npm packages) are kept, keyed by version.

    KRC_CACHE_DIR wins. Otherwise root (the local provider, which needs root anyway) shares the
    machine-wide /var/cache; any other user (a CI runner, a laptop) gets its own cache directory,
    as the XDG base directory spec puts it, because /var/cache is not theirs to write."""
    if override := os.environ.get("KRC_CACHE_DIR"):
        return Path(override)
    if os.geteuid() == 0:
        return SYSTEM_CACHE_DIR
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / CACHE_NAME


@contextmanager
def cache_entry_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on one cache entry while it is built.

    Runs, test sessions and parallel workers on one machine share the cache: without it two
    builders of one entry would build into the same partial directory and remove each other's work.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
