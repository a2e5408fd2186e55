"""`report merge`: one report of the shards of a run (`run --shard K/N`, K = 1..N).

Writes into an empty folder what a run writes: summary.json (the shards' checks together, each
area's counts their sum, started the earliest, finished the latest), junit.xml (one test suite of
every shard's test cases), allure-results/, diagnostics/ and timelines/ (copied together), then
index.html and the Allure page through report/build.py, so the verdict and counts are those of the
shards together. summary.json's `merged` names the shards, and marks the folder as merged: merging
it again is refused. `latest` is not pointed at a merge.

Refused with one line (exit 3, nothing written) unless the runs are the N shards of one selection
on one KubeRay: the same provider, profile and versions, the same tier, areas, keyword and split,
and shard indices exactly 1..N, each once (see `check`). A shard whose environment could not be
prepared recorded no versions: it is merged (its checks are errors), and the versions are those the
other shards recorded.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import UsageError
from conformance.report import build, history
from conformance.report.shards import Shard, parse_shard
from conformance.report.summary import Summary, load

COPIED = ("allure-results", "diagnostics", "timelines")  # folders whose files are the shards' own
JUNIT = "junit.xml"
VERSION_NAMES = {"kuberay": "KubeRay version", "kubernetes": "Kubernetes version", "ray": "Ray versions"}
# The selection's keys a merge compares: all but the shard index and the shard's own count.
SAME_SELECTION = ("tier", "areas", "keyword", "selected", "split")
_JUNIT_COUNTS = ("tests", "errors", "failures", "skipped")


class MergeRefused(UsageError):
    """The runs are not the shards of one run: exit 3, nothing written."""


@dataclass(frozen=True)
class ShardRun:
    folder: Path
    summary: Summary
    shard: Shard


def merge(
    folders: Sequence[Path], out: Path, with_allure: bool = True, cache: Path | None = None
) -> build.Built:
    """Check the shards (refusing before anything is written), then write the merged report."""
    shards = check(folders, out)
    summary = merged_summary(shards, out.name)
    out.mkdir(parents=True, exist_ok=True)
    for shard in shards:
        _copy_results(shard.folder, out)
    _write_junit([s.folder / JUNIT for s in shards], out / JUNIT)
    summary.write(out, latest=False)
    exclude = [s.summary.run_id for s in shards]  # the shards are parts of this run, not its past
    return build.build(out, with_allure=with_allure, cache=cache, exclude_runs=exclude)


# -- the checks: everything is refused before anything is written -------------------------------


def check(folders: Sequence[Path], out: Path) -> list[ShardRun]:
    """The shards in index order, or MergeRefused naming the first cause."""
    _distinct(folders, out)
    runs = [_loaded(folder) for folder in folders]
    for folder, summary in runs:
        if summary.merged:
            raise MergeRefused(f"{folder} is a merged report already", "merge the shard runs themselves")
    _same_run(runs)
    shards = [ShardRun(folder, summary, _shard_of(folder, summary)) for folder, summary in runs]
    _same_selection(shards)
    _every_index_once(shards)
    _no_check_twice(shards)
    return sorted(shards, key=lambda s: s.shard)


def _distinct(folders: Sequence[Path], out: Path) -> None:
    if not folders:
        raise MergeRefused("no run folders given", "give the folders of a run's shards")
    seen: dict[Path, Path] = {}
    for folder in folders:
        real = folder.resolve()
        if real in seen:
            raise MergeRefused(f"{seen[real]} and {folder} are the same run folder", "give each shard once")
        seen[real] = folder
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MergeRefused(f"--out {out} exists and is not empty", "give a new or empty folder")
    if out.resolve() in seen:
        raise MergeRefused(f"--out {out} is one of the runs", "give a new or empty folder")


def _loaded(folder: Path) -> tuple[Path, Summary]:
    path = folder / "summary.json"
    if not path.is_file():
        raise MergeRefused(f"{folder} holds no summary.json", "give the folders of finished shard runs")
    try:
        return folder, load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MergeRefused(f"{path} is not a readable summary.json ({exc})") from None


def _same_run(runs: Sequence[tuple[Path, Summary]]) -> None:
    """One provider, one profile, one set of versions (where a shard recorded them)."""
    first_folder, first = runs[0]
    for folder, summary in runs[1:]:
        for what, mine, theirs in (
            ("provider", first.provider, summary.provider),
            ("profile", first.profile, summary.profile),
        ):
            if mine != theirs:
                raise MergeRefused(f"the runs differ in {what}: {first_folder} {mine}, {folder} {theirs}")
    for key, name in VERSION_NAMES.items():
        recorded = {str(f): s.versions[key] for f, s in runs if s.versions.get(key)}
        if len(set(recorded.values())) > 1:
            said = ", ".join(f"{folder} {version}" for folder, version in recorded.items())
            raise MergeRefused(f"the runs differ in {name}: {said}")


def _shard_of(folder: Path, summary: Summary) -> Shard:
    text = summary.selection.get("shard")
    if not text:
        raise MergeRefused(f"{folder} was not run as a shard", "merge the runs of `run --shard K/N`")
    return parse_shard(str(text))


def _same_selection(shards: Sequence[ShardRun]) -> None:
    first = shards[0]
    for other in shards[1:]:
        if other.shard.count != first.shard.count:
            raise MergeRefused(
                f"the runs differ in their shard count: {first.folder} is shard {first.shard}, "
                f"{other.folder} shard {other.shard}"
            )
        for key in SAME_SELECTION:
            mine, theirs = first.summary.selection.get(key), other.summary.selection.get(key)
            if mine != theirs:
                raise MergeRefused(
                    f"the runs differ in their selection of checks ({key}: {first.folder} {mine!r}, "
                    f"{other.folder} {theirs!r})",
                    "merge the shards of one selection",
                )


def _every_index_once(shards: Sequence[ShardRun]) -> None:
    count = shards[0].shard.count
    by_index: dict[int, list[Path]] = {}
    for shard in shards:
        by_index.setdefault(shard.shard.index, []).append(shard.folder)
    for index, folders in sorted(by_index.items()):
        if len(folders) > 1:
            raise MergeRefused(f"shard {index}/{count} is given twice: {', '.join(map(str, folders))}")
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in by_index]
    if missing:
        raise MergeRefused(f"shard {', '.join(missing)} is missing", "give every shard of the run")


def _no_check_twice(shards: Sequence[ShardRun]) -> None:
    """A check in two shards means their split differed after all (another collection)."""
    where: dict[str, Shard] = {}
    for shard in shards:
        for test in shard.summary.tests:
            if test.id in where:
                raise MergeRefused(f"check {test.id} is in shards {where[test.id]} and {shard.shard}")
            where[test.id] = shard.shard


# -- the merged run -------------------------------------------------------------------------------


def merged_summary(shards: Sequence[ShardRun], run_id: str) -> Summary:
    summaries = [s.summary for s in shards]
    prepared = next((s for s in summaries if s.versions), summaries[0])
    versions: dict[str, str] = {}
    for summary in summaries:
        versions.update({k: v for k, v in summary.versions.items() if v})
    merged = Summary(
        run_id=run_id,
        started=min((s.started for s in summaries), key=history.instant),
        provider=prepared.provider,
        profile=prepared.profile,
        versions=versions,
        finished=max((s.finished for s in summaries), key=history.instant),
        complete=all(s.complete for s in summaries),
        environment=_environment(shards, prepared),
        selection={
            **prepared.selection,
            "shard": None,
            "shards": shards[0].shard.count,
            "checks": sum(len(s.summary.tests) for s in shards),
        },
        merged={"shards": shards[0].shard.count, "runs": [_shard_facts(s) for s in shards]},
    )
    for summary in summaries:
        for test in summary.tests:
            merged.add(test)
    return merged


def _environment(shards: Sequence[ShardRun], prepared: Summary) -> dict[str, object]:
    """The environment of a prepared shard (they share profile and versions), each shard's notes
    and teardown problems marked with its index, and the slowest preparation."""
    environment = dict(prepared.environment)
    for key in ("notes", "teardown_problems"):
        lines = [f"shard {s.shard}: {line}" for s in shards for line in _listed(s.summary, key)]
        if lines or key == "notes":
            environment[key] = lines
    prepare = [s.summary.environment.get("prepare_s") for s in shards]
    seconds = [float(p) for p in prepare if isinstance(p, int | float)]
    if seconds:
        environment["prepare_s"] = max(seconds)
    return environment


def _listed(summary: Summary, key: str) -> list[str]:
    value = summary.environment.get(key)
    return [str(line) for line in value] if isinstance(value, list) else []


def _shard_facts(shard: ShardRun) -> dict[str, object]:
    summary = shard.summary
    return {
        "shard": str(shard.shard),
        "run_id": summary.run_id,
        "folder": str(shard.folder),
        "started": summary.started,
        "finished": summary.finished,
        "verdict": summary.verdict(),
        "checks": len(summary.tests),
        "workers": summary.environment.get("workers"),
    }


# -- files ----------------------------------------------------------------------------------------


def _copy_results(shard: Path, out: Path) -> None:
    """The shard's own files (Allure results, diagnostics, timelines): their names are unique
    (uuids, check names), so shards never write over each other."""
    for name in COPIED:
        if (shard / name).is_dir():
            shutil.copytree(shard / name, out / name, dirs_exist_ok=True)


def _write_junit(sources: Sequence[Path], target: Path) -> None:
    """One test suite of every shard's test cases, its counts their sums, its time their sum."""
    suite = ET.Element("testsuite", {"name": "pytest"})
    totals = dict.fromkeys(_JUNIT_COUNTS, 0)
    seconds, stamps, hosts = 0.0, [], []
    for source in sources:
        if not source.is_file():
            continue  # a shard killed before pytest wrote it: its checks are still in summary.json
        for part in ET.parse(source).getroot().iter("testsuite"):
            for key in _JUNIT_COUNTS:
                totals[key] += int(part.get(key, "0"))
            seconds += float(part.get("time", "0"))
            stamps += [part.get("timestamp", "")]
            hosts += [part.get("hostname", "")]
            suite.extend(list(part))
    suite.attrib.update({key: str(value) for key, value in totals.items()})
    suite.set("time", f"{seconds:.3f}")
    suite.set("timestamp", min((s for s in stamps if s), default=""))
    suite.set("hostname", ",".join(sorted({h for h in hosts if h})))
    root = ET.Element("testsuites", {"name": "pytest tests"})
    root.append(suite)
    ET.ElementTree(root).write(target, encoding="utf-8", xml_declaration=True)
