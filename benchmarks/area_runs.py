"""Figures of some areas over several runs: each check's duration and the metrics it measured,
as median and spread (min-max), since one run of a scaling or recovery check is one sample.

    python benchmarks/area_runs.py --area autoscaling --area gpu --runs 3
    python benchmarks/area_runs.py --area fault-recovery --from reports/A --from reports/B
    python benchmarks/area_runs.py --area operator --kuberay-source ~/src/kuberay --name operator-src

Without `--from` it runs `kuberay-conformance run --area ...` `--runs` times (local provider,
default profile, the cluster kept between runs; `--workers` and `--kuberay-source` passed on).
Writes benchmarks/results/areas-<areas or --name>.json and the matching section of
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"


def main() -> None:
    args = _parser().parse_args()
    run_dirs = [Path(d) for d in args.run_dirs] or [_run(args) for _ in range(args.runs)]
    summaries = [json.loads((d / "summary.json").read_text()) for d in run_dirs]
    result = figures(summaries, args.area)
    result["notes"] = args.note
    name = "areas-" + (args.name or "-".join(args.area))
    out = ROOT / "benchmarks" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    replace_section(name, render(result))
    print(json.dumps(result, indent=2))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", required=True, help="an area to run (repeatable)")
    parser.add_argument("--runs", type=int, default=1, help="how many runs to make (without --from)")
    parser.add_argument("-k", default="", help="only checks matching this pytest -k expression")
    parser.add_argument("--from", dest="run_dirs", action="append", default=[], help="an earlier run's dir")
    parser.add_argument("--note", action="append", default=[], help="a sentence to keep with the figures")
    parser.add_argument("--workers", default="", help="as `run --workers` (default: the run's)")
    parser.add_argument("--kuberay-source", default="", help="a KubeRay checkout (as `run --kuberay-source`)")
    parser.add_argument("--name", default="", help="the results' name (default: the areas joined by -)")
    return parser


def _run(args: argparse.Namespace) -> Path:
    run_dir = ROOT / "reports" / f"bench-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
    command = [str(CLI), "run", "--keep-cluster", "--run-dir", str(run_dir)]
    command += [arg for area in args.area for arg in ("--area", area)] + (["-k", args.k] if args.k else [])
    command += ["--workers", args.workers] if args.workers else []
    command += ["--kuberay-source", args.kuberay_source] if args.kuberay_source else []
    subprocess.run(command, cwd=ROOT, check=False)
    return run_dir


def figures(summaries: list[dict], areas: list[str]) -> dict:
    """Per check: outcomes over the runs, and median/min/max of its duration and of each metric."""
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    outcomes: dict[str, list[str]] = defaultdict(list)
    for summary in summaries:
        for test in summary["tests"]:
            if test["area"] not in areas:
                continue
            check = test["id"].rsplit("::", 1)[-1]
            outcomes[check].append(test["outcome"])
            samples[check]["duration_s"].append(test["duration_s"])
            for metric, value in test["metrics"].items():
                samples[check][metric].append(value)
    return {
        "date": min(s["started"] for s in summaries)[:10],
        "machine": machine(),
        "areas": areas,
        "runs": len(summaries),
        "versions": summaries[-1]["versions"],
        "checks": {
            check: {"outcomes": outcomes[check], **{m: spread(v) for m, v in metrics.items()}}
            for check, metrics in samples.items()
        },
    }


def spread(values: list[float]) -> dict[str, float | int]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
        "n": len(values),
    }


def _cell(figure: dict[str, float | int]) -> str:
    if figure["n"] == 1:
        return f"{figure['median']}"
    return f"{figure['median']} ({figure['min']}–{figure['max']}, n={figure['n']})"


def render(result: dict) -> str:
    rows = []
    for check, found in result["checks"].items():
        outcomes = ", ".join(sorted(set(found["outcomes"])))
        shown = {m: f for m, f in found.items() if m not in ("outcomes", "duration_s")}
        metrics = "; ".join(f"{m} {_cell(f)}" for m, f in shown.items())
        rows.append(f"| {check} | {outcomes} | {_cell(found['duration_s'])} | {metrics} |")
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    areas = ", ".join(f"`{area}`" for area in result["areas"])
    return f"""## Areas {areas} over {result["runs"]} run(s) (`benchmarks/area_runs.py`)

Measured {result["date"]} on {result["machine"]}; {versions}. Each figure is the median,
then (min–max, number of samples) when there was more than one.
{"".join(f"{chr(10)}- {note}" for note in result.get("notes", []))}

| check | outcomes | seconds | metrics |
|---|---|---|---|
""" + "\n".join(rows)


if __name__ == "__main__":
    main()
