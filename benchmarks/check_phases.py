"""Where the checks' time goes, from the per-check phase timers of finished runs (`tests[].phases`).

    python benchmarks/check_phases.py --from reports/A --from reports/B --name smoke

Per check the median over the runs of each phase (conformance/stopwatch.py); the totals per phase
over all checks; the top checks by the time they held a worker (waits outside the check plus its
duration), each phase in its own column. Writes benchmarks/results/phases-<name>.json and the
matching section of benchmarks/README.md. A check without phases (a run before the timers) is left
out and counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

# Outside duration_s (before pytest's setup), then pytest's phases with the call split.
OUTSIDE = ("admission_wait_s", "turn_wait_s", "settle_wait_s")
INSIDE = ("setup_s", "ready_wait_s", "behaviour_s", "teardown_s")
OF_BEHAVIOUR = ("hold_s", "kuberay_wait_s")
COLUMNS = (*OUTSIDE, *INSIDE, *OF_BEHAVIOUR)


def main() -> None:
    args = _parser().parse_args()
    summaries = [json.loads((Path(d) / "summary.json").read_text()) for d in args.run_dirs]
    result = figures(summaries, args.top)
    result["runs_from"] = [Path(d).name for d in args.run_dirs]
    result["notes"] = args.note
    name = f"phases-{args.name}"
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    replace_section(name, render(result, args.name))
    print(render(result, args.name))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="run_dirs", action="append", required=True, help="a finished run's dir"
    )
    parser.add_argument("--name", required=True, help="the results' name (phases-<name>)")
    parser.add_argument("--top", type=int, default=30, help="how many checks the table shows")
    parser.add_argument("--note", action="append", default=[], help="a sentence to keep with the figures")
    return parser


def figures(summaries: list[dict], top: int) -> dict:
    """Per check the median of each phase over the runs; totals per phase; the top checks."""
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    untimed: set[str] = set()
    for summary in summaries:
        for test in summary["tests"]:
            if test["outcome"] == "not_applicable" and not test.get("phases"):
                continue
            if "phases" not in test or not test["phases"]:
                untimed.add(test["id"])
                continue
            for phase in COLUMNS:
                samples[test["id"]][phase].append(test["phases"].get(phase, 0.0))
    checks = {
        check: {phase: round(statistics.median(values), 1) for phase, values in phases.items()}
        for check, phases in samples.items()
    }
    held = {check: sum(p[k] for k in (*OUTSIDE, *INSIDE)) for check, p in checks.items()}
    ranked = sorted(held, key=held.__getitem__, reverse=True)[:top]
    return {
        "date": min(s["started"] for s in summaries)[:10],
        "machine": machine(),
        "runs": len(summaries),
        "versions": summaries[-1]["versions"],
        "checks_timed": len(checks),
        "checks_untimed": len(untimed),
        "totals_s": {phase: round(sum(p[phase] for p in checks.values()), 1) for phase in COLUMNS},
        "wall_s": [_wall(s) for s in summaries],
        "top": [{"check": check, "held_s": round(held[check], 1), **checks[check]} for check in ranked],
    }


def _wall(summary: dict) -> float:
    from datetime import datetime  # noqa: PLC0415

    started, finished = (datetime.fromisoformat(summary[k]) for k in ("started", "finished"))
    return round((finished - started).total_seconds(), 1)


def render(result: dict, name: str) -> str:
    head = "| check | held | " + " | ".join(c.removesuffix("_s") for c in COLUMNS) + " |"
    rule = "|" + "---|" * (len(COLUMNS) + 2)
    rows = [
        f"| {row['check'].rsplit('::', 1)[-1]} | {row['held_s']} | "
        + " | ".join(str(row[c]) for c in COLUMNS)
        + " |"
        for row in result["top"]
    ]
    totals = " | ".join(f"{c.removesuffix('_s')} {v}" for c, v in result["totals_s"].items())
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    notes = "".join(f"\n- {note}" for note in result["notes"])
    walls = ", ".join(f"{w:.0f}" for w in result["wall_s"])
    return f"""## Where the checks' time goes: {name} (`benchmarks/check_phases.py`)

{result["date"]}, {result["machine"]}; {versions}; median of {result["runs"]} run(s) (wall s: {walls});
{result["checks_timed"]} checks timed ({result["checks_untimed"]} without timers). Seconds. `held` is what a
check held a worker: the waits before it (admission for CPU room, the exclusive turn, earlier namespaces
to settle) plus setup, the call and teardown. The call is `ready_wait` (RayCluster/RayService ready:
building what it observes) plus `behaviour`, of which `hold` (windows the check chose to watch that
nothing happens) and `kuberay_wait` (waiting for KubeRay to act) are parts.

Totals over all checks: {totals}.{notes}

{head}
{rule}
{chr(10).join(rows)}"""


if __name__ == "__main__":
    main()
