"""Build upstream Go programs from the module proxy, one build module per tool.

`go install module/cmd@version` refuses modules whose go.mod has replace directives
(Kubernetes, Traefik), so each tool gets a small main module of our own that requires
the upstream at its pinned version and carries over the upstream's replace directives:
versioned ones as they are, Kubernetes' ./staging/src paths as the tagged staging
modules. Finished binaries are cached under a directory keyed by the tool's pin and the
recipe itself, so a warm machine never rebuilds and a changed pin rebuilds only its tool.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from conformance.build.pins import GoTool
from conformance.errors import ProvisioningError
from conformance.progress import progress

from .cache import cache_entry_lock

RECIPE_REVISION = "1"  # bump when the way we build changes, to invalidate every cached tool

_REPLACE_LINE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?:\s+(\S+))?\s+=>\s+(\S+)(?:\s+(\S+))?\s*$")


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # A toolchain download would need the internet; the local Go must do.
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    return env


def _run_go(args: list[str], cwd: Path, env: dict[str, str], log: Path | None = None) -> str:
    try:
        if log is None:
            done = subprocess.run(
                ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
            )
            output = done.stdout + done.stderr
        else:
            with log.open("a") as sink:
                sink.write(f"$ go {' '.join(args)}\n")
                sink.flush()
                done = subprocess.run(
                    ["go", *args], cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False
                )
            output = log.read_text()[-4000:]
    except FileNotFoundError as exc:
        raise ProvisioningError(
            "the Go toolchain is not installed", "install Go 1.26 or newer and put `go` on PATH"
        ) from exc
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["go", *args], output=output)
    return output


def upstream_gomod(tool: GoTool, env: dict[str, str], workdir: Path) -> str:
    """The upstream go.mod at the pinned version, as the module proxy serves it."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        out = _run_go(["mod", "download", "-json", f"{tool.module}@{tool.version}"], workdir, env)
    except subprocess.CalledProcessError as exc:
        proxy = env.get("GOPROXY") or "the default GOPROXY"
        raise ProvisioningError(
            f"the Go module proxy ({proxy}) does not serve {tool.module}@{tool.version}",
            "check GOPROXY/network access, or change the pin in conformance/build/pins.py"
            f" (go said: {_last_line(exc.output)})",
        ) from exc
    info = json.loads(out[out.index("{") :])
    return Path(info["GoMod"]).read_text()


