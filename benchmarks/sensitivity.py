"""The sensitivity suite's figures: per seeded fault, its seed, the check that caught it, the outcome
and the time it took; written as the "sensitivity" section of benchmarks/README.md.

    python benchmarks/sensitivity.py        # after `make sensitivity` (or a -k part of it)

Reads benchmarks/results/sensitivity/<fault>.json, which tests/sensitivity/ writes per fault.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "sensitivity"


def _catching(test: str, record: dict) -> bool:
    """Whether a test id is one of the fault's catching checks: its name, and the check's
    parametrization part within its parameters (as tests/sensitivity matches them)."""
    base, _, params = test.partition("[")
    for check in record["catches"]:
        name, _, param = check.partition("[")
        if base == name and param.rstrip("]") in params:
            return True
    return False


def caught(record: dict) -> str:
    """The catching checks' outcomes, e.g. `failed`; several different ones are listed."""
    outcomes = {outcome for test, outcome in record["outcomes"].items() if _catching(test, record)}
    return ", ".join(sorted(outcomes)) or "did not run"


def others_green(record: dict) -> str:
    others = [outcome for test, outcome in record["outcomes"].items() if not _catching(test, record)]
    red = [o for o in others if o not in ("passed", "not_applicable")]
    return f"{len(others) - len(red)}/{len(others)}"


def defined_faults() -> list[tuple[str, str, str]]:
    """(area, fault name, misbehaviour) of every fault tests/sensitivity defines."""
    sys.path.insert(0, str(ROOT / "tests"))
    from sensitivity.faults import all_faults  # noqa: PLC0415 - the suite's package, beside tests/

    return [(f.area, f.name, f.misbehaviour) for f in all_faults()]


def proven(records: list[dict]) -> set[str]:
    """Checks (test ids without the suites' folder) a recorded fault turned red as `failed`, as it
    expected (a seeded missing precondition, expected not applicable, proves no failing)."""
    return {
        test
        for r in records
        for test, outcome in r["outcomes"].items()
        if _catching(test, r) and outcome == r["expect"] == "failed"
    }


def coverage(records: list[dict], checks: list[tuple[str, str]]) -> list[str]:
    """How many of the conformance checks (area, id) a recorded fault proves, and the others."""
    shown = proven(records)
    left = [(area, check) for area, check in checks if check not in shown and area != "harness"]
    scored = [c for c in checks if c[0] != "harness"]
    lines = ["", f"Checks a recorded fault proves able to fail: {len(scored) - len(left)} of {len(scored)}."]
    if left:
        lines.append("Not yet proven by a recorded fault: " + ", ".join(f"`{c}`" for _, c in left) + ".")
    return lines


def all_checks() -> list[tuple[str, str]]:
    """(area, id) of every check of the default profile, ids as the fault records write them."""
    from conformance.listing import collect  # noqa: PLC0415 - a pytest collection, only when tabulating

    return [(c.area, c.id.removeprefix("conformance/suites/")) for c in collect("default", (), (), None)]


def render(
    records: list[dict], missing: list[tuple[str, str, str]] = (), every_check: list[tuple[str, str]] = ()
) -> str:
    dates = sorted({r["date"] for r in records})
    lines = [
        "## Sensitivity suite (`make sensitivity`)",
        "",
        f"{len(records)} seeded faults, recorded {', '.join(dates)} on {machine()}.",
        "Each fault runs its catching check(s) and a few bystanders through `kuberay-conformance run`",
        "with KubeRay misconfigured (operator env, arguments or gates in a copy of the default profile)",
        "or acted on behind its back (a rogue plugin in the run); `restore` is putting the healthy",
        "operator back. A fault passes when its catching check ended as expected (`failed`, or",
        "`not_applicable` for a seeded missing precondition) and every bystander stayed green.",
        "",
        "| area | fault | seed | caught by | outcome | bystanders green | run s | restore s | run id |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        checks = "<br>".join(f"`{c.split('::', 1)[-1]}`" for c in r["catches"])
        outcome = f"{caught(r)} (expected {r['expect']})"
        times = f"{r['run_s']:.0f} | {r['restore_s']:.0f}"
        lines.append(
            f"| {r['area']} | {r['misbehaviour']} | {r['seed']} | {checks} | {outcome} "
            f"| {others_green(r)} | {times} | {r['run_id']} |"
        )
    for area, name, misbehaviour in missing:
        lines.append(f"| {area} | {misbehaviour} | (`{name}`) | not recorded yet | | | | | |")
    total = sum(r["run_s"] + r["restore_s"] for r in records)
    lines += ["", f"Total: {total / 60:.1f} minutes of cluster time (runs and restores)."]
    if every_check:
        lines += coverage(records, every_check)
    return "\n".join(lines)


def main() -> None:
    records = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    if not records:
        sys.exit(f"no results in {RESULTS}: run `make sensitivity` first")
    records.sort(key=lambda r: (r["area"], r["fault"]))
    recorded = {r["fault"] for r in records}
    missing = [f for f in defined_faults() if f[1] not in recorded]
    text = render(records, missing, all_checks())
    replace_section("sensitivity", text)
    print(text)


if __name__ == "__main__":
    main()
