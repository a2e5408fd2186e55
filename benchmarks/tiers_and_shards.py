"""Figures of the smoke tier and of a sharded run: wall time per run, and whether the shards merged
into the same checks and verdict as an unsharded run of the same selection.

    python benchmarks/tiers_and_shards.py --run reports/S1 --run reports/S2 \\
        --shard reports/SH1 --shard reports/SH2 --merged reports/M --name smoke

Reads finished runs' summary.json (nothing is run). `--run` are unsharded runs of one selection,
`--shard` the shards of one split and `--merged` what `kuberay-conformance report merge` made of
them. Writes benchmarks/results/tiers-<name>.json and the matching section of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402


def main() -> None:
    args = _parser().parse_args()
    runs = [_figures(Path(d)) for d in args.run]
    shards = [_figures(Path(d)) for d in args.shard]
    merged = _figures(Path(args.merged)) if args.merged else None
    result = {
        "date": datetime.now().strftime("%Y-%m-%d"),
        "machine": machine(),
        "runs": runs,
        "shards": shards,
        "merged": merged,
        "same_as_unsharded": _same(runs, merged),
        "notes": args.note,
    }
    out = ROOT / "benchmarks" / "results" / f"tiers-{args.name}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    replace_section(f"tiers-{args.name}", render(result, args.name))
    print(render(result, args.name))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], help="an unsharded run's folder")
    parser.add_argument("--shard", action="append", default=[], help="a shard's run folder")
    parser.add_argument("--merged", default="", help="the folder `report merge` wrote")
    parser.add_argument("--name", required=True, help="the results' name (tiers-<name>)")
    parser.add_argument("--note", action="append", default=[], help="a sentence to keep with the figures")
    return parser


def _figures(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    started, finished = (datetime.fromisoformat(summary[k]) for k in ("started", "finished"))
    outcomes: dict[str, int] = {}
    for test in summary["tests"]:
        outcomes[test["outcome"]] = outcomes.get(test["outcome"], 0) + 1
    return {
        "run": run_dir.name,
        "wall_s": round((finished - started).total_seconds()),
        "prepare_s": summary.get("environment", {}).get("prepare_s"),
        "checks": len(summary["tests"]),
        "outcomes": outcomes,
        "verdict": _verdict(summary),
        "shard": summary.get("selection", {}).get("shard", ""),
        "ids": sorted(t["id"] for t in summary["tests"]),
    }


def _verdict(summary: dict) -> str:
    outcomes = {t["outcome"] for t in summary["tests"]}
    if "failed" in outcomes:
        return "not conformant"
    return "incomplete" if "error" in outcomes or not summary.get("complete", True) else "conformant"


def _same(runs: list[dict], merged: dict | None) -> bool | None:
    """The merged shards hold exactly the checks of every unsharded run, with its verdict."""
    if merged is None or not runs:
        return None
    return all(run["ids"] == merged["ids"] and run["verdict"] == merged["verdict"] for run in runs)


def _row(figures: dict) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(figures["outcomes"].items()))
    shard = f" (shard {figures['shard']})" if figures["shard"] else ""
    return (
        f"| {figures['run']}{shard} | {figures['wall_s']} | {figures['prepare_s']} | {figures['checks']} | "
        f"{counts} | {figures['verdict']} |"
    )


def render(result: dict, name: str) -> str:
    rows = [_row(f) for f in [*result["runs"], *result["shards"]]]
    merged = result["merged"]
    if merged is not None:
        rows.append(_row({**merged, "wall_s": "-", "prepare_s": "-"}))
    same = {True: "the same checks and verdict as", False: "NOT the same checks or verdict as", None: "-"}
    notes = "".join(f"\n- {note}" for note in result["notes"])
    return f"""## Tier `{name}` and its shards (`benchmarks/tiers_and_shards.py`)

{result["date"]}, {result["machine"]}. Wall seconds from the run's start to its summary (preparing
included: cluster already up, KubeRay installed by each run). The merged report holds
{same[result["same_as_unsharded"]]} the unsharded runs.{notes}

| run | wall s | preparing s | checks | outcomes | verdict |
|---|---|---|---|---|---|
{chr(10).join(rows)}"""


if __name__ == "__main__":
    main()
