"""The settings table of docs/profiles.md equals the code: every KRC_ variable read anywhere, every
profile key of the schema with its default; and the tables of README.md and docs/*.md are well
formed (header, then separator)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from conformance.errors import UsageError
from conformance.profiles.schema import ProfileDocument
from conformance.providers.local import layout, network

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DOC = ROOT / "docs" / "profiles.md"
SETTINGS = SETTINGS_DOC.read_text()
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KRC = re.compile(r"\bKRC_[A-Z0-9_]+\b")


def _settings_rows() -> dict[str, tuple[str, str]]:
    """setting -> (kind, default) from the table under `## Settings` of docs/profiles.md."""
    section = SETTINGS.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _read_by_code() -> set[str]:
    """What a user may set: read by the harness, the benchmarks or the tests' shared conftest.
    (tests/report passes KRC_REPORT_* to its own child runs; those are no settings.)"""
    paths = [
        *(ROOT / "conformance").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        ROOT / "tests/conftest.py",
    ]
    return {name for path in paths for name in KRC.findall(path.read_text())}


def test_every_krc_variable_of_the_code_is_in_the_table_and_no_other() -> None:
    documented = {name for name, (kind, _) in _settings_rows().items() if kind.startswith("env")}
    in_code = _read_by_code()
    assert in_code - documented == set(), "add these to the Settings table of docs/profiles.md"
    assert documented - in_code == set(), "the code reads none of these: remove them from the table"


def _profile_keys(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """Every leaf key of the schema -> its default as the table writes it ("required" if none)."""
    keys = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _profile_keys(annotation, f"{prefix}{name}.")
            continue
        if field.is_required():
            keys[prefix + name] = "required"
        else:
            default = field.get_default(call_default_factory=True)
            assert default is not PydanticUndefined
            keys[prefix + name] = f"`{default:g}`" if isinstance(default, float) else f"`{default}`"
    return keys


def test_every_profile_key_is_in_the_table_with_its_default() -> None:
    documented = {name: default for name, (kind, default) in _settings_rows().items() if kind == "profile"}
    assert documented == _profile_keys(ProfileDocument)


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_table_has_its_separator_right_after_the_header(path: Path) -> None:
    lines = path.read_text().splitlines()
    where = path.relative_to(ROOT)
    for number, line in enumerate(lines):
        starts = line.startswith("|") and (number == 0 or not lines[number - 1].startswith("|"))
        if starts:
            assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[number + 1]), f"{where} line {number + 2}"
            assert not any(re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", rest) for rest in _table(lines, number + 2))


def _table(lines: list[str], start: int) -> list[str]:
    out = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        out.append(line)
    return out


def test_an_overlapping_host_route_names_the_ranges_and_a_fix_that_exists() -> None:
    routes = [r for r in network._host_routes() if r.prefixlen >= 8]
    if not routes:
        pytest.skip("this host has no routed network to overlap")
    theirs = routes[0]
    clash = layout.Network(netns="krc-test-no-such-netns", link_cidr=str(next(theirs.subnets(new_prefix=30))))
    with pytest.raises(UsageError) as caught:
        network.check_ranges_free(clash)
    line = caught.value.one_line()
    assert "\n" not in line and "KRC_" not in line
    assert str(ipaddress.ip_network(clash.link_cidr)) in line and "ip route" in caught.value.fix
