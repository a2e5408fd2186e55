"""README.md is a front page: short, opening with the two set-up commands of a fresh machine; and
every relative link of README.md and docs/*.md leads to a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKDOWN = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 200
# [text](target) and [text]: target; the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text without code blocks and inline code, whose brackets are no links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _anchors(path: Path) -> set[str]:
    """The heading ids GitHub gives a Markdown file's headings (outside code blocks)."""
    ids: set[str] = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading[1].lower())
            ids.add(text.replace(" ", "-"))
    return ids


def _links(path: Path) -> list[str]:
    return [a or b for a, b in LINK.findall(_prose(path.read_text()))]


def test_readme_is_a_front_page_of_at_most_200_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_readme_starts_with_the_two_set_up_commands() -> None:
    """Its first code block, before any section, is `make conformance` then `make test`."""
    text = README.read_text()
    block = re.search(r"^```sh\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert block is not None, "README.md has no sh code block"
    before = text[: block.start()]
    assert not re.search(r"^##", before, re.MULTILINE), "a section comes before the set-up commands"
    commands = [line.split("#", 1)[0].strip() for line in block[1].splitlines()]
    assert [c for c in commands if c] == ["make conformance", "make test"]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_that_exists(path: Path) -> None:
    broken = []
    for target in _links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_check_sees_links() -> None:
    """The parser finds the README's links into docs/ (a parser that found none would pass above)."""
    targets = _links(README)
    assert "docs/checks.md" in targets
    assert any(t.startswith("docs/getting-started.md#") for t in targets)
