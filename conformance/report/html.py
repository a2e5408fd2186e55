"""index.html: the project's own conformance report, one self-contained file that opens offline.

Rendered with Jinja2 from templates/ (the page, its CSS and its script are inlined), with
Chart.js inlined for the charts and every datum embedded as JSON: the page loads nothing.
The diagnostics of failed checks are embedded as excerpts (the head of YAML, the tail of
logs) with relative links to the whole files, which open when the run folder is at hand.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import markupsafe

from conformance.node_pressure import STARVED_PERCENT
from conformance.report import history, timelines
from conformance.report.summary import AREAS, HARNESS, OUTCOMES, Summary, TestResult

KUBERAY_ISSUES = "https://github.com/ray-project/kuberay/issues/{}"
EXCERPT_BYTES = 24_000  # events and YAML: enough to see what happened
LOG_EXCERPT_BYTES = 8_000  # logs: the tail, where it broke
BUNDLE_BYTES = 200_000  # past this, a check's bundle is listed and linked, not embedded
STATUS_TEXT = {
    "passed": "passed",
    "failed": "failed",
    "error": "error",
    "not_applicable": "not applicable",
    "skipped": "skipped",
    "flaky": "flaky",
}


@dataclass
class Inputs:
    """Everything a report is made of, read from the run folder and its history."""

    summary: Summary
    run_dir: Path
    timelines: list[timelines.Timeline] = field(default_factory=list)
    earlier: list[history.RunPoint] = field(default_factory=list)
    allure_page: Path | None = None
    chart_js: str | None = None
    problems: list[str] = field(default_factory=list)  # shown in the report, never fatal


def render(inputs: Inputs) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("conformance.report", "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["seconds"] = human_seconds
    env.filters["slug"] = timelines.slug
    env.filters["number"] = lambda value: f"{value:.4g}"  # 0.0033333333 reads as 0.003333
    # The stylesheet and script are inlined as they are, not as templates: "{#" in them is not Jinja.
    css, js = (markupsafe.Markup(_template_text(env, name)) for name in ("report.css", "report.js"))
    return env.get_template("index.html.j2").render(**context(inputs), css=css, js=js)


def _template_text(env: jinja2.Environment, name: str) -> str:
    assert env.loader is not None
    return env.loader.get_source(env, name)[0]


def context(inputs: Inputs) -> dict[str, object]:
    summary = inputs.summary
    current = history.from_summary(summary)
    changes = history.compare(current, inputs.earlier)
    rows = [row(test, changes) for test in summary.tests]
    counts = summary.areas(harness=True)
    by_area = [
        {"name": area, "rows": [r for r in rows if r["area"] == area], "counts": counts[area]}
        for area in (*AREAS, HARNESS)  # the harness's own checks last; not in the verdict
        if area in counts
    ]
    return {
        "title": f"KubeRay conformance · {summary.run_id}",
        "summary": summary,
        "verdict": summary.verdict(),
        "exit_code": summary.exit_code(),
        "duration_s": _run_seconds(summary),
        "facts": facts(summary),
        "gates": summary.environment.get("feature_gates") or {},
        "notes": list(summary.environment.get("notes") or []),
        "areas": by_area,
        "counts": _totals(rows),
        "failures": [evidence(r, inputs.run_dir) for r in rows if r["outcome"] == "failed"],
        "errors": [evidence(r, inputs.run_dir) for r in rows if r["outcome"] == "error"],
        "changes": changes,
        "previous_run": inputs.earlier[-1].run_id if inputs.earlier else "",
        "earlier_count": len(inputs.earlier),
        "allure": _relative(inputs.allure_page, inputs.run_dir),
        "problems": inputs.problems,
        "chart_js": _script_safe(inputs.chart_js) if inputs.chart_js else "",
        # "<" escaped, so no string in the data can end the <script> element that holds it.
        "data_json": json.dumps(chart_data(inputs, rows, current)).replace("<", "\\u003c"),
        "statuses": STATUS_TEXT,
    }


def row(test: TestResult, changes: history.Changes) -> dict[str, object]:
    key = history.check_key(test.id)
    flips = changes.flips.get(key, 0)
    status = "flaky" if test.flaky or history.is_flaky(flips, test.outcome) else test.outcome
    name = test.id.rsplit("::", 1)[-1]
    base, _, params = name.partition("[")
    classname, junit_name = junit_names(test.id)
    marks = []
    if key in changes.regressions:
        marks.append(("regression", f"passed in the previous run ({changes.previous.get(key)})"))
    if key in changes.new_errors:
        marks.append(("new-error", "passed in the previous run; now the harness or environment failed"))
    if key in changes.fixed:
        marks.append(("fixed", f"was {changes.previous.get(key)} in the previous run"))
    if flips >= 2:
        marks.append(("unstable", f"changed between pass and fail {flips} times in recent runs"))
    return {
        "id": test.id,
        "key": key,
        "area": test.area,
        "name": base,
        "params": params.rstrip("]"),
        "module": test.id.split("::", 1)[0].rsplit("/", 1)[-1],
        "outcome": test.outcome,
        "status": status,
        "reason": test.reason,
        "details": test.details,
        "duration_s": test.duration_s,
        "metrics": test.metrics,
        "node_cpu": _node_cpu(test.node_cpu),
        "issues": [{"label": i, "url": issue_url(i)} for i in test.issues],
        "attempts": test.attempts,
        "marks": marks,
        "junit_classname": classname,
        "junit_name": junit_name,
    }


def _node_cpu(figures: dict[str, float]) -> dict[str, object]:
    """The node's CPU while a check ran, shown apart from its metrics (those are KubeRay's doing);
    `starved` marks a check that ran on a node at or above node_pressure.STARVED_PERCENT."""
    if not figures:
        return {}
    highest = figures.get("pressure_max_percent", 0.0)
    parts = [f"mean {figures.get('pressure_mean_percent', 0.0):.0f}%", f"max {highest:.0f}%"]
    if figures.get("admission_wait_s"):
        parts.append(f"waited {figures['admission_wait_s']:.0f} s for room")
    return {"text": "node CPU " + ", ".join(parts), "starved": highest >= STARVED_PERCENT}


def junit_names(test_id: str) -> tuple[str, str]:
    """The classname and name pytest's junit.xml gives a check, to match rows with testcases."""
    parts = test_id.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[1:-1]]), parts[-1]


