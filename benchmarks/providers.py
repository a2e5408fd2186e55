"""One selection of checks on several providers, side by side: outcomes, durations and run figures.

    python benchmarks/providers.py --run kind=reports/s41-kind-2 --run local=reports/s41-local-same \\
        --note "kind: ..." --name kind-vs-local

Reads each run's summary.json (run it first, e.g. `kuberay-conformance run --provider kind ...`
with the same -k on every provider) and writes benchmarks/results/providers-<name>.json and the
matching section of benchmarks/README.md: per check the outcome and seconds on each provider, and
per run its counts, verdict, wall time and preparing time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402


def main() -> None:
    args = _parser().parse_args()
    runs = {label: json.loads((Path(folder) / "summary.json").read_text()) for label, folder in args.runs}
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "runs": {label: run_figures(summary) for label, summary in runs.items()},
        "checks": check_rows(runs),
        "notes": args.note,
    }
    out = ROOT / "benchmarks" / "results" / f"providers-{args.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    replace_section(f"providers-{args.name}", render(result, args.name))
    print(f"wrote {out.relative_to(ROOT)} and its section of benchmarks/README.md")


def run_figures(summary: dict[str, Any]) -> dict[str, Any]:
    started = datetime.datetime.fromisoformat(summary["started"])
    finished = datetime.datetime.fromisoformat(summary["finished"])
    outcomes: dict[str, int] = {}
    for test in summary["tests"]:
        outcomes[test["outcome"]] = outcomes.get(test["outcome"], 0) + 1
    return {
        "run_id": summary["run_id"],
        "provider": summary["provider"],
        "profile": summary["profile"],
        "versions": summary["versions"],
        "verdict": summary.get("verdict", ""),
        "outcomes": outcomes,
        "wall_s": round((finished - started).total_seconds(), 1),
        "prepare_s": summary.get("environment", {}).get("prepare_s"),
    }


def check_rows(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ids = sorted({_short(t["id"]) for summary in runs.values() for t in summary["tests"]})
    rows = []
    for check in ids:
        row: dict[str, Any] = {"check": check}
        for label, summary in runs.items():
            found = next((t for t in summary["tests"] if _short(t["id"]) == check), None)
            row[label] = (
                {"outcome": found["outcome"], "duration_s": round(found["duration_s"], 1)} if found else None
            )
        rows.append(row)
    return rows


def render(result: dict[str, Any], name: str) -> str:
    labels = list(result["runs"])
    lines = [
        f"## Providers side by side: {name} (`benchmarks/providers.py`)",
        "",
        f"{result['date']}, {result['machine']}.",
        "",
        "| run | provider/profile | Kubernetes, KubeRay, Ray | verdict | outcomes | wall | preparing |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, run in result["runs"].items():
        versions = ", ".join(run["versions"].get(k, "?") for k in ("kubernetes", "kuberay", "ray"))
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(run["outcomes"].items()))
        lines.append(
            f"| {label} | {run['provider']}/{run['profile']} | {versions} | {run['verdict']} | {outcomes} "
            f"| {run['wall_s']:.0f} s | {run['prepare_s']} s |"
        )
    lines += ["", "| check | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for row in result["checks"]:
        cells = [
            f"{row[label]['outcome']} {row[label]['duration_s']:.0f} s" if row[label] else "-"
            for label in labels
        ]
        lines.append(f"| `{row['check']}` | " + " | ".join(cells) + " |")
    lines += ["", *[f"- {note}" for note in result["notes"]]]
    return "\n".join(lines).rstrip()


def _short(test_id: str) -> str:
    return test_id.rsplit("::", 1)[-1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run",
        dest="runs",
        action="append",
        required=True,
        type=_label_and_folder,
        metavar="LABEL=RUN_DIR",
        help="a finished run and its column label (repeatable)",
    )
    parser.add_argument("--name", required=True, help="the section's name")
    parser.add_argument("--note", action="append", default=[], help="a line under the table (repeatable)")
    return parser


def _label_and_folder(text: str) -> tuple[str, str]:
    label, _, folder = text.partition("=")
    if not label or not folder:
        raise argparse.ArgumentTypeError(f"{text!r} is not LABEL=RUN_DIR")
    return label, folder


if __name__ == "__main__":
    main()
