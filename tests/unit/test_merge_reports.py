"""`kuberay-conformance report merge` (conformance/report/merge.py) on shards cut from a real run.

tests/unit/golden/run-s41-delivery-local is a real run's folder (local provider, KubeRay v1.7.0: a
RayService answering through the Gateway and an incremental upgrade under load; its summary.json,
junit.xml, allure-results/ and timelines/). Its checks are dealt to shard folders as `run --shard
K/N` would have written them; the merged report must say what the run said.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.errors import EXIT_USAGE
from conformance.report import history, merge, npm
from conformance.report.summary import load

SOURCE = Path(__file__).parent / "golden" / "run-s41-delivery-local"
VERDICT = re.compile(r'<body data-verdict="([^"]*)" data-complete="(\w+)" data-exit-code="(\d)">')


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A Chart.js in the cache, so no build reaches npm."""
    folder = tmp_path / "cache"
    (npm.CHART_JS.root(folder) / "dist").mkdir(parents=True)
    (npm.CHART_JS.root(folder) / npm.CHART_JS_FILE).write_text("window.ChartStub = 1;\n")
    (npm.CHART_JS.folder(folder) / npm.COMPLETE).write_text("chart.js\n")
    return folder


def _cut(
    root: Path, deal: list[int], count: int, edit: Callable[[int, dict], None] | None = None
) -> list[Path]:
    """Shard folders of the real run: check i goes to shard deal[i] (1-based), out of `count`."""
    data = json.loads((SOURCE / "summary.json").read_text())
    folders = []
    for k in range(1, count + 1):
        mine = [t for i, t in enumerate(data["tests"]) if deal[i] == k]
        folder = root / f"shard-{k}"
        folder.mkdir(parents=True)
        shard = {
            **data,
            "run_id": folder.name,
            "tests": mine,
            "selection": {"tier": "full", "areas": [], "keyword": None, "shard": f"{k}/{count}",
                          "selected": len(data["tests"]), "checks": len(mine), "split": "sha256:0123"},
        }  # fmt: skip
        if edit:
            edit(k, shard)
        (folder / "summary.json").write_text(json.dumps(shard))
        load(folder / "summary.json").write(folder, latest=False)  # its areas counted as a run counts them
        names = {t["id"].split("::", 1)[1] for t in mine}
        _junit(folder, names)
        _allure(folder, names, first=k == 1)
        _timelines(folder, names, first=k == 1)
        folders.append(folder)
    return folders


def _junit(folder: Path, names: set[str]) -> None:
    tree = ET.parse(SOURCE / "junit.xml")
    for suite in tree.getroot().iter("testsuite"):
        for case in list(suite):
            if case.get("name") not in names:
                suite.remove(case)
        suite.set("tests", str(len(suite)))
    tree.write(folder / "junit.xml", encoding="utf-8", xml_declaration=True)


def _allure(folder: Path, names: set[str], first: bool) -> None:
    """The results of the shard's checks, the containers of their fixtures (the rest: shard 1)."""
    (folder / "allure-results").mkdir()
    source = SOURCE / "allure-results"
    mine = {
        json.loads(path.read_text())["uuid"]: path
        for path in source.glob("*-result.json")
        if json.loads(path.read_text())["name"] in names
    }
    every = {json.loads(p.read_text())["uuid"] for p in source.glob("*-result.json")}
    for path in source.iterdir():
        if path.name.endswith("-result.json"):
            keep = path in mine.values()
        else:
            children = set(json.loads(path.read_text()).get("children", []))
            keep = bool(children & set(mine)) or (first and not children & every)
        if keep:
            shutil.copy2(path, folder / "allure-results" / path.name)


def _timelines(folder: Path, names: set[str], first: bool) -> None:
    (folder / "timelines").mkdir()
    functions = {name.split("[", 1)[0] for name in names}
    for path in (SOURCE / "timelines").iterdir():
        if any(path.name.startswith(f) for f in functions) or (first and not _anyones(path.name)):
            shutil.copy2(path, folder / "timelines" / path.name)


def _anyones(name: str) -> bool:
    tests = json.loads((SOURCE / "summary.json").read_text())["tests"]
    return any(name.startswith(t["id"].split("::", 1)[1].split("[", 1)[0]) for t in tests)


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_a_merge_of_the_shards_of_a_real_run_says_what_the_run_said(tmp_path: Path, cache: Path) -> None:
    original = load(SOURCE / "summary.json")
    shards = _cut(tmp_path / "runs", [2, 1], 2)
    out = tmp_path / "merged"
    built = merge.merge(list(reversed(shards)), out, with_allure=False, cache=cache)

    merged = load(out / "summary.json")
    assert merged.areas() == original.areas() and merged.verdict() == original.verdict() == "conformant"
    assert sorted(t.id for t in merged.tests) == sorted(t.id for t in original.tests)
    assert [t.id for t in merged.tests] == [original.tests[1].id, original.tests[0].id]  # shard order
    assert (merged.started, merged.finished) == (original.started, original.finished)
    assert merged.versions == original.versions and merged.exit_code() == original.exit_code() == 0
    assert (
        merged.selection["shards"] == 2 and merged.selection["checks"] == 2 and not merged.selection["shard"]
    )
    assert [run["shard"] for run in merged.merged["runs"]] == ["1/2", "2/2"]  # type: ignore[index, union-attr]
    areas = json.loads((out / "summary.json").read_text())["areas"]
    summed: dict[str, dict[str, int]] = {}
    for shard in shards:
        for area, counts in json.loads((shard / "summary.json").read_text())["areas"].items():
            for key, n in counts.items():
                summed.setdefault(area, {}).setdefault(key, 0)
                summed[area][key] += n
    assert areas == summed

    junit = ET.parse(out / "junit.xml").getroot()
    suites = list(junit.iter("testsuite"))
    assert len(suites) == 1 and suites[0].get("tests") == "2" and len(list(junit.iter("testcase"))) == 2
    assert _files(out / "allure-results") == _files(SOURCE / "allure-results")
    assert _files(out / "timelines") == _files(SOURCE / "timelines")
    match = VERDICT.search((out / "index.html").read_text())
    assert match and match.groups() == ("conformant", "true", "0")
    assert built.earlier == [] and not (tmp_path / "runs" / "latest").exists()


