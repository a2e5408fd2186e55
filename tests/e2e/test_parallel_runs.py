"""Parallel runs (pytest-xdist) and the one-run-per-cluster lock, on the real local cluster.

Each run executes a small suite of its own through pytest with the plugin and two workers.
A tracing plugin (`-p krc_trace`, loaded by the controller and every worker) records each
call of Environment.prepare / attach / teardown with its PID and time; the suites' checks
record which worker ran them and when, so the tests see what happened from outside the
harness's own bookkeeping.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import signal
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from plugin_runs import plugin_command, run_namespaces
from test_plugin_outcomes import SUITE

from conformance import cluster_lock, parallel
from conformance.providers.base import Cluster

ROOT = Path(__file__).resolve().parents[2]

TRACE = """
import os, time
from conformance.environment import Environment

def _traced(name):
    original = getattr(Environment, name)
    def wrapper(self, *args, **kwargs):
        began = time.time()
        try:
            return original(self, *args, **kwargs)
        finally:
            with open(os.environ["KRC_TRACE"], "a") as out:
                out.write(f"{name} {os.getpid()} {began} {time.time()}\\n")
    setattr(Environment, name, wrapper)

for _name in ("prepare", "attach", "teardown"):
    _traced(_name)
"""

CONFTEST = """
import json, os, time
from pathlib import Path
import pytest

RECORDS = Path(os.environ["KRC_RECORDS"])


@pytest.fixture(autouse=True)
def span(request):
    began = time.time()
    yield
    line = {"name": request.node.name, "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
            "start": began, "end": time.time()}
    with open(RECORDS / "spans.jsonl", "a") as out:
        out.write(json.dumps(line) + "\\n")


@pytest.fixture(scope="session", autouse=True)
def both_workers_run_at_once():
    # Each worker's first check waits here until the other worker has started one too: the run
    # is parallel, or every check of one worker errors.
    me = os.environ.get("PYTEST_XDIST_WORKER", "")
    (RECORDS / f"worker-{me}").touch()
    deadline = time.monotonic() + 120
    while len(list(RECORDS.glob("worker-*"))) < 2:
        assert time.monotonic() < deadline, "the other worker never started a check"
        time.sleep(0.2)  # poll-interval
"""

# The outcome kinds of test_plugin_outcomes.py's suite, and more to spread over two workers.
OUTCOMES = (
    SUITE
    + """
import time
from conformance.checks import RUN_KEY
from conformance.kube.wait import poll_until


def test_skipped():
    pytest.skip("skipped on purpose")


def test_takes_a_while():
    # Keeps this worker busy while the other reaches the exclusive checks, inside a wait the
    # stopwatch counts as waiting for KubeRay.
    started = time.monotonic()
    poll_until(lambda: time.monotonic() - started > 8 or None, what="8 s to pass", timeout=30, every=0.5)


def test_records_a_timeline(timeline):
    timeline.autoscaling("workers of a parallel run").replicas("small-group", 2, desired=3)


def test_leaves_a_note(request):
    request.config.stash[RUN_KEY].note("a note from a worker")


def test_leaks_its_secret(request, timeline):
    secret = "krc-parallel-canary-7f3e"
    request.config.stash[RUN_KEY].keep_secret(request.node.nodeid, secret)
    timeline.autoscaling(f"a title holding {secret}").replicas("g", 1)
"""
)

EXCLUSIVE = """
import time
import pytest

pytestmark = pytest.mark.area("operator")


def test_quick_one():
    pass


def test_quick_two():
    pass


@pytest.mark.exclusive("changes the cluster-wide operator (pretend)")
def test_exclusive_first():
    time.sleep(2)  # poll-interval: a window in which any overlapping check would show


@pytest.mark.exclusive("measures under load (pretend)")
def test_exclusive_second():
    time.sleep(2)  # poll-interval: as above
"""

HANGS = """
import subprocess
import pytest
from kubernetes import client
from conformance.kube.wait import poll_until

pytestmark = pytest.mark.area("rayjob")


@pytest.fixture
def child(request):
    proc = subprocess.Popen(["sleep", "900"])
    yield proc
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("n", [1, 2])
def test_waits_forever(api, namespace, child, n):
    import os
    from pathlib import Path
    Path(os.environ["KRC_RECORDS"], f"child-{child.pid}").touch()
    core = client.CoreV1Api(api)
    names = lambda: [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items]
    poll_until(lambda: "never" in names() or None, what="a config map that never comes", timeout=600,
               retry_on=(Exception,))  # a passing API error must not end the check before the signal
