"""Wall time of the main job on a warm machine, and each area's time, recorded rather than asserted.

Runs `kuberay-conformance run` (provider local, profile default) as `make conformance` does,
then reads the run's summary.json: per area the summed check durations, per check the
metrics it measured. Writes benchmarks/results/conformance_run.json and the matching section
of benchmarks/README.md.
"""

from __future__ import annotations

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

RESULTS = ROOT / "benchmarks" / "results" / "conformance_run.json"
CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"


def main() -> None:
    run_dir = ROOT / "reports" / f"bench-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
    started = time.monotonic()
    done = subprocess.run([str(CLI), "run", "--run-dir", str(run_dir)], cwd=ROOT, check=False)
    wall = time.monotonic() - started
    summary = json.loads((run_dir / "summary.json").read_text())
    areas: dict[str, float] = defaultdict(float)
    for test in summary["tests"]:
        areas[test["area"]] += test["duration_s"]
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "exit_code": done.returncode,
        "verdict": summary["verdict"],
        "wall_s": round(wall, 1),
        "prepare_s": summary["environment"].get("prepare_s"),
        "areas_s": {area: round(seconds, 1) for area, seconds in areas.items()},
        "metrics": {t["id"].rsplit("::", 1)[-1]: t["metrics"] for t in summary["tests"] if t["metrics"]},
        "versions": summary["versions"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replace_section("conformance-run", render(result))
    print(json.dumps(result, indent=2))


def render(result: dict) -> str:
    areas = "\n".join(f"| {area} | {secs:.1f} |" for area, secs in sorted(result["areas_s"].items()))
    metrics = "\n".join(
        f"| {check} | {', '.join(f'{k}={v}' for k, v in values.items())} |"
        for check, values in sorted(result["metrics"].items())
    )
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items())
    return f"""## Conformance run (`make conformance`, warm machine)

Measured {result["date"]} on {result["machine"]} by `benchmarks/conformance_run.py`; {versions}.
Verdict: {result["verdict"]} (exit {result["exit_code"]}).

| figure | value | goal |
|---|---|---|
| wall time of the run | {result["wall_s"]:.0f} s | ≤ 300 s for the first checks |
| of which preparing (operator install, Ray image import) | {result["prepare_s"]} s | |

Time per area (sum of its checks' durations, seconds):

| area | seconds |
|---|---|
{areas}

Figures the checks measured:

| check | metrics |
|---|---|
{metrics}"""


if __name__ == "__main__":
    main()
