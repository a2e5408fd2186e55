"""`kuberay-conformance list`: the checks a run would make, with areas, preconditions and markers.

It is a pytest collection (`--collect-only`) of the suites under the plugin, which then prepares
nothing: no cluster is made, reached or changed, and no run folder is written.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Generator
from dataclasses import dataclass

import pytest

from conformance import selection, suite_session
from conformance.checks import RUN_KEY, area_of, issues_of
from conformance.errors import HarnessError, UsageError
from conformance.options import RunValues
from conformance.session.setup import RunSetup

# Markers every check has or that only the harness uses; the rest are worth showing.
# A check parametrized by a file the version under test ships (its samples) is one check in the
# docs and the sensitivity table: its ids differ only in the file, which differs by version.
_SHIPPED_FILE = re.compile(r"\[[^\]\[]+?\.yaml(?=[-\]])")
SHIPPED_FILE = "[<sample>"

_PLAIN_MARKERS = {"area", "requires", "kuberay_issue", "parametrize", "usefixtures", "timeout"}


@dataclass(frozen=True)
class Check:
    id: str
    area: str
    requires: tuple[str, ...]
    issues: tuple[int, ...]
    markers: tuple[str, ...]
    catches: str = ""  # the misbehaviour the check exists to catch: its docstring's "Catches" paragraph
    unit: str = ""  # the checks a shard takes together (selection.unit_of)


def catches_of(item: pytest.Item) -> str:
    """The paragraph of a check's docstring that starts with "Catches", on one line."""
    doc = inspect.getdoc(getattr(item, "function", None)) or ""
    found = [p for p in doc.split("\n\n") if p.startswith("Catches")]
    return " ".join(found[0].split()) if found else ""


class Found(list[Check]):
    """The checks, and the selection that chose them (summary.json's `selection`: tier, shard, counts)."""

    selection: dict[str, object]


class _Collector:
    """A pytest plugin that keeps what was collected and what could not be."""

    def __init__(self) -> None:
        self.checks = Found()
        self.checks.selection = {}
        self.errors: list[str] = []

    # A wrapper: it reads the items once every selection (--area, -k, tier, shard) is made.
    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        yield
        run = config.stash.get(RUN_KEY, None)
        if run is not None:
            self.checks.selection = dict(run.summary.selection)
        for item in items:
            needs = tuple(str(n) for m in item.iter_markers("requires") for n in m.args)
            others = {m.name for m in item.iter_markers()} - _PLAIN_MARKERS
            self.checks.append(
                Check(
                    id=item.nodeid,
                    area=area_of(item),
                    requires=needs,
                    issues=tuple(issues_of(item)),
                    markers=tuple(sorted(n for n in others if not n.startswith("allure"))),
                    catches=catches_of(item),
                    unit=selection.unit_of(item),
                )
            )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: {str(report.longrepr).strip().splitlines()[-1]}")


def family(test_id: str) -> str:
    """The check a test id belongs to, whatever shipped file it ran on."""
    return _SHIPPED_FILE.sub(SHIPPED_FILE, test_id)


def collect(
    profile: str,
    areas: tuple[str, ...],
    ray_versions: tuple[str, ...],
    keyword: str | None,
    kuberay_source: str | None = None,
    tier: str = "full",
    shard: str | None = None,
) -> Found:
    values = RunValues(
        provider="local",
        profile=profile,
        areas=tuple(areas),
        ray_versions=tuple(ray_versions),
        kuberay_source=kuberay_source,  # the samples area lists the checkout's samples
        tier=tier,
        shard=shard,
    )
    return collect_run(RunSetup.build(values, keyword), keyword)


def collect_run(setup: RunSetup, keyword: str | None) -> Found:
    """The checks `setup`'s run would make, as pytest collects them (nothing is prepared)."""
    args = [
        *suite_session.args(),
        "--collect-only",
        "-p",
        "no:terminal",
        *(["-k", keyword] if keyword else []),
    ]
    collector = _Collector()
    code = pytest.main(args, plugins=[collector, setup])
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError("the selection is not valid", "see the message above")
    if collector.errors or code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        problems = "; ".join(collector.errors) or f"pytest exit {int(code)}"
        raise HarnessError(f"the suites could not be collected: {problems}", "a harness bug: report it")
    return collector.checks


def lines(checks: list[Check], with_catches: bool = False) -> list[str]:
    """One line per check, then the count; a tier or a shard says what it was chosen from."""
    width = max((len(c.area) for c in checks), default=4)
    out = []
    for check in checks:
        extra = [
            f"requires {', '.join(check.requires)}" if check.requires else "",
            " ".join(f"kuberay#{n}" for n in check.issues),
            f"markers {', '.join(check.markers)}" if check.markers else "",
        ]
        out.append(f"{check.area:<{width}}  {check.id}  {'  '.join(e for e in extra if e)}".rstrip())
        if with_catches:
            out.append(f"{'':<{width}}    {check.catches or 'Catches: (not said)'}")
    areas = sorted({c.area for c in checks})
    out.append(f"{len(checks)} checks in {len(areas)} areas ({', '.join(areas)}){_chosen(checks)}")
    return out


def _chosen(checks: list[Check]) -> str:
    chosen = getattr(checks, "selection", {})
    parts = [f"tier {chosen['tier']}" if chosen.get("tier", "full") != "full" else ""]
    if chosen.get("shard"):
        parts.append(f"shard {chosen['shard']} of {chosen['selected']} selected, split {chosen['split']}")
    said = "; ".join(p for p in parts if p)
    return f"; {said}" if said else ""
