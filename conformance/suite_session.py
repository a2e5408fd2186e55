"""How every pytest session of the suites starts (`run`, `list`): the same root, the same
configuration, whatever directory the command is run in."""

from __future__ import annotations

from pathlib import Path

SUITES = Path(__file__).resolve().parent / "suites"


def args() -> list[str]:
    """The repository (or the installed package's parent) as rootdir, so check ids read
    conformance/suites/test_x.py::name; the suites' own pytest.ini; and the suites' folder by
    path. Never the configuration or the conftest files of the working directory, which may be a
    user's pytest project: pytest reads the working directory's test*/conftest.py when no argument
    is an existing path (a module name given with --pyargs is not), and its ini file without -c."""
    return [f"--rootdir={SUITES.parent.parent}", "-c", str(SUITES / "pytest.ini"), str(SUITES),
            "-p", "no:cacheprovider"]  # fmt: skip
