"""The pure pieces of parallel runs: the worker count, the exclusive lock, a result's trip, lock staleness."""

from __future__ import annotations

import datetime
import multiprocessing
import pickle
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from conformance import capacity, parallel, profiles
from conformance.cluster_lock import Holder
from conformance.environment import Environment, RunOptions
from conformance.exclusive import ClusterTurn
from conformance.install.kuberay_chart import Promised
from conformance.install.modes import CheckoutInstall
from conformance.install.operator_spec import OperatorSpec
from conformance.install.source_install import SourceInstall
from conformance.install.under_test import KubeRayUnderTest
from conformance.providers.base import Cluster
from conformance.report.summary import TestResult as Result

GIB = Decimal(2**30)


def test_auto_workers_are_one_per_core_within_free_memory_and_requests() -> None:
    profile = profiles.load("default")  # head 2Gi, workers 1Gi: 4 GiB per check; 500m requested
    assert capacity.per_check(profile)[1] == 4 * GIB
    assert capacity.requested_per_check() == Decimal("0.5")  # the workers' init containers ask 200m

    def room(free_cpu: str, memory_gib: int, cores: int) -> capacity.Room:
        return capacity.Room(Decimal(free_cpu), memory_gib * GIB, Decimal(cores), "t")

    assert capacity.workers_for(room("1.8", 23, 2), profile) == 2  # here: one per core
    assert capacity.workers_for(room("8", 40, 8), profile) == 8  # CPU bound
    assert capacity.workers_for(room("16", 10, 16), profile) == 2  # memory bound
    assert capacity.workers_for(room("0.5", 40, 8), profile) == 1  # what running pods request
    assert capacity.workers_for(room("0", 0, 0), profile) == 1  # never below 1
    assert capacity.workers_for(room("64", 512, 64), profile) == capacity.MAX_WORKERS


def test_a_pod_holds_the_larger_of_its_containers_sum_and_any_init_container() -> None:
    from kubernetes import client  # noqa: PLC0415 - only this test builds pod specs

    def box(name: str, cpu: str) -> client.V1Container:
        return client.V1Container(name=name, resources=client.V1ResourceRequirements(requests={"cpu": cpu}))

    worker = client.V1PodSpec(
        containers=[box("ray", "100m")], init_containers=[box("wait-gcs-ready", "200m")]
    )
    assert capacity.effective_request(worker, "cpu") == Decimal("0.2")
    head = client.V1PodSpec(
        containers=[box("ray", "100m"), box("autoscaler", "50m"), client.V1Container(name="x")]
    )
    assert capacity.effective_request(head, "cpu") == Decimal("0.15")
    assert capacity.effective_request(head, "memory") == 0


def test_room_on_this_machine_is_read_from_proc() -> None:
    room = capacity.room_on_this_machine()
    assert room.cpu >= 1 and room.memory > GIB and room.cores == room.cpu


def test_local_nodes_sharing_this_machine_count_its_cores_once() -> None:
    machine = capacity.room_on_this_machine()
    # Three local nodes each report the machine's cores and memory.
    three = capacity.Room(machine.cpu * 3, machine.memory * 3, machine.cores * 3, "nodes")
    shared = capacity.within_this_machine(three)
    assert (shared.cpu, shared.memory, shared.cores) == (machine.cpu, machine.memory, machine.cores)
    assert "within this machine" in shared.source
    busy = capacity.Room(Decimal("0.5"), GIB, machine.cores, "one node")
    assert capacity.within_this_machine(busy) == busy  # one node: its own figures stand


def _hold(folder: str, name: str, exclusive: bool, log: str, seconds: float) -> None:
    with ClusterTurn(Path(folder)).hold(exclusive):
        start = time.monotonic()
        (Path(folder) / f"{name}.in").touch()
        time.sleep(seconds)  # poll-interval: how long the holder keeps the lock, so others must wait
        with open(log, "a") as out:
            out.write(f"{name} {start} {time.monotonic()}\n")


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)  # poll-interval


def _blocked_on_flock(pid: int) -> bool:
    """The kernel lists a process waiting for a flock(2) lock in /proc/locks with `->`."""
    return any("->" in line and f" {pid} " in line for line in Path("/proc/locks").read_text().splitlines())


