"""KubeRay checkouts for the tests that run `--kuberay-source`: the one a user names, or the
ray-operator Go module of a release laid out as one. None is ever committed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conformance.install import kuberay

CHECKOUT_ENV = "KRC_KUBERAY_CHECKOUT"
NO_CHECKOUT = f"{CHECKOUT_ENV} names no KubeRay checkout (e.g. one at tag ray-operator/v1.7.0)"
# The newest ray-operator release the Go module proxy serves here (it refuses 1.7.0's source).
OLDER_MODULE = "v1.6.2"


def named_checkout() -> Path | None:
    """The KubeRay checkout KRC_KUBERAY_CHECKOUT names, or None."""
    path = os.environ.get(CHECKOUT_ENV, "")
    return Path(path) if path else None


def module_as_checkout(version: str, where: Path) -> Path:
    """The ray-operator module at `version` laid out as a checkout under `where`: ray-operator/
    only, no .git, no chart (so it deploys with kustomize). The module cache's files are
    read-only; the copy's are made writable."""
    checkout = where / f"kuberay-{version}"
    shutil.copytree(kuberay.module_dir(version), checkout / "ray-operator")
    for path in [checkout, *checkout.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return checkout
