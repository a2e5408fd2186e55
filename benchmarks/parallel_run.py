"""A subset of the main job with several workers and with one, recorded rather than asserted.

    python benchmarks/parallel_run.py --workers auto --area raycluster --area rayjob
    python benchmarks/parallel_run.py --workers 1 --area raycluster --area rayjob

Each call runs `kuberay-conformance run --keep-cluster --workers W --area ...` (provider local,
default profile) and records: wall time, per-area time (the sum of its checks' durations, as
summary.json has them: with several workers these overlap, so they add up to more than the wall
time, and a slower machine shows as longer checks), the worker count the run used, the machine's
peak used memory
(MemTotal - MemAvailable, sampled every second while the run lasts), the outcome counts and
the verdict. Each mode's figures are kept in benchmarks/results/parallel_run.json by its worker
setting, so two calls (two cluster-lock holds) make one comparison in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "parallel_run.json"
CLI = ROOT / ".venv" / "bin" / "kuberay-conformance"


def main() -> None:
    args = _parser().parse_args()
    run_dir = ROOT / "reports" / f"bench-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}"
    command = [str(CLI), "run", "--keep-cluster", "--run-dir", str(run_dir), "--workers", args.workers]
    command += [arg for area in args.area for arg in ("--area", area)] + (["-k", args.k] if args.k else [])
    peak = PeakMemory().start()
    started = time.monotonic()
    exit_code = subprocess.run(command, cwd=ROOT, check=False).returncode
    wall = round(time.monotonic() - started, 1)
    summary = json.loads((run_dir / "summary.json").read_text())
    result = figures(summary, wall, exit_code, peak.stop(), args)
    everything = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    everything[args.workers] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(everything, indent=2) + "\n")
    replace_section("parallel-run", render(everything))
    print(json.dumps(result, indent=2))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="auto", help="auto or a number (as `run --workers`)")
    parser.add_argument("--area", action="append", required=True, help="an area to run (repeatable)")
    parser.add_argument("-k", default="", help="only checks matching this pytest -k expression")
    parser.add_argument("--note", action="append", default=[], help="a sentence to keep with the figures")
    return parser


class PeakMemory:
    """The machine's highest used memory while a run lasts, from /proc/meminfo once a second."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> PeakMemory:
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_kib / 2**20, 2)  # GiB

    def _sample(self) -> None:
        while True:
            info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
            used = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
            self.peak_kib = max(self.peak_kib, used)
            if self._stop.wait(1.0):  # poll-interval: the sampling period
                return


def figures(summary: dict, wall: float, exit_code: int, peak_gib: float, args: argparse.Namespace) -> dict:
    areas: dict[str, float] = defaultdict(float)
    for test in summary["tests"]:
        areas[test["area"]] += test["duration_s"]
    return {
        "date": summary["started"][:10],
        "machine": machine(),
        "selection": " ".join(f"--area {a}" for a in args.area) + (f" -k {args.k}" if args.k else ""),
        "workers_asked": args.workers,
        "workers": summary["environment"].get("workers"),
        "wall_s": wall,
        "prepare_s": summary["environment"].get("prepare_s"),
        "peak_used_memory_gib": peak_gib,
        "areas_s": {area: round(seconds, 1) for area, seconds in sorted(areas.items())},
        "outcomes": dict(Counter(t["outcome"] for t in summary["tests"])),
        "verdict": summary["verdict"],
        "exit_code": exit_code,
        "not_passed": {
            t["id"].rsplit("::", 1)[-1]: f"{t['outcome']}: {t['reason'][:200]}"
            for t in summary["tests"]
            if t["outcome"] not in ("passed", "not_applicable")
        },
        "versions": summary["versions"],
        "notes": args.note,
    }


def render(everything: dict) -> str:
    modes = sorted(everything, key=lambda w: (w != "auto", w))
    first = everything[modes[0]]
    head = "| figure | " + " | ".join(f"--workers {m}" for m in modes) + " |"
    rule = "|---|" + "---|" * len(modes)

    def row(label: str, value: object) -> str:
        return f"| {label} | " + " | ".join(str(value(everything[m])) for m in modes) + " |"  # type: ignore[operator]

    rows = [
        row("date", lambda r: r["date"]),
        row("selection", lambda r: r["selection"]),
        row("workers used", lambda r: r["workers"]),
        row("wall time (s)", lambda r: r["wall_s"]),
        row("of which preparing (s)", lambda r: r["prepare_s"]),
        row("peak used memory of the machine (GiB)", lambda r: r["peak_used_memory_gib"]),
        row("outcomes", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))),
        row("verdict (exit code)", lambda r: f"{r['verdict']} ({r['exit_code']})"),
    ]
    areas = sorted({a for m in modes for a in everything[m]["areas_s"]})
    rows += [row(f"area {a} (s, sum of its checks)", lambda r, a=a: r["areas_s"].get(a, "")) for a in areas]
    not_passed = [
        f"- `--workers {m}`: {check}: {why}"
        for m in modes
        for check, why in everything[m]["not_passed"].items()
    ]
    same = len({everything[m]["verdict"] for m in modes}) == 1
    notes = [f"- {note}" for note in dict.fromkeys(n for m in modes for n in everything[m].get("notes", []))]
    return "\n".join(
        [
            "## Parallel runs (`run --workers`, a subset of the main job)",
            "",
            f"Measured on {first['machine']} by `benchmarks/parallel_run.py`, one call per column, "
            "the cluster kept between them (versions: "
            + ", ".join(f"{k} {v}" for k, v in first["versions"].items())
            + ").",
            "",
            head,
            rule,
            *rows,
            "",
            "Same verdict in every column: " + ("yes." if same else "**no**."),
            *(["", "Checks that did not pass:", *not_passed] if not_passed else []),
            *(["", "Notes:", *notes] if notes else []),
        ]
    )


if __name__ == "__main__":
    main()
