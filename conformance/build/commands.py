"""Running the programs a build needs, each command's output streamed into the build's log.

Shared by the image recipes and the kind node image: a failure is a ProvisioningError that names
what failed, the last line of the log, the fix and where the whole log is.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from conformance.errors import ProvisioningError


def require(program: str, package: str) -> str:
    found = shutil.which(program)
    if not found:
        raise ProvisioningError(f"{program} is not installed", f"install it: apt-get install -y {package}")
    return found


def tail(log: Path, lines: int = 1) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def run(
    argv: Sequence[str],
    log: Path,
    what: str,
    fix: str,
    *,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
) -> str:
    """Run `argv` with its output streamed into the build log; raise on failure.

    With `capture`, stdout is returned (and copied into the log afterwards) instead.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        sink.write(f"[{time.strftime('%H:%M:%S')}] $ {' '.join(argv)}\n")
        sink.flush()
        try:
            done = subprocess.run(
                list(argv),
                stdout=subprocess.PIPE if capture else sink,
                stderr=sink,
                text=True,
                env=dict(env) if env else None,
                check=False,
            )
        except FileNotFoundError as exc:
            raise ProvisioningError(f"{what}: {argv[0]} is not installed", fix or "install it") from exc
        sink.write(done.stdout or "")
    if done.returncode != 0:
        raise ProvisioningError(
            f"{what} failed (exit {done.returncode}): {tail(log)}",
            f"{fix}; full log: {log}" if fix else f"full log: {log}",
        )
    return done.stdout or ""


def chroot(
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
    cmd = [require("unshare", "util-linux"), "--mount", "--pid", "--fork", f"--mount-proc={rootfs}/proc"]
    cmd += [require("chroot", "coreutils")]
    if user:
        cmd += [f"--userspec={user}"]
    return run([*cmd, str(rootfs), *argv], log, what, fix, env=env, capture=capture)
