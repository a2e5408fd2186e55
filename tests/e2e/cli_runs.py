"""`kuberay-conformance run` as a user types it, from the project's root, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """`kuberay-conformance run ARGS`; the exit code is the caller's to assert."""
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
