"""index.html (and the Allure page) in a real headless Chromium from Debian, driven by Selenium.

One earlier run and one current run with every outcome kind, in one reports folder, so the
current report has history to compare with. The browser runs with its network emulated
offline, and every request it makes is read from its performance log: a self-contained
report makes none but for its own file. A screenshot of each page is kept in
reports/test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import json
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from conformance.report import timelines

ARTIFACTS = Path(__file__).resolve().parents[2] / "reports" / "test-artifacts"
CURRENT_KINDS = ["passed", "failed", "error", "not_applicable", "flaky", "history"]
FAILED_ID_END = "test_checks.py::test_ttl_deletes_the_cluster"
RENDER_WITHIN_S = 60


@pytest.fixture(scope="module")
def reports(make_runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """reports/earlier and reports/now; now's failed check has a diagnostics bundle."""
    runs = make_runs(tmp_path_factory.mktemp("browser"))
    runs.run("earlier", ["passed", "history"], phase="earlier")
    now, _ = runs.run("now", CURRENT_KINDS)
    failed = next(t["id"] for t in runs.summary(now)["tests"] if t["id"].endswith(FAILED_ID_END))
    bundle = now / "diagnostics" / timelines.slug(failed)
    (bundle / "operator").mkdir(parents=True)
    (bundle / "events.txt").write_text("10:00:01 Normal Created rayjob/ttl created RayCluster ttl-abcde\n")
    (bundle / "ray-resources.yaml").write_text("kind: RayCluster\nmetadata: {name: ttl-abcde}\n")
    (bundle / "operator" / "kuberay-operator.log").write_text("INFO reconcile RayJob ttl\n")
    done = runs.report(now)  # rebuilt, as CI would, with the bundle and the history beside it
    assert done.returncode == 1, done.stdout + done.stderr
    return now


def _chromium() -> tuple[str, str]:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail("Debian's chromium and chromium-driver are needed: `make host-deps` installs them")
    return browser, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0}
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    yield driver
    driver.quit()


def _open(driver: webdriver.Chrome, page: Path, ready: str) -> tuple[list[dict], list[str]]:
    """Load `page` and wait until `ready` (JS) holds; returns the console's errors and every URL requested."""
    driver.get_log("browser")  # drop what earlier pages left
    driver.get_log("performance")
    driver.get(page.as_uri())
    deadline = time.monotonic() + RENDER_WITHIN_S
    while not driver.execute_script(f"return Boolean({ready})"):
        assert time.monotonic() < deadline, f"{page.name} did not render within {RENDER_WITHIN_S} s"
        time.sleep(0.2)  # polls the page's own readiness; the page is what is being checked
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    return errors, _requested(driver)


def _requested(driver: webdriver.Chrome) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _screenshot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height), 12000))
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), "no screenshot"
    driver.set_window_size(1280, 1600)
    return path


def test_the_report_opens_offline_with_no_console_errors_and_requests_nothing(browser, reports: Path) -> None:
    errors, requested = _open(browser, reports / "index.html", "document.body.dataset.chartsDrawn")
    assert errors == []
    assert requested == [(reports / "index.html").as_uri()]  # the page itself and nothing else
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []
    shot = _screenshot(browser, "index.png")
    assert shot.stat().st_size > 50_000


def _junit_cases(run_dir: Path) -> dict[tuple[str, str], str]:
    """(classname, name) -> passed | failed | skipped; a rerun's last attempt overwrites its first."""
    cases = {}
    for case in ET.parse(run_dir / "junit.xml").getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        status = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        cases[(case.get("classname"), case.get("name"))] = status
    return cases


# junit.xml knows passed, failed and skipped; the report's statuses say more.
JUNIT_STATUS = {
    "passed": "passed",
    "flaky": "passed",
    "failed": "failed",
    "error": "failed",
    "not_applicable": "skipped",
    "skipped": "skipped",
}


def test_the_matrix_rows_match_junit_xml(browser, reports: Path) -> None:
    _open(browser, reports / "index.html", "document.body.dataset.chartsDrawn")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.matrix tr.check")
    shown = {
        (row.get_attribute("data-junit-classname"), row.get_attribute("data-junit-name")): JUNIT_STATUS[
            row.get_attribute("data-status")
        ]
        for row in rows
    }
    assert len(rows) == len(shown)  # no check twice
    assert shown == _junit_cases(reports)
    statuses = {row.get_attribute("data-status") for row in rows}
    assert statuses == {"passed", "failed", "error", "not_applicable", "flaky"}


