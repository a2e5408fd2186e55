"""npm packages the report needs, installed on first use into the cache, keyed by version.

`<cache>/npm/<package>-<version>/node_modules/<package>/` (the cache is KRC_CACHE_DIR, by
default /var/cache/kuberay-conformance). Nothing of them is committed: the charting library
is read from there and inlined into index.html, and Allure Report 3 runs from there with node.
An install goes to a temporary folder that is renamed into place, so a cache entry is either
whole or absent, and two builds at once do not trip over each other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from conformance.build.cache import cache_dir
from conformance.errors import HarnessError

INSTALL_TIMEOUT_S = 600
COMPLETE = ".complete"


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str

    def folder(self, cache: Path | None = None) -> Path:
        return (cache or cache_dir()) / "npm" / f"{self.name.replace('/', '+')}-{self.version}"

    def root(self, cache: Path | None = None) -> Path:
        """Where the package itself lies once installed."""
        return self.folder(cache) / "node_modules" / self.name


# Pinned: a report must look the same whoever builds it. Chart.js draws the charts (small, and
# one UMD file); allure is Allure Report 3, which makes its single-file report without Java.
CHART_JS = NpmPackage("chart.js", "4.6.1")
CHART_JS_FILE = "dist/chart.umd.min.js"
ALLURE = NpmPackage("allure", "3.18.0")


def ensure(package: NpmPackage, cache: Path | None = None) -> Path:
    """The installed package's folder, installing it with npm if the cache lacks it."""
    folder = package.folder(cache)
    if (folder / COMPLETE).exists():
        return package.root(cache)
    npm = shutil.which("npm")
    if npm is None:
        raise HarnessError(
            f"npm is needed to fetch {package.name} {package.version} for the report",
            "install node and npm (`make host-deps` does)",
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        _npm_install(npm, package, staging)
        (staging / COMPLETE).write_text(f"{package.name}@{package.version}\n")
        try:
            staging.rename(folder)
        except OSError:
            if not (folder / COMPLETE).exists():  # not another build's finished install
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return package.root(cache)


def _npm_install(npm: str, package: NpmPackage, prefix: Path) -> None:
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(prefix),
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",  # nothing of these packages needs to run code at install time
            "--loglevel=error",
            f"{package.name}@{package.version}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=INSTALL_TIMEOUT_S,
        cwd=prefix,
    )
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise HarnessError(
            f"npm could not install {package.name}@{package.version}: {' / '.join(last)}",
            "check that the npm registry is reachable, or fill the cache from a machine that reaches it",
        )


def chart_js(cache: Path | None = None) -> str:
    """Chart.js as one script, without its source-map comment (a browser would try to fetch it)."""
    text = (ensure(CHART_JS, cache) / CHART_JS_FILE).read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("//# sourceMappingURL="))
