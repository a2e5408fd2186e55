"""A checkout of ray-project/kuberay as the KubeRay under test: what it is, and its operator built.

A checkout is any tree with `ray-operator/` (the operator's Go module) and, optionally,
`helm-chart/kuberay-operator/` (its chart); a `.git` folder is optional. What the harness knows
of the version under test comes from these files, never from tables of its own:

- the version: the chart's `appVersion` (or its `version`), else, for a tree without a chart,
  the image tag `config/default/kustomization.yaml` deploys, else a `ray-operator/vX.Y.Z` tag
  `git describe` finds; an explicit `--kuberay-version` wins over all of them;
- the ref the report prints ("built from source at <ref>"): `git describe` and the commit when
  `.git` exists, else the version and a hash of the tree's content;
- the binary's feature gates and their defaults: `ray-operator/pkg/features/features.go`.

The operator is built with `go build` in `ray-operator/` (its dependencies from the module
proxy), cached under a key made of the tree's content: an edited checkout rebuilds, an
unchanged one does not.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from conformance.build import gobuild, image_cache, small_images
from conformance.errors import ProvisioningError, UsageError

OPERATOR_MODULE = "github.com/ray-project/kuberay/ray-operator"
CHART = Path("helm-chart") / "kuberay-operator"
KUSTOMIZE_DEFAULT = Path("ray-operator") / "config" / "default"
FEATURES_GO = Path("ray-operator") / "pkg" / "features" / "features.go"
IMAGE_NAME = "kuberay-operator"
LAYOUT_CHART = "helm-chart"
LAYOUT_KUSTOMIZE = "kustomize"
# Folders that never shape the binary: VCS data and the Makefile's downloaded tools.
_UNHASHED = frozenset({".git", "bin"})
_SEMVER = re.compile(r"v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)")
_GATE_LINE = re.compile(r"^\s*(\w+)\s*:\s*\{\s*Default:\s*(true|false)\b", re.MULTILINE)
_GATE_MAP = re.compile(
    r"defaultFeatureGates\s*=\s*map\[[^\]]+\][^{]*\{(?P<body>.*?)^\}", re.DOTALL | re.MULTILINE
)


@dataclass(frozen=True)
class Checkout:
    root: Path

    @property
    def operator_dir(self) -> Path:
        return self.root / "ray-operator"

    @property
    def chart_dir(self) -> Path | None:
        chart = self.root / CHART
        return chart if (chart / "Chart.yaml").is_file() else None

    @property
    def layout(self) -> str:
        return LAYOUT_CHART if self.chart_dir else LAYOUT_KUSTOMIZE

    @property
    def has_git(self) -> bool:
        return (self.root / ".git").exists()


@dataclass(frozen=True)
class Provenance:
    """Where the KubeRay under test came from, as the report states it."""

    version: str  # vX.Y.Z: what version-gated checks compare with
    version_from: str  # which file (or flag) said so
    ref: str  # "built from source at <ref>"
    commit: str  # "" without .git
    describe: str  # `git describe --tags --always --dirty`, "" without .git
    tree_sha256: str  # of ray-operator/: keys the operator build
    layout: str  # helm-chart or kustomize

    def note(self) -> str:
        how = (
            "installed with its own Helm chart (helm-chart/kuberay-operator)"
            if self.layout == LAYOUT_CHART
            else "deployed with kustomize from ray-operator/config/default, as its `make deploy` does"
        )
        return f"KubeRay {self.version} built from source at {self.ref}, {how}"

    def as_json(self) -> dict[str, str]:
        return {
            "version": self.version,
            "version_from": self.version_from,
            "ref": self.ref,
            "commit": self.commit,
            "describe": self.describe,
            "tree_sha256": self.tree_sha256,
            "layout": self.layout,
        }


def open_checkout(path: str | Path) -> Checkout:
    """The checkout at `path`, or a UsageError saying why it is none."""
    root = Path(path).expanduser().resolve()
    fix = (
        "give --kuberay-source the root of a ray-project/kuberay checkout (the folder holding ray-operator/)"
    )
    if not root.is_dir():
        raise UsageError(f"--kuberay-source {path}: no such folder", fix)
    gomod = root / "ray-operator" / "go.mod"
    if not gomod.is_file():
        raise UsageError(f"--kuberay-source {path} is not a KubeRay checkout (no ray-operator/go.mod)", fix)
    first = next((line.split() for line in gomod.read_text().splitlines() if line.startswith("module ")), [])
    if first[1:] != [OPERATOR_MODULE]:
        raise UsageError(
            f"--kuberay-source {path}: ray-operator/go.mod declares {' '.join(first[1:]) or 'no module'}, "
            f"not {OPERATOR_MODULE}",
            fix,
        )
    checkout = Checkout(root)
    if (
        checkout.layout == LAYOUT_KUSTOMIZE
        and not (root / KUSTOMIZE_DEFAULT / "kustomization.yaml").is_file()
    ):
        raise UsageError(
            f"--kuberay-source {path} has neither helm-chart/kuberay-operator/Chart.yaml nor "
            "ray-operator/config/default/kustomization.yaml: nothing says how to install it",
            "check out a KubeRay tree that has its Helm chart or its kustomize config",
        )
    return checkout


# --- version and provenance (pure but for git) -----------------------------------------------


def normalized(text: str) -> str:
    """`1.7.0` or `v1.7.0` -> `v1.7.0`; "" when it is no version."""
    match = _SEMVER.fullmatch(str(text).strip())
    return f"v{match.group(1)}" if match else ""


def chart_version(chart_dir: Path) -> tuple[str, str]:
    """(version, where) from Chart.yaml: appVersion first (the app's), else the chart's version."""
    meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text()) or {}
    for key in ("appVersion", "version"):
        version = normalized(meta.get(key, ""))
        if version:
            return version, f"helm-chart/kuberay-operator/Chart.yaml {key}"
    return "", ""


def kustomize_version(root: Path) -> tuple[str, str]:
    """(version, where) from the image tag config/default deploys (`images: newTag`)."""
    kustomization = yaml.safe_load((root / KUSTOMIZE_DEFAULT / "kustomization.yaml").read_text()) or {}
    for image in kustomization.get("images") or []:
        version = normalized(image.get("newTag", ""))
        if version:
            return version, "ray-operator/config/default/kustomization.yaml images.newTag"
    return "", ""


def describe_version(describe: str) -> str:
    """`ray-operator/v1.7.0-3-gabc` -> "" (not on the tag), `ray-operator/v1.7.0` or `v1.7.0` -> v1.7.0."""
    tag = describe.removesuffix("-dirty").removeprefix("ray-operator/")
    return normalized(tag) if re.fullmatch(r"v\d+\.\d+\.\d+", tag) else ""


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-c", f"safe.directory={root}", "-C", str(root), *args],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def provenance(checkout: Checkout, explicit_version: str = "") -> Provenance:
    """What the report says about the checkout; UsageError when no version can be read."""
    root = checkout.root
    describe = _git(root, "describe", "--tags", "--always", "--dirty") if checkout.has_git else ""
    commit = _git(root, "rev-parse", "HEAD") if checkout.has_git else ""
    tree = tree_sha256(checkout.operator_dir)
    found: tuple[str, str] = ("", "")
    if explicit_version:
        found = (normalized(explicit_version), "--kuberay-version")
        if not found[0]:
            raise UsageError(f"--kuberay-version {explicit_version!r} is not a version", "write it as vX.Y.Z")
    for reader in (
        lambda: chart_version(checkout.chart_dir) if checkout.chart_dir else ("", ""),
        lambda: kustomize_version(root) if checkout.layout == LAYOUT_KUSTOMIZE else ("", ""),
        lambda: (describe_version(describe), "git describe") if describe else ("", ""),
    ):
        if found[0]:
            break
        found = reader()
    version, where = found
    if not version:
        raise UsageError(
            f"the KubeRay version of the checkout {root} cannot be read (no chart appVersion, no image "
            "tag in config/default, no release tag)",
            "name it with --kuberay-version vX.Y.Z",
        )
    if describe:
        ref = f"{describe} ({commit[:12]})" if commit else describe
    else:
        ref = f"{version}, tree {tree[:12]} (no .git)"
    return Provenance(version, where, ref, commit, describe, tree, checkout.layout)


def tree_sha256(directory: Path) -> str:
    """A hash of every file's path and content below `directory` (symlinks followed)."""
    digest = hashlib.sha256()
    for path in _files(directory):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _files(directory: Path) -> list[Path]:
    found: list[Path] = []
    for current, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _UNHASHED)
        found += [Path(current) / name for name in sorted(files)]
    return found