def test_every_chart_is_drawn(browser, reports: Path) -> None:
    _open(browser, reports / "index.html", "document.body.dataset.chartsDrawn")
    drawn = browser.execute_script(
        """return [...document.querySelectorAll('canvas[data-chart]')].map(c => {
             const chart = Chart.getChart(c);
             const pixels = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let inked = 0;
             for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked++;
             const kind = chart ? chart.config.type : null;
             return [c.dataset.chart, kind, chart ? chart.data.datasets.length : 0, inked];
           })"""
    )
    kinds = sorted(name for name, *_ in drawn)
    # area durations, recovery times, the history trend, one autoscaling timeline, one upgrade's three
    assert kinds == sorted(
        [
            "area-durations",
            "recovery",
            "trend",
            "autoscaling",
            "upgrade-requests",
            "upgrade-latency",
            "upgrade-traffic",
        ]
    )
    for name, kind, datasets, inked in drawn:
        assert kind is not None and datasets > 0, f"{name}: no chart"
        assert inked > 1000, f"{name}: the canvas is blank"
    assert browser.execute_script("return document.body.dataset.chartsDrawn") == str(len(drawn))
    upgrade = next(c for c in drawn if c[0] == "upgrade-requests")
    assert upgrade[2] == 2  # succeeded, and the one error kind (http_503)


def test_history_marks_the_regression_and_the_fix(browser, reports: Path) -> None:
    _open(browser, reports / "index.html", "document.body.dataset.chartsDrawn")

    def marks(name: str) -> list[str]:
        row = browser.find_element(By.CSS_SELECTOR, f"tr.check[data-id$='::{name}']")
        return [m.text for m in row.find_elements(By.CSS_SELECTOR, ".mark")]

    assert marks("test_regresses") == ["regression"]
    assert marks("test_gets_fixed") == ["fixed"]
    assert marks("test_head_becomes_ready") == []
    changes = browser.find_element(By.ID, "changes").text
    assert "regression: test_checks.py::test_regresses" in changes
    assert "fixed: test_checks.py::test_gets_fixed" in changes
    trend = browser.find_elements(By.CSS_SELECTOR, "#trend-table tbody tr")
    assert [row.find_element(By.TAG_NAME, "th").text for row in trend] == ["earlier", "now"]


def test_a_failed_check_shows_its_assertion_diagnostics_and_issue(browser, reports: Path) -> None:
    _open(browser, reports / "index.html", "document.body.dataset.chartsDrawn")
    card = browser.find_element(By.CSS_SELECTOR, f"#failures article[data-id$='{FAILED_ID_END}']")
    assert (
        "the RayCluster was still there 30 s after the TTL"
        in card.find_element(By.CLASS_NAME, "assertion").text
    )
    assert "assert 1 == 0" in card.find_element(By.CLASS_NAME, "assertion").text
    link = card.find_element(By.LINK_TEXT, "kuberay#3714")
    assert link.get_attribute("href") == "https://github.com/ray-project/kuberay/issues/3714"
    files = card.find_elements(By.CSS_SELECTOR, "details.bundle-file")
    assert [f.find_element(By.TAG_NAME, "summary").text.split(" ")[0] for f in files] == [
        "events.txt",
        "operator/kuberay-operator.log",
        "ray-resources.yaml",
    ]
    files[0].click()  # open the events: the excerpt is in the page itself
    assert "created RayCluster ttl-abcde" in files[0].find_element(By.TAG_NAME, "pre").text
    errors = browser.find_elements(By.CSS_SELECTOR, "#errors article")
    assert [e.get_attribute("data-id").rsplit("::", 1)[-1] for e in errors] == ["test_head_is_restored"]


def test_the_allure_single_file_report_opens_offline(browser, reports: Path) -> None:
    page = reports / "allure-report" / "index.html"
    ready = "document.body.innerText.includes('test_ttl_deletes_the_cluster')"
    errors, requested = _open(browser, page, ready)
    assert errors == []
    assert [url for url in requested if not url.startswith(("file:", "data:", "blob:"))] == []
    _screenshot(browser, "allure.png")
    # Allure's own history: the earlier run's report, then this one's, once though it was built twice.
    points = [json.loads(line) for line in (reports / "allure-history.jsonl").read_text().splitlines()]
    assert len(points) == 2
    assert [len(p["testResults"]) for p in points] == [6, 10]
