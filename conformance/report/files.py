"""Writing a run's files whole or not at all, and saying which one could not be written.

A report file is written beside its final name and renamed over it, so a reader never sees half a
file. When the write fails (a full disk, a folder gone read-only) the partial file is removed and
the error names the file and the fix: the results measured so far are never blamed on KubeRay,
and a full disk is not a "harness bug".
"""

from __future__ import annotations

from pathlib import Path

from conformance.errors import HarnessError


class ReportWriteError(HarnessError):
    """A file of the run's report could not be written."""


def write_atomically(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportWriteError(
            f"could not write {path}: {exc.strerror or exc}",
            f"free space on (or make writable) the filesystem of {path.parent}, then rebuild the report "
            f"with `kuberay-conformance report {_run_dir(path)}`",
        ) from exc
    return path


def _run_dir(path: Path) -> Path:
    """The run folder a report file belongs to (timelines/ sit one level down)."""
    return path.parent.parent if path.parent.name == "timelines" else path.parent
