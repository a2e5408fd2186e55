"""Search a run's files for secrets the checks saw, after the last file is written."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def search(run_dir: Path, secrets: Mapping[str, str]) -> dict[str, list[str]]:
    """For each owner (a check id) of a secret found in a file under `run_dir`: those files,
    relative to `run_dir`, sorted. `secrets` maps each secret's text to its owner."""
    found: dict[str, set[str]] = {}
    wanted = {secret.encode(): owner for secret, owner in secrets.items() if secret}
    if not wanted:
        return {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        for secret, owner in wanted.items():
            if secret in data:
                found.setdefault(owner, set()).add(str(path.relative_to(run_dir)))
    return {owner: sorted(files) for owner, files in found.items()}