def test_an_exclusive_holder_overlaps_no_one_and_shared_holders_overlap(tmp_path: Path) -> None:
    log = tmp_path / "log"

    def start(name: str, exclusive: bool) -> multiprocessing.Process:
        proc = multiprocessing.Process(target=_hold, args=(str(tmp_path), name, exclusive, str(log), 0.8))
        proc.start()
        return proc

    procs = [start("s1", False), start("s2", False)]
    _until(lambda: (tmp_path / "s1.in").exists() and (tmp_path / "s2.in").exists(), "s1 and s2 hold it")
    procs.append(start("x", True))
    _until(lambda: _blocked_on_flock(procs[-1].pid), "x waits behind s1 and s2")
    procs += [start("s3", False), start("s4", False)]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    spans = {
        name: (float(a), float(b)) for name, a, b in (line.split() for line in log.read_text().splitlines())
    }
    x0, x1 = spans.pop("x")
    for name, (a, b) in spans.items():
        assert b <= x0 or a >= x1, f"{name} ran during the exclusive holder"
    assert spans["s1"][1] > spans["s2"][0], "shared holders never overlapped"
    # The turnstile: s3 and s4 asked after x and waited for it, though the lock was held shared.
    assert spans["s3"][0] >= x1 and spans["s4"][0] >= x1
    assert spans["s3"][1] > spans["s4"][0] or spans["s4"][1] > spans["s3"][0]


def test_a_result_survives_the_report_serialization_xdist_uses() -> None:
    report = pytest.TestReport("suite.py::test_a", ("suite.py", 1, "test_a"), {}, "failed", None, "call")
    result = Result(
        id="suite.py::test_a",
        area="rayjob",
        outcome="failed",
        duration_s=1.5,
        reason="AssertionError: no",
        metrics={"job_complete_s": 3.25},
        issues=["kuberay#1141"],
        details="assert 1 == 2",
    )
    parallel.attach_result(report, result, {"s3cr3t": "suite.py::test_a"})
    again = pytest.TestReport._from_json(report._to_json())
    assert parallel.result_of(again) == result
    assert parallel.secrets_of(again) == {"s3cr3t": "suite.py::test_a"}


def test_a_worker_attaches_to_everything_the_controller_prepared(tmp_path: Path) -> None:
    """Whatever a check reads from the prepared environment reaches the workers too: the source
    checkout was missing once, and the operator-upgrade check then erred on every worker."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    options = RunOptions("local", profiles.load("default"), tmp_path, "r1", kuberay_source="/src")
    prepared = Environment(options)
    prepared.cluster = Cluster("local", kubeconfig)
    promised = Promised("chart", {"RayCronJob": False}, {"RayCronJob": True})
    prepared.kuberay = KubeRayUnderTest(
        "source", "v1.7.0", "v1.7.1", "built from source", Path("/src"), ("a fact",), "v1.7.1",
        {"RayCronJob": True}, OperatorSpec("v1.7.0"), promised=promised,
    )  # fmt: skip
    prepared.notes = ["a note"]
    assert isinstance(prepared.install_mode, CheckoutInstall)
    prepared.install_mode.source = SourceInstall("/src", "kuberay-system", {"RayCronJob": True}, tmp_path)
    worker = Environment(options)
    worker.attach(pickle.loads(pickle.dumps(prepared.snapshot())))  # as parallel.pack carries it
    for name in ("cluster", "capabilities", "kuberay", "install_mode", "notes"):
        assert getattr(worker, name) == getattr(prepared, name), name
    assert worker.install_mode.source == prepared.install_mode.source  # type: ignore[attr-defined]
    assert worker.api is not None


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def test_a_lock_is_stale_only_after_its_holder_stopped_renewing_for_the_stated_time() -> None:
    now = datetime.datetime(2026, 12, 1, 18, 0, tzinfo=datetime.UTC)
    renewed = now - datetime.timedelta(seconds=59)
    assert not Holder("r", "h", "s", renewed).stale(now, after_s=60)
    assert Holder("r", "h", "s", now - datetime.timedelta(seconds=61)).stale(now, after_s=60)
    assert Holder("r", "h", "s", None).stale(now)


@pytest.mark.parametrize("bad", ["0", "-2", "many"])
def test_a_bad_worker_count_is_a_usage_error_before_anything_runs(bad: str, tmp_path: Path) -> None:
    cli = Path(sys.executable).parent / "kuberay-conformance"
    done = subprocess.run(
        [str(cli), "run", "--workers", bad, "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 3
    (line,) = done.stderr.splitlines()
    assert "--workers" in line and "auto" in line
    assert not (tmp_path / "run").exists()
