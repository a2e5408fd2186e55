"""The main job (or a part of it) with several workers and with one, recorded rather than asserted.

    python benchmarks/parallel_run.py --workers auto                       # the whole main job
    python benchmarks/parallel_run.py --workers 1 --area raycluster --area rayjob
    python benchmarks/parallel_run.py --workers 2 --kuberay-source ~/src/kuberay --label 2-src

Each call runs `kuberay-conformance run --keep-cluster --workers W [--area ...]` (provider local,
default profile) and records: wall time, the spans of the parallel phase and of the exclusive
phase (from the first start to the last end of their checks, as the Allure results time them),
per-area time (the sum of its checks' durations, as summary.json has them: with several workers
these overlap, so they add up to more than the wall time, and a slower machine shows as longer
checks), the worker count the run used, the machine's peak used memory (MemTotal - MemAvailable)
and how busy its CPUs were (the mean, and the share of seconds at 95 % or more: a starved
machine, in which probes time out), both sampled every second while the run lasts, the outcome
counts and the verdict. Each column's figures are kept in benchmarks/results/parallel_run.json
under its label (the worker setting unless `--label`), so calls in several cluster-lock holds
make one comparison in benchmarks/README.md.
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
    command += ["--kuberay-source", args.kuberay_source] if args.kuberay_source else []
    machine_load = MachineLoad().start()
    started = time.monotonic()
    exit_code = subprocess.run(command, cwd=ROOT, check=False).returncode
    wall = round(time.monotonic() - started, 1)
    summary = json.loads((run_dir / "summary.json").read_text())
    result = figures(summary, wall, exit_code, machine_load.stop(), args)
    result["phases_s"] = phase_spans(run_dir / "allure-results", exclusive_checks())
    result["run_dir"] = str(run_dir.relative_to(ROOT))
    everything = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    everything[args.label or args.workers] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(everything, indent=2) + "\n")
    replace_section("parallel-run", render(everything))
    print(json.dumps(result, indent=2))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="auto", help="auto or a number (as `run --workers`)")
    parser.add_argument("--area", action="append", default=[], help="an area to run (repeatable; none: all)")
    parser.add_argument("-k", default="", help="only checks matching this pytest -k expression")
    parser.add_argument("--kuberay-source", default="", help="a KubeRay checkout (as `run --kuberay-source`)")
    parser.add_argument("--label", default="", help="the column's name (default: the worker setting)")
    parser.add_argument("--note", action="append", default=[], help="a sentence to keep with the figures")
    return parser


class MachineLoad:
    """The machine's peak used memory and how busy its CPUs were while a run lasts, once a second."""

    SATURATED = 0.95  # a second with the CPUs this busy or more counts as starved

    def __init__(self) -> None:
        self.peak_kib = 0
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> MachineLoad:
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        seconds = max(1, len(self.busy))
        return {
            "peak_used_memory_gib": round(self.peak_kib / 2**20, 2),
            "cpu_busy_mean_percent": round(100 * sum(self.busy) / seconds, 1),
            "cpu_saturated_seconds_percent": round(100 * self._saturated() / seconds, 1),
        }

    def _saturated(self) -> int:
        return sum(busy >= self.SATURATED for busy in self.busy)

    def _sample(self) -> None:
        last = _cpu_times()
        while not self._stop.wait(1.0):  # poll-interval: the sampling period
            info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
            used = int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])
            self.peak_kib = max(self.peak_kib, used)
            now = _cpu_times()
            total, idle = now[0] - last[0], now[1] - last[1]
            if total > 0:
                self.busy.append(1 - idle / total)
            last = now


