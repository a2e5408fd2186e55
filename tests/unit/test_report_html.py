"""index.html's content from a run folder (no browser), the terminal summary, and rebuilding a killed run."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conformance.errors import HarnessError, UsageError
from conformance.report import allure, build, html, npm, terminal
from conformance.report.allure import summary_from_results
from conformance.report.summary import Summary
from conformance.report.summary import TestResult as Result

SCRIPT_END = "</script><script>window.broken = 1</script>"


class Tags(HTMLParser):
    """Every start tag with its attributes, and the page's text, from rendered HTML."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _summary(complete: bool = True) -> Summary:
    summary = Summary(
        run_id="r1",
        started="2026-11-29T10:00:00+00:00",
        finished="2026-11-29T10:20:00+00:00",
        provider="local",
        profile="default",
        versions={"kubernetes": "v1.35.4", "kuberay": "v1.6.2", "ray": "2.58.0"},
        complete=complete,
        environment={"feature_gates": {"RayCronJob": False}, "notes": ["KubeRay v1.7.0 was asked for"]},
    )
    results = [
        Result("conformance/suites/test_rc.py::test_ok[ray2.58.0]", "raycluster", "passed", 3.0),
        Result(
            "conformance/suites/test_rj.py::test_ttl[ray2.58.0]",
            "rayjob",
            "failed",
            40.0,
            "AssertionError: x",
            issues=["kuberay#3714"],
            details=f"assert 1 == 2 {SCRIPT_END}",
        ),
        Result(
            "conformance/suites/test_fr.py::test_head", "fault-recovery", "error", 5.0, "WaitTimeout: head"
        ),
        Result(
            "conformance/suites/test_gpu.py::test_gpu", "gpu", "not_applicable", 0.0, "no allocatable GPUs"
        ),
        Result(
            "conformance/suites/test_as.py::test_up",
            "autoscaling",
            "passed",
            9.0,
            attempts=2,
            metrics={"recovery_s": 12.5},
        ),
    ]
    for result in results:
        summary.add(result)
    return summary


def _render(tmp_path: Path, summary: Summary) -> Tags:
    inputs = html.Inputs(summary=summary, run_dir=tmp_path, chart_js=None)
    return Tags(html.render(inputs))


def test_each_check_is_one_row_with_its_status_and_junit_names(tmp_path: Path) -> None:
    page = _render(tmp_path, _summary())
    rows = {r["data-id"]: r for r in page.find("tr", **{"class": "check"})}
    assert {r["data-status"] for r in rows.values()} == {
        "passed",
        "failed",
        "error",
        "not_applicable",
        "flaky",
    }
    ttl = rows["conformance/suites/test_rj.py::test_ttl[ray2.58.0]"]
    assert (ttl["data-junit-classname"], ttl["data-junit-name"]) == (
        "conformance.suites.test_rj",
        "test_ttl[ray2.58.0]",
    )
    assert rows["conformance/suites/test_as.py::test_up"]["data-outcome"] == "passed"  # flaky still passed


def test_failures_and_harness_errors_are_apart_and_an_incomplete_run_says_so(tmp_path: Path) -> None:
    page = _render(tmp_path, _summary(complete=False))
    body = page.find("body")[0]
    assert (body["data-verdict"], body["data-exit-code"], body["data-complete"]) == (
        "not conformant",
        "1",
        "false",
    )
    assert page.find("div", id="incomplete")
    assert [a["data-id"] for a in page.find("article") if "evidence-failed" in a["class"]] == [
        "conformance/suites/test_rj.py::test_ttl[ray2.58.0]"
    ]
    assert [a["data-id"] for a in page.find("article") if "evidence-error" in a["class"]] == [
        "conformance/suites/test_fr.py::test_head"
    ]
    assert page.find("a", href="https://github.com/ray-project/kuberay/issues/3714")


def test_text_from_a_check_cannot_end_a_script_or_inject_markup(tmp_path: Path) -> None:
    summary = _summary()
    summary.tests[0].metrics = {"x_s": 1}
    inputs = html.Inputs(summary=summary, run_dir=tmp_path, chart_js="var Chart;</script>")
    inputs.timelines = [
        html.timelines.parse(
            {
                "schema": 1,
                "kind": "autoscaling",
                "check": "t.py::x",
                "title": SCRIPT_END,
                "series": {"g": [[0, 1]]},
            }
        )
    ]
    text = html.render(inputs)
    assert SCRIPT_END not in text  # escaped in the markup, in the data and in the inlined library
    page = Tags(text)
    data = json.loads(next(s for s in page.scripts if s.startswith("{")))
    assert data["timelines"][0]["title"] == SCRIPT_END  # the data survives intact inside the page
    assert len(page.find("script")) == 3  # data, Chart.js, our script: nothing injected


