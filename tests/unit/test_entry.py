"""A harness that cannot even import its CLI exits 2 (environment), never 1 (not conformant)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BROKEN_CLI = "raise ImportError('cannot import name selection')\n"


def test_an_install_whose_cli_does_not_import_exits_2_in_one_line(tmp_path: Path) -> None:
    package = tmp_path / "conformance"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(BROKEN_CLI)
    (package / "entry.py").write_text((Path(__file__).parents[2] / "conformance" / "entry.py").read_text())
    done = subprocess.run(
        [sys.executable, "-c", "from conformance.entry import main; main()"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "cannot start (ImportError: cannot import name selection" in line and "reinstall" in line


def test_the_console_script_goes_through_the_guard() -> None:
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert 'kuberay-conformance = "conformance.entry:main"' in pyproject