def _cpu_times() -> tuple[int, int]:
    """(all jiffies, idle + iowait jiffies) of the machine, from the first line of /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]  # user..steal; guest time is inside user


def exclusive_checks() -> set[str]:
    """The names of the checks marked exclusive, from the listing (junit.xml and Allure carry no markers)."""
    from conformance import listing  # noqa: PLC0415 - a pytest collection, only once the run is over

    checks = listing.collect("default", (), (), None)
    return {c.id.rsplit("::", 1)[-1] for c in checks if "exclusive" in c.markers}


def phase_spans(allure_results: Path, exclusive: set[str]) -> dict[str, float]:
    """Wall seconds from the first start to the last end of the parallel and of the exclusive checks."""
    spans: dict[str, list[int]] = {"parallel": [], "exclusive": []}
    alone = {_base(e) for e in exclusive}
    for path in allure_results.glob("*-result.json"):
        result = json.loads(path.read_text())
        name = result.get("fullName", result.get("name", "")).rsplit("#", 1)[-1]
        phase = "exclusive" if _base(name) in alone else "parallel"
        spans[phase] += [result["start"], result["stop"]]
    return {phase: round((max(ms) - min(ms)) / 1000, 1) for phase, ms in spans.items() if ms}


def _base(name: str) -> str:
    return name.split("[", 1)[0]


def figures(
    summary: dict, wall: float, exit_code: int, load: dict[str, float], args: argparse.Namespace
) -> dict:
    areas: dict[str, float] = defaultdict(float)
    for test in summary["tests"]:
        areas[test["area"]] += test["duration_s"]
    return {
        "date": summary["started"][:10],
        "machine": machine(),
        "selection": (" ".join(f"--area {a}" for a in args.area) or "all areas")
        + (f" -k {args.k}" if args.k else "")
        + (" --kuberay-source" if args.kuberay_source else ""),
        "workers_asked": args.workers,
        "workers": summary["environment"].get("workers"),
        "wall_s": wall,
        "prepare_s": summary["environment"].get("prepare_s"),
        **load,
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
    head = "| figure | " + " | ".join(_column(m, everything[m]) for m in modes) + " |"
    rule = "|---|" + "---|" * len(modes)

    def row(label: str, value: object) -> str:
        return f"| {label} | " + " | ".join(str(value(everything[m])) for m in modes) + " |"  # type: ignore[operator]

    rows = [
        row("date", lambda r: r["date"]),
        row("selection", lambda r: r["selection"]),
        row("kuberay", lambda r: r["versions"].get("kuberay", "")),
        row("workers used", lambda r: r["workers"]),
        row("wall time (s)", lambda r: r["wall_s"]),
        row("of which preparing (s)", lambda r: r["prepare_s"]),
        row("of which the parallel phase (s)", lambda r: r.get("phases_s", {}).get("parallel", "")),
        row("of which the exclusive phase (s)", lambda r: r.get("phases_s", {}).get("exclusive", "")),
        row("peak used memory of the machine (GiB)", lambda r: r["peak_used_memory_gib"]),
        row("CPU busy, mean (%)", lambda r: r.get("cpu_busy_mean_percent", "")),
        row("seconds with CPU >= 95 % busy (%)", lambda r: r.get("cpu_saturated_seconds_percent", "")),
        row("outcomes", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))),
        row("verdict (exit code)", lambda r: f"{r['verdict']} ({r['exit_code']})"),
    ]
    areas = sorted({a for m in modes for a in everything[m]["areas_s"]})
    rows += [row(f"area {a} (s, sum of its checks)", lambda r, a=a: r["areas_s"].get(a, "")) for a in areas]
    not_passed = [
        f"- {_column(m, everything[m])}: {check}: {why}"
        for m in modes
        for check, why in everything[m]["not_passed"].items()
    ]
    same = len({everything[m]["verdict"] for m in modes}) == 1
    notes = [f"- {note}" for note in dict.fromkeys(n for m in modes for n in everything[m].get("notes", []))]
    return "\n".join(
        [
            "## Parallel runs (`run --workers`)",
            "",
            f"Measured on {first['machine']} by `benchmarks/parallel_run.py`, one call per column, "
            "the cluster kept between them (kubernetes "
            + first["versions"].get("kubernetes", "")
            + ", ray "
            + first["versions"].get("ray", "")
            + "; KubeRay per column).",
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


def _column(label: str, result: dict) -> str:
    asked = result.get("workers_asked", label)
    return f"`--workers {asked}`" + ("" if label == asked else f" ({label})")


if __name__ == "__main__":
    main()