# --- the binary's feature gates (pure) -------------------------------------------------------


def binary_gate_defaults(features_go: str) -> dict[str, bool]:
    """defaultFeatureGates of pkg/features/features.go: gate -> its default, in the file's order."""
    block = _GATE_MAP.search(features_go)
    if not block:
        return {}
    return {name: value == "true" for name, value in _GATE_LINE.findall(block.group("body"))}


def checkout_gate_defaults(checkout: Checkout) -> dict[str, bool]:
    path = checkout.root / FEATURES_GO
    gates = binary_gate_defaults(path.read_text()) if path.is_file() else {}
    if not gates:
        raise UsageError(
            f"the checkout's {FEATURES_GO} has no defaultFeatureGates map the harness can read",
            "check out a KubeRay tree with pkg/features/features.go (every release since 1.1 has one)",
        )
    return gates


def check_gates(checkout: Checkout, gates: dict[str, bool]) -> None:
    """An unknown gate makes the operator exit at start: refuse it before anything is installed."""
    known = checkout_gate_defaults(checkout)
    unknown = sorted(set(gates) - set(known))
    if unknown:
        raise UsageError(
            f"the KubeRay of {checkout.root} has no feature gate {', '.join(unknown)} "
            f"(pkg/features/features.go)",
            f"remove it from the profile's kuberay.feature_gates; known: {', '.join(known)}",
        )


# --- building --------------------------------------------------------------------------------


def build_operator(checkout: Checkout, prov: Provenance, cache: Path) -> Path:
    """The operator binary of the checkout, built once per tree content."""
    try:
        bin_dir = gobuild.ensure_built_from_tree(
            "kuberay-source", checkout.operator_dir, prov.tree_sha256, IMAGE_NAME, cache
        )
    except ProvisioningError as exc:
        raise ProvisioningError(
            f"the operator of {checkout.root} does not build ({exc.cause})",
            f"fix the checkout so `go build .` succeeds in {checkout.operator_dir}; {exc.fix}",
        ) from exc
    return bin_dir / IMAGE_NAME


def image_tag(prov: Provenance) -> str:
    """`v1.7.0-src.<tree hash>`: a version the capabilities can read, and one tag per tree."""
    return f"{prov.version}-src.{prov.tree_sha256[:12]}"


def operator_image(checkout: Checkout, prov: Provenance, cache: Path) -> image_cache.ImageArchive:
    binary = build_operator(checkout, prov, cache)
    return small_images.binary_image(cache, IMAGE_NAME, image_tag(prov), binary, ["/manager"])
