"""Wall time of the main job on a warm machine, and each area's time, recorded rather than asserted.

Runs `kuberay-conformance run` (provider local, profile default) as `make conformance` does,
then reads the run's summary.json: per area the summed check durations, per check the
metrics it measured. Writes benchmarks/results/conformance_run.json and the matching section
of benchmarks/README.md.

    python benchmarks/conformance_run.py                                  # as `make conformance`
    python benchmarks/conformance_run.py --kuberay-source ~/src/kuberay   # KubeRay from a checkout
    python benchmarks/conformance_run.py --from reports/<run>             # record an earlier run

Whether a local cluster was up before the run is recorded: with none, the run brought up a
fresh one (and took it down after), which is what a new user's first run does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402
from conformance.node_pressure import STARVED_PERCENT  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "conformance_run.json"
CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="earlier", type=Path, help="record this run directory, do not run")
    parser.add_argument("--kuberay-source", type=Path, help="a KubeRay checkout, passed on to the run")
    args = parser.parse_args()
    fresh = None
    if args.earlier is not None:
        run_dir, wall, exit_code = args.earlier, None, None
    else:
        run_dir = ROOT / "reports" / f"bench-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
        source = ["--kuberay-source", str(args.kuberay_source)] if args.kuberay_source else []
        fresh = _no_local_cluster()
        started = time.monotonic()
        exit_code = subprocess.run(
            [str(CLI), "run", "--run-dir", str(run_dir), *source], cwd=ROOT, check=False
        ).returncode
        wall = round(time.monotonic() - started, 1)
    result = figures(json.loads((run_dir / "summary.json").read_text()), wall, exit_code)
    result["fresh_cluster"] = fresh
    result["run"] = run_dir.name
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replace_section("conformance-run", render(result))
    print(json.dumps(result, indent=2))


def _no_local_cluster() -> bool:
    status = subprocess.run(
        [str(CLI), "cluster", "status"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return "no local cluster" in status.stdout + status.stderr


def figures(summary: dict, wall: float | None, exit_code: int | None) -> dict:
    areas: dict[str, float] = defaultdict(float)
    for test in summary["tests"]:
        areas[test["area"]] += test["duration_s"]
    if wall is None:  # an earlier run: its own start and finish times
        started = datetime.datetime.fromisoformat(summary["started"])
        wall = (datetime.datetime.fromisoformat(summary["finished"]) - started).total_seconds()
    return {
        "date": summary["started"][:10],
        "machine": machine(),
        "exit_code": exit_code if exit_code is not None else summary_exit_code(summary),
        "verdict": summary["verdict"],
        "wall_s": wall,
        "prepare_s": summary["environment"].get("prepare_s"),
        "areas_s": {area: round(seconds, 1) for area, seconds in areas.items()},
        "checks": {
            t["id"].rsplit("::", 1)[-1]: {
                "outcome": t["outcome"],
                "duration_s": t["duration_s"],
                **t["metrics"],
            }
            for t in summary["tests"]
        },
        "versions": summary["versions"],
        "node_cpu": node_cpu(summary["tests"]),
    }


def node_cpu(tests: list[dict]) -> dict:
    """The node's CPU while the checks ran (summary.json's node_cpu, where the provider reads it):
    how many checks waited for room before starting and for how long, and how many ran starved."""
    sampled = [t["node_cpu"] for t in tests if t.get("node_cpu", {}).get("pressure_max_percent") is not None]
    if not sampled:
        return {}
    waits = sorted(n.get("admission_wait_s", 0.0) for n in sampled if n.get("admission_wait_s"))
    means = sorted(n["pressure_mean_percent"] for n in sampled)
    return {
        "checks_sampled": len(sampled),
        "checks_that_waited_for_room": len(waits),
        "admission_wait_total_s": round(sum(waits), 1),
        "admission_wait_longest_s": waits[-1] if waits else 0.0,
        "pressure_mean_percent_median": means[len(means) // 2],
        "pressure_max_percent": max(n["pressure_max_percent"] for n in sampled),
        "checks_starved": sum(1 for n in sampled if n["pressure_max_percent"] >= STARVED_PERCENT),
    }


def summary_exit_code(summary: dict) -> int:
    return {"conformant": 0, "not conformant": 1}.get(summary["verdict"], 2)


def render(result: dict) -> str:
    areas = "\n".join(f"| {area} | {secs:.1f} |" for area, secs in sorted(result["areas_s"].items()))
    metrics = "\n".join(
        f"| {check} | {values['outcome']} | {values['duration_s']:.1f} | "
        f"{', '.join(f'{k}={v}' for k, v in values.items() if k not in ('outcome', 'duration_s'))} |"
        for check, values in result["checks"].items()
    )
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    cluster = {True: "a fresh local cluster (none was up)", False: "the local cluster already up"}.get(
        result.get("fresh_cluster"), "a cluster not recorded"
    )
    cpu = result.get("node_cpu") or {}
    cpu_rows = "".join(f"\n| node CPU: {k.replace('_', ' ')} | {v} |" for k, v in cpu.items())
    return f"""## Conformance run (`make conformance`)

Measured {result["date"]} on {result["machine"]} by `benchmarks/conformance_run.py`; {versions}.
Run {result.get("run", "not recorded")} on {cluster}.
Verdict: {result["verdict"]} (exit {result["exit_code"]}).

| figure | value |
|---|---|
| wall time of the run | {result["wall_s"]:.0f} s |
| of which preparing (cluster, builds not cached yet, operator, images) | {result["prepare_s"]} s |{cpu_rows}

Time per area (sum of its checks' durations, seconds):

| area | seconds |
|---|---|
{areas}

Each check: outcome, duration (seconds) and the figures it measured (`recovery_s`,
`job_complete_s`, `cleanup_after_end_s`, ...):

| check | outcome | seconds | metrics |
|---|---|---|---|
{metrics}"""


if __name__ == "__main__":
    main()
