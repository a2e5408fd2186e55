"""Size of the reports and the time to build them for a run of 100 checks, recorded rather than asserted.

Makes a synthetic run folder of 100 checks (every outcome kind, metrics, diagnostics bundles
for the failed and errored checks, autoscaling and upgrade timelines, Allure results) beside
five earlier runs, then times `conformance.report.build` warm (Chart.js and Allure already in
the npm cache): index.html alone (median of several builds), and index.html with the Allure
single-file page. Writes benchmarks/results/report_build.json and the matching section of
benchmarks/README.md.

    .venv/bin/python benchmarks/report_build.py
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.local_provider import machine, replace_section  # noqa: E402
from conformance.report import build, npm, timelines  # noqa: E402
from conformance.report.summary import AREAS, Summary, TestResult  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "report_build.json"
CHECKS = 100
EARLIER_RUNS = 5
INDEX_BUILDS = 5
# Of every 50 checks: 40 pass, 4 fail, 2 error, 3 are not applicable, 1 is flaky.
PATTERN = ["passed"] * 40 + ["failed"] * 4 + ["error"] * 2 + ["not_applicable"] * 3 + ["flaky"]


def synthetic_summary(run_id: str, started: datetime.datetime, shift: int = 0) -> Summary:
    summary = Summary(
        run_id=run_id,
        started=started.isoformat(timespec="seconds"),
        finished=(started + datetime.timedelta(minutes=25)).isoformat(timespec="seconds"),
        provider="local",
        profile="default",
        versions={"kubernetes": "v1.35.4", "kuberay": "v1.6.2", "ray": "2.58.0"},
        environment={
            "feature_gates": {"RayClusterStatusConditions": True, "RayCronJob": False},
            "prepare_s": 57.8,
        },
    )
    for n in range(CHECKS):
        kind = PATTERN[(n + shift) % len(PATTERN)]
        area = AREAS[n % len(AREAS)]
        summary.add(
            TestResult(
                id=f"conformance/suites/test_{area.replace('-', '_')}.py::test_check_{n}[ray2.58.0]",
                area=area,
                outcome="passed" if kind == "flaky" else kind,
                duration_s=5.0 + n % 37,
                reason={
                    "failed": "AssertionError: 3 pods, wanted 2",
                    "error": "WaitTimeout: no Ready head in 300 s",
                }.get(kind, "the cluster has no allocatable GPUs" if kind == "not_applicable" else ""),
                metrics={"ready_s": 10.0 + n % 7, "recovery_s": 20.0 + n % 11} if n % 5 == 0 else {},
                issues=["kuberay#3714"] if n % 9 == 0 else [],
                details="AssertionError: 3 pods, wanted 2\nassert 3 == 2" if kind == "failed" else "",
                attempts=2 if kind == "flaky" else 1,
            )
        )
    return summary


def add_evidence(run_dir: Path, summary: Summary) -> None:
    """Diagnostics bundles of the size the collector writes, for every failed or errored check."""
    for test in summary.tests:
        if test.outcome not in ("failed", "error"):
            continue
        bundle = run_dir / "diagnostics" / timelines.slug(test.id)
        (bundle / "logs").mkdir(parents=True)
        (bundle / "events.txt").write_text("10:00:01 Normal Scheduled pod/head assigned\n" * 40)
        (bundle / "ray-resources.yaml").write_text("kind: RayCluster\nspec:\n" + "  x: y\n" * 800)
        for pod in ("head", "worker-a", "worker-b"):
            (bundle / "logs" / f"{pod}.log").write_text(f"{pod} INFO a line of a Ray log\n" * 700)


def add_timelines(run_dir: Path, summary: Summary) -> None:
    checks = [t.id for t in summary.tests]
    for index in range(3):
        recorder = timelines.Recorder(run_dir, checks[index])
        scaling = recorder.autoscaling("workers under queued tasks")
        for t in range(100):
            scaling.replicas("small-group", min(t // 10, 5), desired=min(t // 8, 5), t=t * 3.0)
        recorder.save()
    for index in range(3, 5):
        recorder = timelines.Recorder(run_dir, checks[index])
        upgrade = recorder.upgrade("incremental upgrade at 50 requests/s")
        for t in range(300):
            new = min(100, t // 3)
            upgrade.second(
                t, 50, {"http_503": 1} if t % 97 == 0 else {}, 11.0, 80.0, {"old": 100 - new, "new": new}
            )
        recorder.save()


def add_allure_results(run_dir: Path, summary: Summary) -> None:
    folder = run_dir / "allure-results"
    folder.mkdir(parents=True)
    status = {"passed": "passed", "failed": "failed", "error": "broken", "not_applicable": "skipped"}
    for test in summary.tests:
        module, name = test.id.split("::")
        result = {
            "uuid": str(uuid.uuid4()),
            "historyId": uuid.uuid5(uuid.NAMESPACE_URL, test.id).hex,
            "name": name,
            "fullName": f"{module.removesuffix('.py').replace('/', '.')}#{name.split('[')[0]}",
            "status": status[test.outcome],
            "statusDetails": {"message": test.details or test.reason},
            "start": 1_795_970_000_000,
            "stop": 1_795_970_000_000 + int(test.duration_s * 1000),
            "labels": [{"name": "epic", "value": test.area}, {"name": "story", "value": name}],
            "parameters": [{"name": "ray_version", "value": "'2.58.0'"}],
        }
        (folder / f"{result['uuid']}-result.json").write_text(json.dumps(result))


def make_runs(reports: Path) -> Path:
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    for day in range(EARLIER_RUNS):
        synthetic_summary(f"earlier-{day}", start + datetime.timedelta(days=day), shift=day).write(
            reports / f"earlier-{day}"
        )
    run_dir = reports / "now"
    summary = synthetic_summary("now", start + datetime.timedelta(days=EARLIER_RUNS))
    summary.write(run_dir)
    add_evidence(run_dir, summary)
    add_timelines(run_dir, summary)
    add_allure_results(run_dir, summary)
    return run_dir


def measure(run_dir: Path) -> dict:
    npm.ensure(npm.CHART_JS)  # warm: the first build's npm installs are not what is measured
    npm.ensure(npm.ALLURE)
    index_seconds = []
    for _ in range(INDEX_BUILDS):
        started = time.monotonic()
        build.build(run_dir, with_allure=False)
        index_seconds.append(time.monotonic() - started)
    started = time.monotonic()
    built = build.build(run_dir, with_allure=True)
    full_seconds = time.monotonic() - started
    if built.problems or built.allure is None:
        raise SystemExit(f"the report was not built whole: {built.problems}")
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "checks": CHECKS,
        "bundles": len(list((run_dir / "diagnostics").iterdir())),
        "timelines": len(list((run_dir / "timelines").iterdir())),
        "index_bytes": built.index.stat().st_size,
        "chart_js_bytes": len(npm.chart_js()),
        "index_build_s": round(statistics.median(index_seconds), 3),
        "index_build_s_range": [round(min(index_seconds), 3), round(max(index_seconds), 3)],
        "allure_bytes": built.allure.stat().st_size,
        "full_build_s": round(full_seconds, 2),
        "versions": {"chart.js": npm.CHART_JS.version, "allure": npm.ALLURE.version},
    }


def render(result: dict) -> str:
    low, high = result["index_build_s_range"]
    kib = {key: f"{result[key] / 1024:.0f} KiB" for key in ("index_bytes", "chart_js_bytes")}
    size = f"{kib['index_bytes']} (of which Chart.js {kib['chart_js_bytes']})"
    median = f"{result['index_build_s']:.2f} s (min {low:.2f}, max {high:.2f})"
    return f"""## Report build (`benchmarks/report_build.py`)

Measured {result["date"]} on {result["machine"]} by `benchmarks/report_build.py`:
a synthetic run of {result["checks"]} checks (every outcome kind, {result["bundles"]} diagnostics bundles,
{result["timelines"]} timelines, {EARLIER_RUNS} earlier runs for history), npm cache warm;
Chart.js {result["versions"]["chart.js"]}, Allure Report {result["versions"]["allure"]}.

| figure | value |
|---|---|
| `index.html` size (self-contained) | {size} |
| `index.html` build time (median of {INDEX_BUILDS}) | {median} |
| Allure single-file page size | {result["allure_bytes"] / 2**20:.1f} MiB |
| build time with the Allure page (node, `nice -n 10`) | {result["full_build_s"]:.1f} s |"""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="krc-report-bench-") as folder:
        result = measure(make_runs(Path(folder) / "reports"))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replace_section("report-build", render(result))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