def issue_url(issue: str) -> str:
    number = issue.rsplit("#", 1)[-1]
    return KUBERAY_ISSUES.format(number) if number.isdigit() else ""


def facts(summary: Summary) -> list[tuple[str, str]]:
    env = summary.environment
    gpus = env.get("gpu_capacity")
    gpu_text = f"{gpus}{' (simulated GPU)' if env.get('simulated_gpus') else ''}" if gpus is not None else ""
    rows = [
        ("Kubernetes", summary.versions.get("kubernetes", "")),
        ("KubeRay", summary.versions.get("kuberay", "")),
        ("KubeRay asked for", str(env.get("kuberay_requested") or "")),
        ("KubeRay from", str(env.get("kuberay_origin") or "")),
        ("Ray", summary.versions.get("ray", "")),
        ("Provider", summary.provider),
        ("Profile", summary.profile),
        ("GPUs", gpu_text),
        ("Gateway API", _gateway(env)),
        ("Ray head Service", _exposure(env)),
        ("Started", summary.started),
        ("Finished", summary.finished),
        ("Preparing took", human_seconds(env["prepare_s"]) if env.get("prepare_s") is not None else ""),
        ("Checks selected", selected(summary.selection)),
        ("Merged from", _merged_from(summary.merged)),
    ]
    return [(k, v) for k, v in rows if v]


def selected(chosen: dict[str, object]) -> str:
    """The selection in words: "smoke tier, areas upgrade; shard 2/4 (57 of 227 checks)"."""
    if not chosen:
        return ""
    parts = [f"{chosen.get('tier', 'full')} tier"]
    if chosen.get("areas"):
        parts.append("areas " + ", ".join(str(a) for a in chosen["areas"]))  # type: ignore[union-attr]
    if chosen.get("keyword"):
        parts.append(f"-k {chosen['keyword']}")
    if chosen.get("shard"):
        parts.append(f"shard {chosen['shard']} ({chosen.get('checks')} of {chosen.get('selected')} checks)")
    return ", ".join(parts)


def _merged_from(merged: dict[str, object]) -> str:
    runs = merged.get("runs")
    if not isinstance(runs, list):
        return ""
    return f"{len(runs)} shards: " + ", ".join(f"{r.get('shard')} {r.get('verdict')}" for r in runs)