"""


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _parallel_pytest(tmp_path: Path, suite: Path, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    trace_dir = _write(tmp_path / "trace", {"krc_trace.py": TRACE})
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(trace_dir), os.environ.get("PYTHONPATH", "")]),
        "KRC_TRACE": str(tmp_path / "trace.log"),
        "KRC_RECORDS": str(records),
    }
    options = ["-p", "krc_trace", "-n", "2", *parallel.DISTRIBUTION, "--conformance-provider", "local"]
    return plugin_command(suite, run_dir, *options, result_files=True), env


def _trace(tmp_path: Path) -> list[tuple[str, int, float, float]]:
    lines = (tmp_path / "trace.log").read_text().split("\n")
    return [(n, int(p), float(a), float(b)) for n, p, a, b in (line.split() for line in lines if line)]


def _spans(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "records" / "spans.jsonl").read_text().splitlines()]


def _coordination(cluster: Cluster) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(config.new_client_from_config(str(cluster.kubeconfig)))


def _put_lease(cluster: Cluster, holder: str, renewed: datetime.datetime) -> client.V1Lease:
    """A Lease as another run on another host would hold it."""
    api = config.new_client_from_config(str(cluster.kubeconfig))
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": cluster_lock.NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    coordination = client.CoordinationV1Api(api)
    _delete_lease(coordination)
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return coordination.create_namespaced_lease(
        cluster_lock.NAMESPACE,
        {
            "metadata": {
                "name": cluster_lock.NAME,
                "annotations": {
                    "kuberay-conformance.io/host": "other-host",
                    "kuberay-conformance.io/started": "2026-12-01T06:00:00+00:00",
                },
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": cluster_lock.STALE_AFTER_S,
                "acquireTime": stamp,
                "renewTime": stamp,
            },
        },
    )


def _delete_lease(coordination: client.CoordinationV1Api) -> None:
    try:
        coordination.delete_namespaced_lease(cluster_lock.NAME, cluster_lock.NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _lease(cluster: Cluster) -> client.V1Lease | None:
    return cluster_lock.current_lease(_coordination(cluster))


# -- one parallel run, looked at from several sides ---------------------------------------


class ParallelRun:
    def __init__(self, tmp_path: Path, pid: int, done: subprocess.CompletedProcess[str]) -> None:
        self.tmp_path = tmp_path
        self.run_dir = tmp_path / "run"
        self.pid = pid
        self.output = done.stdout[-3000:] + done.stderr[-3000:]
        self.summary = json.loads((self.run_dir / "summary.json").read_text())
        self.by_name = {t["id"].rsplit("::", 1)[-1]: t for t in self.summary["tests"]}
        self.trace = _trace(tmp_path)
        self.spans = _spans(tmp_path)


@pytest.fixture(scope="module")
def parallel_run(local_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParallelRun]:
    tmp_path = tmp_path_factory.mktemp("parallel")
    suite = _write(
        tmp_path / "suite",
        {"conftest.py": CONFTEST, "test_outcomes.py": OUTCOMES, "test_exclusive.py": EXCLUSIVE},
    )
    # A lock left by a run that stopped renewing ten minutes ago: this run takes it over.
    _put_lease(
        local_cluster,
        "20261201T060000Z-dead",
        datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=10),
    )
    command, env = _parallel_pytest(tmp_path, suite, tmp_path / "run")
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=900)
    yield ParallelRun(
        tmp_path, proc.pid, subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    )


def test_prepare_and_teardown_run_once_in_the_controller_before_and_after_every_check(
    parallel_run: ParallelRun,
) -> None:
    calls = parallel_run.trace
    prepares = [c for c in calls if c[0] == "prepare"]
    teardowns = [c for c in calls if c[0] == "teardown"]
    attaches = [c for c in calls if c[0] == "attach"]
    assert [c[1] for c in prepares] == [parallel_run.pid], parallel_run.output
    assert [c[1] for c in teardowns] == [parallel_run.pid]
    assert len({c[1] for c in attaches}) == 2 and parallel_run.pid not in {c[1] for c in attaches}
    first_start = min(s["start"] for s in parallel_run.spans)
    last_end = max(s["end"] for s in parallel_run.spans)
    assert prepares[0][3] < first_start, "a check started before the environment was ready"
    assert teardowns[0][2] > last_end, "the environment was torn down while a check ran"
    assert parallel_run.summary["environment"]["workers"] == 2
    # The harness's own footprint, sampled by the controller from /proc (footprint.py), workers too.
    seen = parallel_run.summary["environment"]["harness_footprint"]
    assert seen["controller"]["peak_rss_mib"] > 0 and seen["worker"]["peak_fds"] > 0, seen


def test_results_of_both_workers_are_merged_into_one_summary_and_one_junit(parallel_run: ParallelRun) -> None:
    by_name = parallel_run.by_name
    assert len(by_name) == len(parallel_run.summary["tests"]) == 13, parallel_run.output
    expected = {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_errors": "error",
        "test_not_applicable": "not_applicable",
        "test_skipped": "skipped",
        "test_leaks_its_secret": "failed",
    }
    assert {name: by_name[name]["outcome"] for name in expected} == expected
    assert by_name["test_passes"]["metrics"] == {"answer_s": 4.2}
    # The node's CPU pressure while each check ran (the local provider's node is this machine),
    # apart from the metrics, which are what the check measured of KubeRay.
    for name in expected:
        figures = by_name[name]["node_cpu"]
        assert 0 <= figures["pressure_mean_percent"] <= 100 and figures["pressure_max_percent"] >= 0, figures
    # Where each check's time went: pytest's phases add up to its duration, and the waits inside
    # the call are told apart from the rest (conformance/stopwatch.py).
    for test in parallel_run.summary["tests"]:
        phases = test["phases"]
        parts = sum(phases.get(k, 0.0) for k in ("setup_s", "ready_wait_s", "behaviour_s", "teardown_s"))
        assert abs(parts - test["duration_s"]) < 0.05, test
    waited = by_name["test_takes_a_while"]["phases"]
    assert 8 <= waited["kuberay_wait_s"] <= waited["behaviour_s"] < 20, waited
    assert "the system under test misbehaved" in by_name["test_fails"]["reason"]
    assert "== 3" in by_name["test_fails"]["details"]
    assert by_name["test_errors"]["issues"] == ["kuberay#1141"]
    assert by_name["test_not_applicable"]["reason"] == "feature gate RayCronJob is off in the operator"
    assert by_name["test_skipped"]["reason"] == "skipped on purpose"
    # The secret was kept in a worker; the controller's search of the finished files found it.
    assert "its secret appears in files of the finished run" in by_name["test_leaks_its_secret"]["reason"]
    counts = parallel_run.summary["areas"]["raycluster"]
    assert counts == {"passed": 4, "failed": 2, "errors": 1, "not_applicable": 1, "skipped": 1}
    # A note made in a worker reaches the run's notes (the worker's own Environment is never written).
    assert "a note from a worker" in parallel_run.summary["environment"]["notes"]
    # Checks of every outcome kind ran on both workers (the spans record who ran what).
    workers = {s["worker"] for s in parallel_run.spans if s["name"] in expected}
    assert workers == {"gw0", "gw1"}
    cases = ET.parse(parallel_run.run_dir / "junit.xml").getroot().iter("testcase")
    names = sorted(case.get("name") for case in cases)
    assert names == sorted(by_name), "junit.xml does not hold each check exactly once"
    allure = [
        json.loads(p.read_text()) for p in (parallel_run.run_dir / "allure-results").glob("*-result.json")
    ]
    assert sorted(r["name"] for r in allure) == sorted(by_name)
    assert (parallel_run.run_dir / "index.html").stat().st_size > 0


def test_diagnostics_and_timelines_of_the_workers_end_in_the_run_folder(
    parallel_run: ParallelRun, local_cluster: Cluster
) -> None:
    diagnostics = parallel_run.run_dir / "diagnostics"
    for check in ("test-fails", "test-errors"):
        bundle = next(diagnostics.glob(f"*{check}*"))
        assert (bundle / "events.txt").exists()
    timelines = [json.loads(p.read_text()) for p in (parallel_run.run_dir / "timelines").glob("*.json")]
    assert any(t["title"] == "workers of a parallel run" for t in timelines)
    assert run_namespaces(local_cluster.kubeconfig, parallel_run.summary["run_id"]) == []
    assert not (parallel_run.run_dir / ".turns").exists()


def test_an_exclusive_check_overlaps_no_other_check(parallel_run: ParallelRun) -> None:
    spans = parallel_run.spans
    alone = [s for s in spans if s["name"].startswith("test_exclusive_")]
    assert len(alone) == 2
    for one in alone:
        others = [s for s in spans if s is not one and s["start"] < one["end"] and s["end"] > one["start"]]
        assert others == [], f"{one['name']} overlapped {[s['name'] for s in others]}"
    # Not vacuous: the ordinary checks did run side by side.
    ordinary = sorted((s for s in spans if s not in alone), key=lambda s: s["start"])
    assert any(a["end"] > b["start"] and a["worker"] != b["worker"] for a, b in itertools.pairwise(ordinary))


def test_the_exclusive_checks_come_after_the_ordinary_ones(parallel_run: ParallelRun) -> None:
    """The checks are handed out one at a time in order, so the exclusive ones (sorted last) start
    once the ordinary ones have: at most the one a busy worker had queued starts after them."""
    exclusive = [s for s in parallel_run.spans if s["name"].startswith("test_exclusive_")]
    first_exclusive = min(s["start"] for s in exclusive)
    late = [s["name"] for s in parallel_run.spans if s not in exclusive and s["start"] > first_exclusive]
    assert len(late) <= 1, f"ordinary checks that started after the first exclusive one: {late}"


def test_a_stale_lock_is_taken_over_and_the_summary_says_so(
    parallel_run: ParallelRun, local_cluster: Cluster
) -> None:
    notes = parallel_run.summary["environment"]["notes"]
    assert any("20261201T060000Z-dead on host other-host" in n and "taken over" in n for n in notes), notes
    assert _lease(local_cluster) is None, "the run did not release its lock"


# -- interrupts ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_sigterm_with_two_workers_running_leaves_no_namespace_process_or_lock(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    suite = _write(tmp_path / "suite", {"test_hangs.py": HANGS})
    run_dir = tmp_path / "run"
    command, env = _parallel_pytest(tmp_path, suite, run_dir)
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert run.stderr is not None
    waiting: set[str] = set()
    for line in run.stderr:
        if "waiting for a config map that never comes" in line:
            waiting.add(line.split("]", 1)[0])
            if len(waiting) == 2:
                break
    else:
        pytest.fail("the two workers never both started waiting")
    workers = _children(run.pid)
    spawned = [int(p.name.split("-")[1]) for p in (tmp_path / "records").glob("child-*")]
    assert len(workers) >= 2 and len(spawned) == 2
    run.send_signal(signal.SIGTERM)
    rest = run.stderr.read()
    assert run.wait(timeout=300) != 0, rest[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    outcomes = [(t["outcome"], t["reason"]) for t in summary["tests"]]
    assert summary["complete"] is False, f"{outcomes}\n{rest[-3000:]}"
    assert {t["outcome"] for t in summary["tests"]} == {"error"}
    assert run_namespaces(local_cluster.kubeconfig, run_dir.name) == []
    for pid in workers + spawned:
        assert not Path(f"/proc/{pid}").exists(), f"process {pid} was left running"
    assert _lease(local_cluster) is None


# -- one run per cluster ------------------------------------------------------------------


def test_a_second_run_refuses_at_once_naming_the_holder_and_changes_nothing(
    local_cluster: Cluster, tmp_path: Path
) -> None:
    held = _put_lease(local_cluster, "20261201T060000Z-busy", datetime.datetime.now(datetime.UTC))
    try:
        run_dir = tmp_path / "run"
        cli = ROOT / ".venv" / "bin" / "kuberay-conformance"
        done = subprocess.run(
            [str(cli), "run", "--keep-cluster", "--run-dir", str(run_dir), "--workers", "2"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert "run 20261201T060000Z-busy on host other-host (started 2026-12-01T06:00:00+00:00)" in line
        assert "--wait-for-lock" in line
        assert not run_dir.exists()
        after = _lease(local_cluster)
        assert after is not None and after.metadata.resource_version == held.metadata.resource_version
        # The plugin refuses the same way when pytest is run without the CLI.
        command, env = _parallel_pytest(
            tmp_path, _write(tmp_path / "suite", {"test_hangs.py": HANGS}), run_dir
        )
        direct = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert direct.returncode == 2
        assert "in use by run 20261201T060000Z-busy" in direct.stderr
        assert not (tmp_path / "trace.log").exists(), "the environment was touched"
        assert _lease(local_cluster).metadata.resource_version == held.metadata.resource_version
    finally:
        _delete_lease(_coordination(local_cluster))


def test_wait_for_lock_waits_with_a_progress_line_then_runs(local_cluster: Cluster, tmp_path: Path) -> None:
    _put_lease(local_cluster, "20261201T060000Z-busy", datetime.datetime.now(datetime.UTC))
    cli = ROOT / ".venv" / "bin" / "kuberay-conformance"
    run_dir = tmp_path / "run"
    command = [str(cli), "run", "--keep-cluster", "--run-dir", str(run_dir), "--wait-for-lock"]
    command += ["-k", "no_check_has_this_name", "--workers", "1"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stderr is not None
    try:
        line = run.stderr.readline()
        assert "waiting for the cluster lock held by run 20261201T060000Z-busy on host other-host" in line, (
            line
        )
        assert run.poll() is None
        _delete_lease(_coordination(local_cluster))  # the other run ends
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert (run_dir / "summary.json").exists(), stdout + stderr
    assert _lease(local_cluster) is None
