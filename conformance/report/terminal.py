"""The one-screen summary printed at the end of a run (and by `kuberay-conformance report`).

It fits a terminal: the verdict and exit code, the versions, one line per area, then the
failed checks and the harness errors under separate headings (at most a few of each; the
report has them all), what changed since the previous run, and where the reports are.
"""

from __future__ import annotations

from pathlib import Path

from conformance.report import history
from conformance.report.build import Built
from conformance.report.summary import AREAS, HARNESS, Summary

LISTED = 6  # failed checks (and errors) named one per line before "... and N more"
COLUMNS = (("passed", "passed"), ("failed", "failed"), ("errors", "errors"), ("n/a", "not_applicable"))


def lines(built: Built, width: int = 100) -> list[str]:
    summary = built.summary
    out = [_headline(summary), _fit(_versions(summary), width), ""]
    out += _area_table(summary)
    out += _listed("failed (KubeRay did not behave as documented):", summary, "failed", "✗", width)
    out += _listed("errors (the environment or the harness; nothing learned):", summary, "error", "!", width)
    out += _changes(summary, built.earlier, width)
    out += ["", f"report:  {_shown(built.index)}"]
    out.append(f"allure:  {_shown(built.allure)}" if built.allure else "allure:  not built")
    out.append(f"results: {_shown(built.index.parent / 'summary.json')}")
    return out


def _headline(summary: Summary) -> str:
    incomplete = "" if summary.complete else " · the run did not finish"
    return f"KubeRay conformance: {summary.verdict().upper()} (exit {summary.exit_code()}){incomplete}"


def _versions(summary: Summary) -> str:
    parts = [f"run {summary.run_id}", f"{summary.provider}/{summary.profile}"]
    chosen = summary.selection
    if chosen.get("tier", "full") != "full" or chosen.get("shard") or summary.merged:
        parts.append(_selection(summary))
    return " · ".join(parts + [f"{k} {v}" for k, v in summary.versions.items() if v])


def _selection(summary: Summary) -> str:
    """A smoke tier, a shard, or the shards merged: what the counts below are of."""
    chosen = summary.selection
    said = [f"{chosen['tier']} tier"] if chosen.get("tier", "full") != "full" else []
    if chosen.get("shard"):
        said.append(f"shard {chosen['shard']}")
    if summary.merged:
        said.append(f"{summary.merged.get('shards')} shards merged")
    return ", ".join(said)


def _area_table(summary: Summary) -> list[str]:
    areas = summary.areas(harness=True)
    header = f"{'area':<16}" + "".join(f"{title:>8}" for title, _ in COLUMNS)
    rows = [
        f"{area:<16}" + "".join(f"{areas[area][key]:>8}" for _, key in COLUMNS)
        for area in AREAS
        if area in areas
    ]
    if HARNESS in areas:  # the harness's own checks, apart: not in the verdict
        rows.append(f"{'(harness)':<16}" + "".join(f"{areas[HARNESS][key]:>8}" for _, key in COLUMNS))
    return [header, *rows] if rows else ["no check has a result"]


def _listed(title: str, summary: Summary, outcome: str, sign: str, width: int) -> list[str]:
    tests = [t for t in summary.tests if t.outcome == outcome]
    if not tests:
        return []
    out = ["", title]
    for test in tests[:LISTED]:
        out.append(_fit(f"  {sign} {test.id.rsplit('::', 1)[-1]}: {test.reason}", width))
    if len(tests) > LISTED:
        out.append(f"  ... and {len(tests) - LISTED} more")
    return out


def _changes(summary: Summary, earlier: list[history.RunPoint], width: int) -> list[str]:
    if not earlier:
        return []
    changes = history.compare(history.from_summary(summary), earlier)
    parts = [
        (label, keys)
        for label, keys in (
            ("regressions", changes.regressions),
            ("new errors", changes.new_errors),
            ("fixed", changes.fixed),
        )
        if keys
    ]
    if not parts:
        return ["", f"since {earlier[-1].run_id}: no check changed between passing and failing"]
    return ["", f"since {earlier[-1].run_id}:"] + [
        _fit(f"  {label} ({len(keys)}): {', '.join(k.split('::')[-1] for k in keys)}", width)
        for label, keys in parts
    ]


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _shown(path: Path | None) -> str:
    """Relative to the working directory when below it: shorter, and what a user would type."""
    if path is None:
        return ""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