def _exposure(env: dict[str, object]) -> str:
    kind = str(env.get("head_service_type") or "")
    if not kind or kind == "ClusterIP":
        return kind and "ClusterIP: reachable inside the cluster only"
    return f"{kind}: EXPOSED outside the cluster by the profile (dashboard and job submission)"


def _gateway(env: dict[str, object]) -> str:
    if "gateway_api" not in env:
        return ""
    classes = ", ".join(str(c) for c in env.get("gateway_classes") or [])  # type: ignore[union-attr]
    return f"yes ({classes})" if env["gateway_api"] else "no"


def _totals(rows: list[dict[str, object]]) -> dict[str, int]:
    counts = dict.fromkeys([*OUTCOMES, "flaky"], 0)
    for r in rows:
        counts[str(r["status"])] += 1
    return counts


def _run_seconds(summary: Summary) -> float | None:
    try:
        started = datetime.datetime.fromisoformat(summary.started)
        finished = datetime.datetime.fromisoformat(summary.finished)
    except ValueError:
        return None
    return (finished - started).total_seconds()


def human_seconds(value: object) -> str:
    seconds = float(value)  # type: ignore[arg-type]
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


# -- evidence of failed checks --------------------------------------------------------------


def evidence(r: dict[str, object], run_dir: Path) -> dict[str, object]:
    """A failed or errored check with its diagnostics bundle, as excerpts and links."""
    bundles = bundle_dirs(str(r["id"]), run_dir)
    files: list[dict[str, object]] = []
    budget = BUNDLE_BYTES
    for bundle in bundles:
        for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
            excerpt, cut = _excerpt(path) if budget > 0 else ("", True)
            budget -= len(excerpt)
            files.append(
                {
                    "name": str(path.relative_to(bundle)),
                    "href": str(path.relative_to(run_dir)),
                    "size": path.stat().st_size,
                    "excerpt": excerpt,
                    "cut": cut,
                }
            )
    return {**r, "bundles": [str(b.relative_to(run_dir)) for b in bundles], "files": files}


def bundle_dirs(test_id: str, run_dir: Path) -> list[Path]:
    """The check's own bundle, and its module's when the check used the module's namespace."""
    root = run_dir / "diagnostics"
    if not root.is_dir():
        return []
    own = timelines.slug(test_id)
    return sorted(d for d in root.iterdir() if d.is_dir() and (own == d.name or own.startswith(d.name + "-")))


def _excerpt(path: Path) -> tuple[str, bool]:
    limit = EXCERPT_BYTES if path.name == "events.txt" or path.suffix == ".yaml" else LOG_EXCERPT_BYTES
    raw = path.read_bytes()
    if len(raw) <= limit:
        return raw.decode("utf-8", "replace"), False
    if path.suffix == ".yaml":  # the object's head says what it is
        return raw[:limit].decode("utf-8", "replace"), True
    return raw[-limit:].decode("utf-8", "replace"), True  # logs and events: the end is where it broke


# -- chart data -------------------------------------------------------------------------------


def chart_data(inputs: Inputs, rows: list[dict[str, object]], current: history.RunPoint) -> dict[str, object]:
    durations: dict[str, float] = {}
    for test in inputs.summary.tests:
        durations[test.area] = durations.get(test.area, 0.0) + test.duration_s
    recovery = [
        {"check": str(r["name"]), "params": r["params"], "metric": k, "seconds": v}
        for r in rows
        for k, v in dict(r["metrics"]).items()  # type: ignore[call-overload]
        if k == "recovery_s" or k.endswith("_recovery_s")
    ]
    return {
        "areaDurations": [{"area": a, "seconds": round(durations[a], 1)} for a in AREAS if a in durations],
        "recovery": recovery,
        "timelines": [t.to_json() for t in inputs.timelines],
        "trend": history.area_trend([*inputs.earlier, current]) if inputs.earlier else [],
    }


def _relative(path: Path | None, run_dir: Path) -> str:
    return str(path.relative_to(run_dir)) if path else ""


def _script_safe(text: str) -> str:
    """A script that cannot end the <script> element it is inlined into.

    Chart.js has no "</" today; should a later version have one, it is inside a string or a
    regular expression, where "<\\/" means the same.
    """
    return text.replace("</", "<\\/")