def test_diagnostics_are_embedded_as_excerpts_and_linked(tmp_path: Path) -> None:
    bundle = tmp_path / "diagnostics" / "conformance-suites-test-rj-py"  # the module's namespace
    (bundle / "logs").mkdir(parents=True)
    (bundle / "events.txt").write_text("Normal Created pod/x\n")
    (bundle / "ray-resources.yaml").write_text("kind: RayJob\n" + "x: y\n" * 20_000)
    (bundle / "logs" / "head.log").write_text("start\n" + "." * 20_000 + "\nthe last line\n")
    (tmp_path / "diagnostics" / "conformance-suites-test-rc-py").mkdir()  # another module's
    summary = _summary()
    row = html.row(summary.tests[1], html.history.Changes())
    shown = html.evidence(row, tmp_path)
    assert shown["bundles"] == ["diagnostics/conformance-suites-test-rj-py"]
    files = {f["name"]: f for f in shown["files"]}
    assert files["events.txt"]["excerpt"] == "Normal Created pod/x\n" and not files["events.txt"]["cut"]
    assert (
        files["ray-resources.yaml"]["excerpt"].startswith("kind: RayJob")
        and files["ray-resources.yaml"]["cut"]
    )
    assert files["logs/head.log"]["excerpt"].endswith("the last line\n")
    assert len(files["logs/head.log"]["excerpt"]) == html.LOG_EXCERPT_BYTES
    assert files["logs/head.log"]["href"] == "diagnostics/conformance-suites-test-rj-py/logs/head.log"


def test_the_terminal_summary_fits_one_screen_and_keeps_failures_apart_from_errors(tmp_path: Path) -> None:
    summary = _summary()
    for n in range(30):
        summary.add(
            Result(f"conformance/suites/test_rj.py::test_f{n}", "rayjob", "failed", 1.0, "AssertionError")
        )
    lines = terminal.lines(build.Built(summary, tmp_path / "index.html"), width=80)
    assert lines[0] == "KubeRay conformance: NOT CONFORMANT (exit 1)"
    texts = [
        line for line in lines if not line.startswith(("report:", "allure:", "results:"))
    ]  # paths stay whole
    assert len(lines) <= 30 and max(len(line) for line in texts) <= 80
    failed = lines.index("failed (KubeRay did not behave as documented):")
    errors = next(i for i, line in enumerate(lines) if line.startswith("errors (the environment"))
    assert lines[failed + terminal.LISTED + 1] == "  ... and 25 more"
    assert lines[errors + 1].startswith("  ! test_head")
    assert lines[-3] == f"report:  {tmp_path / 'index.html'}"


def _allure_result(
    folder: Path, name: str, status: str, epic: str, message: str = "", stop: int = 2000
) -> None:
    data = {
        "name": name,
        "fullName": f"conformance.suites.test_rj#{name.split('[', maxsplit=1)[0]}",
        "status": status,
        "statusDetails": {"message": message},
        "start": 1_000,
        "stop": stop,
        "labels": [{"name": "epic", "value": epic}],
        "links": [
            {
                "type": "issue",
                "url": "https://github.com/ray-project/kuberay/issues/1141",
                "name": "kuberay#1141",
            }
        ],
    }
    (folder / f"{name}-{stop}-result.json").write_text(json.dumps(data))


