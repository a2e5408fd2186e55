"""The conformance suites on KubeRay built from a checkout, one area per run: outcomes and wall time.

    python benchmarks/kuberay_source.py --source /tmp/kuberay-1.7.0 --area operator --area upgrade \\
        --lock /tmp/krc/cluster.lock
    python benchmarks/kuberay_source.py --from reports/src-operator --from reports/src-upgrade

Each area is its own `kuberay-conformance run --kuberay-source DIR --area A --keep-cluster` (under
`flock LOCK` when given, taken and released per area, so a shared cluster is not held for the
whole series). Results accumulate in benchmarks/results/kuberay-source.json (a later run of an
area replaces the earlier one) and the section "KubeRay <version> from source" of
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"
RESULTS = ROOT / "benchmarks" / "results" / "kuberay-source.json"
OUTCOMES = ("passed", "failed", "error", "not_applicable", "skipped")


def main() -> None:
    args = _parser().parse_args()
    recorded = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"areas": {}}
    recorded["notes"] = args.note or recorded.get("notes", [])
    runs = [lambda d=d: entries(Path(d), "", args.k) for d in args.run_dirs] or [
        lambda a=a: _run(args.source, a, args.k, args.lock) for a in args.area
    ]
    for one_run in runs:  # recorded after each run: a series cut short keeps what ran
        for found in one_run():
            key = found["area"] + (f" -k {found['selection']}" if found["selection"] else "")
            recorded["areas"][key] = found
            print(json.dumps(found, indent=2))
        _record(recorded)


def _record(recorded: dict) -> None:
    recorded["machine"] = machine()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(recorded, indent=2) + "\n")
    replace_section("kuberay-source", render(recorded))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="the KubeRay checkout (--kuberay-source)")
    parser.add_argument("--area", action="append", default=[], help="an area, one run each (repeatable)")
    parser.add_argument("-k", default="", help="only checks matching this pytest -k expression")
    parser.add_argument("--lock", default="", help="flock this file around each run (a shared cluster)")
    parser.add_argument("--from", dest="run_dirs", action="append", default=[], help="record an earlier run")
    parser.add_argument("--note", action="append", default=[], help="a finding to keep with the figures")
    return parser


def _run(source: str, area: str, k: str, lock: str) -> list[dict]:
    run_dir = ROOT / "reports" / f"src-{area}-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
    command = [str(CLI), "run", "--kuberay-source", source, "--area", area, "--keep-cluster"]
    command += ["--run-dir", str(run_dir), *(["-k", k] if k else [])]
    shown = ["kuberay-conformance", *command[1:]]
    if lock:
        command = ["flock", lock, *command]
        shown = ["flock", lock, *shown]
    subprocess.run(command, cwd=ROOT, check=False)
    return entries(run_dir, shlex.join(shown), k)


def entries(run_dir: Path, command: str, k: str = "") -> list[dict]:
    """One row per area of a run: counts by outcome, wall time and each check that did not pass.

    A one-area run's wall time is the whole run (from its start, after any wait for the lock, to
    its end); in a run of several areas (the full main job) it is the sum of the area's checks."""
    summary = json.loads((run_dir / "summary.json").read_text())
    areas = sorted({t["area"] for t in summary["tests"] if t["area"] != "harness"}) or ["?"]
    whole_job = len(areas) > 1 and not k  # several areas, nothing deselected: the main job
    full_run = {"wall_s": _seconds(summary), "verdict": summary["verdict"]} if whole_job else None
    shared = {
        "selection": k,  # a -k expression: only some checks of the area ran
        "run_dir": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir),
        "full_run": full_run,
        "date": summary["started"][:10],
        "command": command,
        "prepare_s": summary.get("environment", {}).get("prepare_s"),
        "versions": summary["versions"],
        "source": summary.get("environment", {}).get("kuberay_source", {}),
    }
    return [_area_row(summary, area, shared, whole_run=len(areas) == 1) for area in areas]


def _area_row(summary: dict, area: str, shared: dict, *, whole_run: bool) -> dict:
    tests = [t for t in summary["tests"] if t["area"] == area]
    counts = {outcome: 0 for outcome in OUTCOMES}
    for test in tests:
        counts[test["outcome"]] += 1
    not_passed = [
        {"check": t["id"].rsplit("::", 1)[-1], "outcome": t["outcome"], "reason": t.get("reason", "")[:300]}
        for t in tests
        if t["outcome"] != "passed"
    ]
    wall = _seconds(summary) if whole_run else round(sum(t["duration_s"] for t in tests), 1)
    return {"area": area, **shared, "wall_s": wall, "verdict": _verdict(counts), "counts": counts,
            "not_passed": not_passed}  # fmt: skip


def _seconds(summary: dict) -> float | None:
    try:
        started = datetime.datetime.fromisoformat(summary["started"])
        finished = datetime.datetime.fromisoformat(summary["finished"])
    except (KeyError, TypeError, ValueError):
        return None
    return round((finished - started).total_seconds(), 1)


def _verdict(counts: dict[str, int]) -> str:
    if counts["error"]:
        return "harness errors"
    return "not conformant" if counts["failed"] else "conformant"


def _selection(found: dict) -> str:
    return f" (`-k {found['selection']}`)" if found.get("selection") else ""


def render(recorded: dict) -> str:
    areas = list(recorded["areas"].values())
    first = areas[0] if areas else {"versions": {}, "source": {}}
    version = first["versions"].get("kuberay", "?")
    ref = first["source"].get("ref", "?")
    rows = [
        f"| `{a['area']}`{_selection(a)} | {a['verdict']} | {a['counts']['passed']} | "
        f"{a['counts']['failed']} | {a['counts']['error']} | {a['counts']['not_applicable']} | "
        f"{a['wall_s']} | {a['date']} |"
        for a in areas
    ]
    findings = [
        f"- `{a['area']}` {n['check']}: **{n['outcome']}**: {n['reason']}"
        for a in areas
        for n in a["not_passed"]
    ]
    commands = [f"    {a['command']}" for a in areas if a.get("command")]
    notes = [f"- {note}" for note in recorded.get("notes", [])]
    versions = first["versions"]
    full_runs = {a["run_dir"]: a["full_run"] for a in areas if a.get("full_run")}
    full = "".join(
        f"\nFull main job `{run_dir}`: {run['verdict']}, {run['wall_s']} s wall; its rows give each area's "
        "summed check time.\n"
        for run_dir, run in full_runs.items()
    )
    return f"""## KubeRay {version.removeprefix("v")} from source

Measured on {recorded["machine"]} by `benchmarks/kuberay_source.py`: `kuberay-conformance run
--kuberay-source DIR` on the local provider (default profile), one area per run or the whole main
job (`--from` its run folder), the checkout built and installed with its own Helm chart; built
from source at {ref}; kubernetes {versions.get("kubernetes", "?")}, ray {versions.get("ray", "?")}.
A one-area run's wall time is the whole run (environment preparation included).
{full}
| area | verdict | passed | failed | error | n/a | wall s | date |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Checks that did not pass (outcome: reason):

{chr(10).join(findings) or "- none"}

What was decided about them (harness or KubeRay):

{chr(10).join(notes) or "- nothing yet"}

Commands:

{chr(10).join(commands) or "    (recorded from earlier runs)"}
"""


if __name__ == "__main__":
    main()
