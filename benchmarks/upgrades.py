"""RayService upgrades under load on this machine: each upgrade's duration, its error rate and the
load rate the generator achieved, recorded rather than asserted.

Runs `kuberay-conformance run --area rayservice --area upgrade` on the local provider (or, with
`--from RUN_DIR`, reads an earlier run) and writes benchmarks/results/upgrades.json and the
matching section of benchmarks/README.md.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "upgrades.json"
CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"
AREAS = ("rayservice", "upgrade")
# The figures of a check worth a column, in this order.
COLUMNS = (
    "upgrade_s",
    "in_place_update_s",
    "rollback_s",
    "pending_suspended_s",
    "resume_to_promotion_s",
    "requests_total",
    "failed_requests",
    "error_rate",
    "achieved_rate_rps",
    "max_schedule_lag_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "max_step_observed_percent",
    "min_step_interval_s",
    "max_share_deviation_percent",
    "old_cluster_deleted_after_promotion_s",
)


def main() -> None:
    """Run the two areas and record them; `--from RUN_DIR...` records earlier runs instead (the
    checks of several runs side by side, e.g. one per area)."""
    if len(sys.argv) >= 3 and sys.argv[1] == "--from":
        run_dirs = [Path(arg) for arg in sys.argv[2:]]
    else:
        run_dir = ROOT / "reports" / f"bench-upgrades-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
        areas = [arg for area in AREAS for arg in ("--area", area)]
        subprocess.run([str(CLI), "run", *areas, "--run-dir", str(run_dir)], cwd=ROOT, check=False)
        run_dirs = [run_dir]
    result = merged([figures(json.loads((d / "summary.json").read_text())) for d in run_dirs])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replace_section("upgrades", render(result))
    print(json.dumps(result, indent=2))


def figures(summary: dict) -> dict:
    checks = {
        t["id"].split("::", 1)[-1]: {"outcome": t["outcome"], "duration_s": t["duration_s"], **t["metrics"]}
        for t in summary["tests"]
        if t["area"] in AREAS
    }
    return {
        "date": summary["started"][:10],
        "run_id": summary["run_id"],
        "machine": machine(),
        "versions": summary["versions"],
        "notes": summary.get("environment", {}).get("notes", []),
        "checks": checks,
    }


def build_times() -> dict[str, float | None]:
    """Cold build seconds of the gateway and load tools, as their cached builds recorded them."""
    from conformance.build import gobuild, pins  # noqa: PLC0415
    from conformance.build.cache import cache_dir  # noqa: PLC0415

    return {
        f"{name} {pins.TOOLS[name].version}": gobuild.build_seconds(pins.TOOLS[name], cache_dir())
        for name in ("traefik", "vegeta")
    }


def merged(results: list[dict]) -> dict:
    first = results[0]
    return {
        **first,
        "build_s": build_times(),
        "run_id": ", ".join(r["run_id"] for r in results),
        "checks": {check: values for r in results for check, values in r["checks"].items()},
    }


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def render(result: dict) -> str:
    header = "| check | outcome | " + " | ".join(COLUMNS) + " |"
    rule = "|---" * (len(COLUMNS) + 2) + "|"
    rows = [
        f"| {check} | {values['outcome']} | " + " | ".join(_cell(values.get(c)) for c in COLUMNS) + " |"
        for check, values in result["checks"].items()
    ]
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    return "\n".join(
        [
            "## RayService upgrades under load",
            "",
            f"Measured {result['date']} (runs {result['run_id']}) on {result['machine']} by "
            f"`benchmarks/upgrades.py`; {versions}. Load: vegeta at a constant rate from a Guaranteed-QoS "
            "pod, through the Gateway (Traefik); `achieved_rate_rps` is what it really sent. "
            "Durations in seconds, latencies in milliseconds of successful requests.",
            "",
            "Cold builds (seconds, recorded by the build that filled the cache): "
            + ", ".join(f"{tool} {_cell(secs)}" for tool, secs in result.get("build_s", {}).items())
            + ".",
            "",
            header,
            rule,
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