def module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds the files of `module@version` (fetched from the proxy if
    missing): manifests and CRDs that ship inside a Go module are read from there."""
    with tempfile.TemporaryDirectory() as outside_any_module:
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            cwd=outside_any_module,
            env=go_env(),
            capture_output=True,
            text=True,
            check=False,
        )
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        info = {"Error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    if info.get("Error") or not info.get("Dir"):
        said = " ".join(str(info.get("Error", "no Dir in its answer")).split())  # go's error spans lines
        raise ProvisioningError(
            f"the Go module proxy does not serve {module}@{version} ({said})",
            f"pin a version whose zip it serves (`go mod download -json {module}@vX.Y.Z`"
            " prints a Dir) in conformance/build/pins.py, or set GOPROXY to a proxy that has it",
        )
    return Path(info["Dir"])


def carried_replaces(upstream: str, staging_version: str) -> list[str]:
    """The replace directives a build module must copy from the upstream go.mod."""
    lines: list[str] = []
    in_block = False
    for raw in upstream.splitlines():
        text = raw.split("//", 1)[0].rstrip()
        if text.strip() == "replace (":
            in_block = True
            continue
        if in_block and text.strip() == ")":
            in_block = False
            continue
        if not (in_block or text.lstrip().startswith("replace ")):
            continue
        match = _REPLACE_LINE.match(text)
        if not match:
            continue
        old, _old_version, new, new_version = match.groups()
        if new.startswith("./staging/") and staging_version:
            lines.append(f"replace {old} => {old} {staging_version}")
        elif new.startswith((".", "/")):
            # A sibling module of the same repository, tagged with the same version: the
            # require graph already pins it, and a local path cannot be followed from here.
            continue
        elif new_version:
            lines.append(f"replace {old} => {new} {new_version}")
    return lines


def carried_excludes(upstream: str) -> list[str]:
    """The upstream's exclude directives: only the main module's count, so ours must repeat them."""
    lines: list[str] = []
    in_block = False
    for raw in upstream.splitlines():
        text = raw.split("//", 1)[0].strip()
        if text == "exclude (":
            in_block = True
        elif in_block and text == ")":
            in_block = False
        elif in_block and text:
            lines.append(f"exclude {text}")
        elif text.startswith("exclude "):
            lines.append(text)
    return lines


def local_module_dir(module: str) -> str:
    return "./local/" + module.replace("/", "_")


def build_module(tool: GoTool, replaces: list[str], excludes: Sequence[str] = ()) -> str:
    parts = [f"module kuberay-conformance.local/build/{tool.name}", "", f"go {tool.go_directive}", ""]
    if tool.godebug:
        parts += [f"godebug {tool.godebug}", ""]
    parts += [f"require {tool.module} {tool.version}", ""]
    parts += replaces
    parts += [f"replace {module} => {local_module_dir(module)}" for module in sorted(tool.local_modules)]
    parts += list(excludes)
    return "\n".join(parts) + "\n"


def write_local_modules(tool: GoTool, staging: Path) -> None:
    for module, files in tool.local_modules.items():
        target = staging / local_module_dir(module)
        target.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (target / name).write_text(content)


def recipe_key(tool: GoTool) -> str:
    go_version = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=False
    ).stdout.strip()
    # Only what changes the binaries keys the cache; how a version was chosen does not.
    recipe = {k: v for k, v in asdict(tool).items() if k != "fallback_to_served"}
    # Fields added after a tool was first cached key nothing while empty, so adding them
    # does not invalidate every cached build.
    if not recipe["local_modules"]:
        del recipe["local_modules"]
    blob = json.dumps({"tool": recipe, "go": go_version, "rev": RECIPE_REVISION}, sort_keys=True)
    return f"{tool.name}-{tool.version}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def cached_bin_dir(tool: GoTool, cache_dir: Path) -> Path:
    return cache_dir / "go" / recipe_key(tool) / "bin"


def is_built(tool: GoTool, cache_dir: Path) -> bool:
    bin_dir = cached_bin_dir(tool, cache_dir)
    return (bin_dir.parent / "complete").exists() and all((bin_dir / b).exists() for b in tool.binaries)


def ensure_built(tool: GoTool, cache_dir: Path) -> Path:
    """Return the directory holding the tool's binaries, building them if the cache misses."""
    bin_dir = cached_bin_dir(tool, cache_dir)
    if is_built(tool, cache_dir):
        return bin_dir

    def build(staging: Path, env: dict[str, str], log: Path, line: object) -> None:
        upstream = upstream_gomod(tool, env, staging)
        replaces = carried_replaces(upstream, tool.staging_version)
        gomod = build_module(tool, replaces, carried_excludes(upstream))
        (staging / "go.mod").write_text(gomod)
        write_local_modules(tool, staging)
        for index, package in enumerate(tool.packages, start=1):
            name = tool.binary_name(package)
            line.update(f"{name}, {index}/{len(tool.packages)}")  # type: ignore[attr-defined]
            args = ["build", "-trimpath", "-o", str(staging / "bin" / name)]
            if tool.tags:
                args += ["-tags", ",".join(tool.tags)]
            if tool.ldflags:
                args += ["-ldflags", " ".join(tool.ldflags)]
            try:
                _run_go([*args, package], staging, env, log)
            except subprocess.CalledProcessError as exc:
                raise ProvisioningError(
                    f"building {name} ({tool.module}@{tool.version}) failed: {_last_line(exc.output)}",
                    f"see the full log in {log}",
                ) from exc

    env = go_env()
    env["CGO_ENABLED"] = "1" if tool.cgo else "0"
    env.update(tool.extra_env)
    what = f"building {tool.name} {tool.version} from the Go module proxy"
    return _cached_build(bin_dir.parent, tool.version, env, what, build)


def tree_key(name: str, content_sha256: str) -> str:
    """The cache directory name of a build from a source tree: its content and the Go version."""
    go_version = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=False
    ).stdout.strip()
    blob = json.dumps({"tree": content_sha256, "go": go_version, "rev": RECIPE_REVISION}, sort_keys=True)
    return f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def ensure_built_from_tree(
    name: str, module_root: Path, content_sha256: str, binary: str, cache_dir: Path
) -> Path:
    """Build the main package at the root of the Go module in `module_root` (a checkout), with
    its own go.mod and go.sum, read-only: a go.mod that needs changes is the checkout's error.
    Cached by the tree's content, so an unchanged tree is never rebuilt."""
    root = cache_dir / "go" / tree_key(name, content_sha256)
    if (root / "complete").exists() and (root / "bin" / binary).exists():
        return root / "bin"

    def build(staging: Path, env: dict[str, str], log: Path, line: object) -> None:
        line.update(binary)  # type: ignore[attr-defined]
        args = ["build", "-trimpath", "-o", str(staging / "bin" / binary), "."]
        try:
            _run_go(args, module_root, env, log)
        except subprocess.CalledProcessError as exc:
            raise ProvisioningError(
                f"go build in {module_root} failed: {_last_line(exc.output)}", f"see the full log in {log}"
            ) from exc

    env = go_env()
    # Never write into the checkout: a go.mod or go.sum that go would have to change is refused.
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    env["CGO_ENABLED"] = "0"  # a static binary for the single-binary image
    return _cached_build(root, content_sha256[:12], env, f"building {name} from {module_root}", build)