def test_a_run_killed_before_its_summary_is_rebuilt_from_allure_results_as_incomplete(tmp_path: Path) -> None:
    results = tmp_path / "allure-results"
    results.mkdir()
    _allure_result(results, "test_a[ray2.58.0]", "passed", "rayjob")
    _allure_result(results, "test_b", "failed", "rayjob", "AssertionError: cluster kept\nassert 1 == 0")
    _allure_result(results, "test_c", "broken", "fault-recovery", "WaitTimeout: head")
    _allure_result(results, "test_d", "skipped", "gpu", "Skipped: not applicable: no GPUs")
    _allure_result(results, "test_e", "failed", "autoscaling", "AssertionError: first try", stop=1500)
    _allure_result(results, "test_e", "passed", "autoscaling", stop=3000)  # a retry that passed
    _allure_result(results, "test_z", "passed", "not-an-area")
    summary = build.load_results(tmp_path)
    outcomes = {t.id.rsplit("::", 1)[-1]: (t.outcome, t.reason, t.attempts) for t in summary.tests}
    assert outcomes == {
        "test_a[ray2.58.0]": ("passed", "", 1),
        "test_b": ("failed", "AssertionError: cluster kept", 1),
        "test_c": ("error", "WaitTimeout: head", 1),
        "test_d": ("not_applicable", "no GPUs", 1),
        "test_e": ("passed", "", 2),
    }
    assert summary.tests[0].id == "conformance/suites/test_rj.py::test_a[ray2.58.0]"
    assert summary.tests[0].issues == ["kuberay#1141"]
    assert (summary.complete, summary.verdict(), summary.exit_code()) == (False, "not conformant", 1)
    assert summary.started == "1970-01-01T00:00:01+00:00"
    assert summary == summary_from_results(tmp_path)


def test_a_folder_without_results_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no results"):
        build.build(tmp_path, with_allure=False)


def test_a_build_inlines_the_cached_chart_library_without_its_source_map(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    root = npm.CHART_JS.root(cache)
    (root / "dist").mkdir(parents=True)
    (root / npm.CHART_JS_FILE).write_text(
        "window.ChartStub = 1;\n//# sourceMappingURL=chart.umd.min.js.map\n"
    )
    (npm.CHART_JS.folder(cache) / npm.COMPLETE).write_text("chart.js\n")
    run = tmp_path / "reports" / "r1"
    _summary().write(run)
    built = build.build(run, with_allure=False, cache=cache)
    text = built.index.read_text()
    assert "window.ChartStub = 1;" in text and "sourceMappingURL" not in text
    assert built.problems == [] and built.allure is None
    assert not re.search(r"<(link|img|iframe)\b|\ssrc=", text)  # nothing for a browser to fetch


def test_the_allure_page_loses_its_analytics_call_and_nothing_else() -> None:
    before = "<script>window.allure = {};</script>\n"
    after = "<script async>window.allureReportDataReady = false;</script>"
    analytics = (
        '<script async src="https://www.googletagmanager.com/gtag/js?id=G-X"></script>\n'
        "<script>\n  window.dataLayer = window.dataLayer || [];\n  gtag('js', new Date());\n</script>\n"
    )
    assert allure.without_analytics(before + analytics + after) == before + after
    with pytest.raises(HarnessError, match="analytics service"):
        allure.without_analytics('<script src="https://www.googletagmanager.com/gtm.js"></script>')


def test_an_exposing_profile_is_marked_in_the_environment_table() -> None:
    def row(service_type: str | None) -> str:
        environment = {} if service_type is None else {"head_service_type": service_type}
        summary = Summary(run_id="r", started="s", provider="local", profile="p", versions={})
        summary.environment = environment
        return dict(html.facts(summary)).get("Ray head Service", "")

    assert row(None) == ""
    assert "inside the cluster only" in row("ClusterIP")
    assert "EXPOSED" in row("NodePort") and row("LoadBalancer").startswith("LoadBalancer")


def test_the_nodes_cpu_is_shown_apart_from_the_metrics_and_a_starved_node_is_marked(tmp_path: Path) -> None:
    summary = _summary()
    calm = Result(
        "conformance/suites/test_rc.py::test_calm", "raycluster", "passed", 2.0, metrics={"x_s": 1.0}
    )
    calm.node_cpu = {"pressure_mean_percent": 20.0, "pressure_max_percent": 41.0}
    busy = Result(
        "conformance/suites/test_rc.py::test_busy", "raycluster", "failed", 2.0, "AssertionError: y"
    )
    busy.node_cpu = {"pressure_mean_percent": 70.0, "pressure_max_percent": 88.0, "admission_wait_s": 12.0}
    summary.add(calm)
    summary.add(busy)
    text = html.render(html.Inputs(summary=summary, run_dir=tmp_path, chart_js=None))
    page = Tags(text)
    assert len(page.find("span", **{"class": "node-cpu"})) == 1  # the calm one
    assert len(page.find("span", **{"class": "node-cpu starved"})) == 1
    assert "node CPU mean 70%, max 88%, waited 12 s for room" in text
    assert len(page.find("span", **{"class": "metric"})) == 2  # recovery_s and x_s: no CPU figure among them