def test_a_merged_report_is_not_a_run_of_its_own_in_later_history(tmp_path: Path, cache: Path) -> None:
    shards = _cut(tmp_path / "reports", [1, 2], 2)
    merge.merge(shards, tmp_path / "reports" / "merged", with_allure=False, cache=cache)
    points, problems = history.collect([tmp_path / "reports"])
    assert problems == [] and [p.run_id for p in points] == ["merged"]


def _bump_kuberay(k: int, shard: dict) -> None:
    if k == 2:
        shard["versions"] = {**shard["versions"], "kuberay": "v1.6.0"}


def _other(key: str, value: object) -> Callable[[int, dict], None]:
    def edit(k: int, shard: dict) -> None:
        if k == 2:
            shard[key] = value

    return edit


def _other_selection(key: str, value: object) -> Callable[[int, dict], None]:
    def edit(k: int, shard: dict) -> None:
        if k == 2:
            shard["selection"][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "cause"),
    [
        (_bump_kuberay, "differ in KubeRay version"),
        (_other("provider", "existing"), "differ in provider"),
        (_other("profile", "attach-local"), "differ in profile"),
        (_other_selection("tier", "smoke"), "differ in their selection of checks (tier"),
        (_other_selection("keyword", "upgrade"), "differ in their selection of checks (keyword"),
        (_other_selection("areas", ["upgrade"]), "differ in their selection of checks (areas"),
        (_other_selection("split", "sha256:other"), "differ in their selection of checks (split"),
        (_other_selection("shard", "2/3"), "differ in their shard count"),
        (_other_selection("shard", "1/2"), "shard 1/2 is given twice"),
        (_other_selection("shard", None), "was not run as a shard"),
        (_other("merged", {"shards": 2, "runs": []}), "is a merged report already"),
    ],
)
def test_runs_that_are_not_the_shards_of_one_run_are_refused(
    tmp_path: Path, edit: Callable[[int, dict], None], cause: str
) -> None:
    shards = _cut(tmp_path / "runs", [1, 2], 2, edit)
    out = tmp_path / "merged"
    with pytest.raises(merge.MergeRefused, match=re.escape(cause)):
        merge.merge(shards, out, with_allure=False)
    assert not out.exists()


def test_a_missing_shard_a_folder_given_twice_and_a_full_out_folder_are_refused(tmp_path: Path) -> None:
    one, two = _cut(tmp_path / "runs", [1, 2], 2)
    out = tmp_path / "merged"
    with pytest.raises(merge.MergeRefused, match="shard 2/2 is missing"):
        merge.merge([one], out, with_allure=False)
    with pytest.raises(merge.MergeRefused, match="are the same run folder"):
        merge.merge([one, two, tmp_path / "runs" / "." / "shard-1"], out, with_allure=False)
    out.mkdir()
    (out / "left-over").write_text("x")
    with pytest.raises(merge.MergeRefused, match="exists and is not empty"):
        merge.merge([one, two], out, with_allure=False)
    assert _files(out) == {"left-over"}


def test_a_merged_report_merged_again_is_refused_by_the_command_in_one_line(
    tmp_path: Path, cache: Path
) -> None:
    shards = _cut(tmp_path / "runs", [1, 2], 2)
    first = tmp_path / "merged"
    merge.merge(shards, first, with_allure=False, cache=cache)
    program = Path(sys.executable).with_name("kuberay-conformance")
    again = tmp_path / "again"
    done = subprocess.run(
        [str(program), "report", "merge", str(first), *map(str, shards), "--out", str(again), "--no-allure"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"kuberay-conformance: error: {first} is a merged report already: merge the shard runs themselves"
    ]
    assert not again.exists()


def test_the_command_merges_and_exits_with_the_verdict(tmp_path: Path, cache: Path) -> None:
    shards = _cut(tmp_path / "runs", [1, 2], 2, _failed_in_shard_two)
    program = Path(sys.executable).with_name("kuberay-conformance")
    out = tmp_path / "merged"
    env = {"KRC_CACHE_DIR": str(cache), "PATH": ""}  # Chart.js from the cache, nothing else found
    done = subprocess.run(
        [str(program), "report", "merge", *map(str, shards), "--out", str(out), "--no-allure"],
        capture_output=True, text=True, check=False, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # not conformant: shard 2's check failed
    assert "merged 2 shards" in done.stdout and "NOT CONFORMANT" in done.stdout.upper()
    assert load(out / "summary.json").verdict() == "not conformant"


def _failed_in_shard_two(k: int, shard: dict) -> None:
    if k == 2:
        shard["tests"][0] = {
            **shard["tests"][0],
            "outcome": "failed",
            "reason": "AssertionError: 3 failed requests",
        }