def _cached_build(root: Path, version: str, env: dict[str, str], what: str, build: object) -> Path:
    """Run `build(staging, env, log, progress_line)` into a fresh staging folder, then move it to `root`.

    Under a lock: two runs (or two test sessions) on one machine must not build into, and remove,
    the same staging folder; the second finds the first one's result.
    """
    with cache_entry_lock(root.with_name(root.name + ".lock")):
        if (root / "complete").exists():
            return root / "bin"
        return _build_unlocked(root, version, env, what, build)


def _build_unlocked(root: Path, version: str, env: dict[str, str], what: str, build: object) -> Path:
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    log = staging / "build.log"
    started = time.monotonic()
    with progress(what) as line:
        build(staging, env, log, line)  # type: ignore[operator]
    record = {"version": version, "build_seconds": round(time.monotonic() - started, 1)}
    (staging / "complete").write_text(json.dumps(record) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root / "bin"


def _last_line(output: str | None) -> str:
    lines = [line for line in (output or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def build_seconds(tool: GoTool, cache_dir: Path) -> float | None:
    """How long the cached build of `tool` took, as recorded when it was made."""
    marker = cached_bin_dir(tool, cache_dir).parent / "complete"
    try:
        return float(json.loads(marker.read_text())["build_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _zip_served(module: str, version: str, env: dict[str, str], workdir: Path) -> bool:
    try:
        out = _run_go(["mod", "download", "-json", f"{module}@{version}"], workdir, env)
    except subprocess.CalledProcessError as exc:
        out = exc.output or ""
    return '"Error"' not in out and '"Dir"' in out


def resolve(tool: GoTool, cache_dir: Path) -> GoTool:
    """The tool at its pin, or, if the pin allows it and the proxy serves no source for it, at the
    newest older release that is served. The answer is remembered in the cache, so a warm machine
    asks the proxy nothing."""
    if not tool.fallback_to_served:
        return tool
    memo = cache_dir / "go" / f"{tool.name}-{tool.version}.resolved"
    if memo.exists():
        resolved = replace(tool, version=memo.read_text().strip())
        if is_built(resolved, cache_dir):
            return resolved
    workdir = cache_dir / "go" / "resolve"
    workdir.mkdir(parents=True, exist_ok=True)
    env = go_env()
    for candidate in [tool.version, *_older_releases(tool, env, workdir)]:
        if _zip_served(tool.module, candidate, env, workdir):
            memo.write_text(candidate + "\n")
            return replace(tool, version=candidate)
    raise ProvisioningError(
        f"the Go module proxy serves no source of {tool.module} at {tool.version} or any older release",
        "check GOPROXY, or change the pin in conformance/build/pins.py",
    )


def previous_minor(tool: GoTool, cache_dir: Path) -> GoTool | None:
    """The tool at the newest release of the minor before its version that the proxy serves
    with a verifiable checksum, or None. Remembered in the cache like `resolve`."""
    memo = cache_dir / "go" / f"{tool.name}-{tool.version}.previous-minor"
    if memo.exists():
        remembered = memo.read_text().strip()
        return replace(tool, version=remembered) if remembered else None
    workdir = cache_dir / "go" / "resolve"
    workdir.mkdir(parents=True, exist_ok=True)
    env = go_env()
    served = next(
        (v for v in previous_minor_candidates(tool.version, _listed(tool, env, workdir))
         if _zip_served(tool.module, v, env, workdir)),
        "",
    )  # fmt: skip
    memo.write_text(served + "\n")
    return replace(tool, version=served) if served else None


def previous_minor_candidates(version: str, listed: list[str]) -> list[str]:
    """Releases of the minor before `version`, newest first: listed ones and patches up to 9."""
    major, minor, _ = _semver(version)
    if minor == 0:
        return []
    nearby = [f"v{major}.{minor - 1}.{p}" for p in range(10)]
    releases = {v for v in [*listed, *nearby] if "-" not in v and _semver(v)[:2] == (major, minor - 1)}
    return sorted(releases, key=_semver, reverse=True)


def _listed(tool: GoTool, env: dict[str, str], workdir: Path) -> list[str]:
    try:
        return _run_go(["list", "-m", "-versions", tool.module], workdir, env).split()[1:]
    except subprocess.CalledProcessError:
        return []


def _older_releases(tool: GoTool, env: dict[str, str], workdir: Path) -> list[str]:
    return older_candidates(tool.version, _listed(tool, env, workdir))


def older_candidates(pinned: str, listed: list[str]) -> list[str]:
    """Releases older than `pinned`, newest first: the proxy's list plus nearby versions it may
    not list (its list can lag behind the tags it serves)."""
    major, minor, patch = _semver(pinned)
    nearby = [f"v{major}.{minor}.{p}" for p in range(patch - 1, -1, -1)]
    nearby += [
        f"v{major}.{m}.{p}" for m in range(minor - 1, max(minor - 3, -1), -1) for p in range(5, -1, -1)
    ]
    releases = {v for v in [*listed, *nearby] if "-" not in v and _semver(v) < _semver(pinned)}
    return sorted(releases, key=_semver, reverse=True)


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])
