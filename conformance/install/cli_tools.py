"""The helm and kustomize programs the installers run: one already on PATH when its version is one
the harness works with, else built at its pin from the Go module proxy into the user's cache.

A CI runner (setup-helm) or a laptop usually has Helm already; building it there would cost a
minute and needs Go. Only a major version the harness was tested with counts as compatible: Helm 4
changed `--wait`, so a Helm 4 on PATH is passed over for the pinned Helm 3.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from conformance.build import gobuild, pins
from conformance.build.cache import cache_dir
from conformance.errors import ProvisioningError


@dataclass(frozen=True)
class Compatible:
    """The versions of a program on PATH the harness accepts: this major, at least this minor."""

    version_argv: tuple[str, ...]
    major: int
    min_minor: int

    def accepts(self, version_text: str) -> bool:
        found = re.search(r"v?(\d+)\.(\d+)\.\d+", version_text)
        if found is None:
            return False
        major, minor = int(found.group(1)), int(found.group(2))
        return major == self.major and minor >= self.min_minor


# Helm 3.10 is the oldest release with every flag the installers pass and OCI charts without a
# feature flag; kustomize 5 is the major KubeRay's Makefile installs.
COMPATIBLE = {
    "helm": Compatible(("version", "--short"), major=3, min_minor=10),
    "kustomize": Compatible(("version",), major=5, min_minor=0),
}


def on_path(name: str) -> str | None:
    """The program `name` on PATH if its version is compatible, else None."""
    found = shutil.which(name)
    if found is None:
        return None
    try:
        done = subprocess.run(
            [found, *COMPATIBLE[name].version_argv], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 and COMPATIBLE[name].accepts(done.stdout + done.stderr) else None


def tool_binary(name: str) -> str:
    """`helm` or `kustomize`: a compatible one on PATH, else built at its pin when Go is here."""
    if found := on_path(name):
        return found
    if shutil.which("go"):
        return str(gobuild.ensure_built(pins.TOOLS[name], cache_dir()) / name)
    wanted = COMPATIBLE[name]
    span = f"{wanted.major}.x (at least {wanted.major}.{wanted.min_minor})"
    raise ProvisioningError(
        f"no {name} {span} on PATH, and no Go to build it",
        f"put {name} {pins.TOOLS[name].version} on PATH or install Go 1.26 (the harness then builds it)",
    )
