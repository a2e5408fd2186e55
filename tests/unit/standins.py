"""Recording stand-in programs on PATH, for tests of orchestration that runs external tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, *tools: str) -> Path:
    """Put `script` on an otherwise empty PATH under each name in `tools`; returns the call log
    (STANDIN_LOG) that the script is expected to append one JSON line per call to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text(script)
        (bin_dir / tool).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("STANDIN_LOG", str(log))
    return log


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
