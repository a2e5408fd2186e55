"""How many minutes each CI job needs, derived from recorded check durations rather than guessed.

The figures every workflow's `timeout-minutes` is held against (tests/unit/test_workflow_timeouts.py);
`python -m conformance.workflow_budget` prints them.

The model, and what it assumes:

- Check durations come from the last whole-job run with per-check figures,
  benchmarks/results/conformance_run.json (`checks`: duration_s per check id). That run used the
  local provider on this 2-core machine, 2 workers, three nodes. GitHub's ubuntu-24.04 runners have
  4 cores for public repositories and 2 for private ones; kind's nodes are containers that share the
  runner's cores as the local provider's share this machine's, so the per-check durations are taken
  as they are. Nothing here was measured on a runner or on EKS.
- Exclusive checks run alone, one after another, after the parallel phase (conformance/exclusive.py);
  the rest are spread over the workers. Greedy list scheduling takes at most
  sum / workers + (1 - 1 / workers) * longest (Graham's bound), which is what is charged.
- The model leaves out what happens between checks (namespace teardown, settle waits, admission
  waits). CALIBRATION is measured, not assumed: the recorded run's own wall time (less preparing)
  divided by what the model says for its checks.
- A collected check with no recorded duration is charged the longest recorded check of its area.
  A check family the listing could not expand (KubeRay's samples, listed as `no-samples` without
  the version's files) is charged every recorded check of that family.
- Workers: as capacity.workers_for counts them, by cores and by the profile's memory limits per
  check, on the smallest standard GitHub runner for kind (kind_workers) and on the CPU node group
  for EKS (eks_workers). Fewer workers than the recorded run had: its durations are charged as they
  are, though a check with fewer neighbours may run faster.
- Fixed phases (runner setup, cluster create, install, teardown, upload) are named constants below,
  each with its source; most are estimates, said so.
- MARGIN on top of everything, for the platform differences nobody measured.
- Shards: nightly-kind runs the full tier as N jobs of `run --shard K/N` (conformance/selection.py
  splits the checks by the same recorded durations) and merges their reports. Each shard makes and
  prepares its own cluster, so every fixed phase is paid per shard; only the checks are fewer. The
  split is modelled as the harness makes it, with KubeRay's samples (listed as `no-samples` without
  the version's files) spread as the recorded ones. N is the fewest shards whose every job fits
  SHARD_JOB_MOST_MIN on GitHub's standard runner for public repositories (4 cores, 16 GiB).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance import selection

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "benchmarks" / "results" / "conformance_run.json"
WHOLE_JOB_RUNS = ROOT / "benchmarks" / "results" / "parallel_run.json"

# On top of everything: the recorded whole-job runs vary by 4 % (parallel_run.json auto-s37,
# auto-s39-3nodes, auto-s40-3nodes; a unit test holds MARGIN above their spread), and a runner or an
# EKS cluster is not this machine. 25 % is a judgement, not a measurement.
MARGIN = 1.25
GITHUB_JOB_LIMIT_MIN = 360  # GitHub-hosted runners end any job at 6 hours

# Runner setup: checkout, setup-python/go/tofu/helm, `make venv` (pip installs the harness and its
# dev extra). Estimate: no runner here to time it.
RUNNER_SETUP_MIN = 5.0
UPLOAD_MIN = 1.0  # reports and logs as an artifact; estimate

# kind (nightly-kind.yml). The worker count: capacity.py gives a check one core and its pods' memory
# limits, within the runner (kind's nodes share it). GitHub's standard Linux runner for private
# repositories has 2 cores and 7 GiB (public repositories get 4 cores and 16 GiB): the smallest is
# what the timeout must hold for.
SMALLEST_RUNNER_CORES = 2
SMALLEST_RUNNER_MEMORY_GIB = 7.0
KIND_CREATE_MIN = 3.0  # `kind create cluster`, a control plane and two workers, node image pulled; estimate
# Preparing with nothing cached (Gateway API CRDs and vegeta built from their Go modules, Helm
# installs of Istio and KubeRay): 453.9 s measured on this machine, the run whose preparing included
# first builds (parallel_run.json auto-s37, prepare_s).
KIND_PREPARE_MIN = 453.9 / 60
KIND_IMAGE_PULL_MIN = 3.0  # rayproject/ray pulled from Docker Hub by each node the first time; estimate
KIND_DELETE_MIN = 1.0  # `kind delete cluster`; estimate

# Shards of nightly-kind (issue 44: each shard's job fits 45 minutes on a 4-core runner). GitHub's
# ubuntu-24.04 runner for public repositories: 4 cores, 16 GiB.
SHARD_RUNNER_CORES = 4
SHARD_RUNNER_MEMORY_GIB = 16.0
SHARD_JOB_MOST_MIN = 45
MOST_SHARDS = 20  # a free GitHub account runs at most 20 jobs at once

# EKS (eks-gpu.yml). Estimates from the steps, infra/terraform/README.md "Expected wall time": init 1,
# apply 20 (VPC, control plane, node groups, add-ons, device plugin), KubeRay and first image pulls
# 4, destroy 10. Istio from its Helm charts: 2, estimate.
EKS_CREATE_MIN = 1.0 + 20.0
EKS_PREPARE_MIN = 4.0 + 2.0
EKS_DESTROY_MIN = 10.0
# After the budget's deadline the guard gives the run GUARD_GRACE_S (terraform.py, 900 s by default)
# to destroy its cluster, then destroys it itself.
EKS_GUARD_GRACE_MIN = 15.0
# The CPU node group (eks.CPU_NODE_GROUP: desired 3 x m5.xlarge). An m5.xlarge has 16 GiB; EKS's
# AL2023 AMI reserves 255 MiB + 11 MiB per pod (58 pods on an m5.xlarge) for kubelet and 100 MiB for
# eviction, about 1 GiB, leaving 15 GiB allocatable per node. Without a cluster autoscaler the group
# stays at its desired size.
EKS_NODE_ALLOCATABLE_GIB = 15.0

# The reaper (eks-reaper.yml): at most this many runs destroyed per round, the rest the next hour.
REAPER_MOST = 3


@dataclass(frozen=True)
class Check:
    """A check a run would make, as `kuberay-conformance list` collects it."""

    name: str  # the test id without its file: test_function[params]
    area: str
    exclusive: bool
    unit: str = ""  # the checks a shard takes together (selection.unit_of); "" for the name


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    return {
        name: float(entry["duration_s"]) for name, entry in json.loads(path.read_text())["checks"].items()
    }


def _family(name: str) -> str:
    return name.split("[", 1)[0]


def charged(checks: Sequence[Check], recorded: Mapping[str, float]) -> tuple[dict[str, float], set[str]]:
    """Seconds charged per check, and which of them are exclusive (see the module's docstring)."""
    longest_of_area: dict[str, float] = {}
    for check in checks:
        if check.name in recorded:
            longest_of_area[check.area] = max(longest_of_area.get(check.area, 0.0), recorded[check.name])
    longest = max(recorded.values(), default=0.0)
    seconds: dict[str, float] = {}
    exclusive: set[str] = set()
    for check in checks:
        if "[no-samples" in check.name:
            family = {n: d for n, d in recorded.items() if _family(n) == _family(check.name)}
        else:
            family = {check.name: recorded.get(check.name, longest_of_area.get(check.area, longest))}
        seconds.update(family)
        if check.exclusive:
            exclusive.update(family)
    return seconds, exclusive


def modelled_seconds(seconds: Mapping[str, float], exclusive: Iterable[str], workers: int) -> float:
    """Exclusive checks one after another; the rest over `workers` (Graham's bound)."""
    alone = set(exclusive)
    shared = [d for name, d in seconds.items() if name not in alone]
    serial = sum(d for name, d in seconds.items() if name in alone)
    spread = sum(shared) / workers + (1 - 1 / workers) * max(shared, default=0.0)
    return spread + serial


def calibration(checks: Sequence[Check], durations: Path = DURATIONS) -> float:
    """The recorded run's wall time less preparing, over what the model says for its own checks."""
    run = json.loads(durations.read_text())
    recorded = recorded_durations(durations)
    exclusive = {c.name for c in checks if c.exclusive and c.name in recorded}
    workers = _recorded_workers(run["run"])
    return (run["wall_s"] - run["prepare_s"]) / modelled_seconds(recorded, exclusive, workers)


def _recorded_workers(run_id: str) -> int:
    """The worker count of the recorded run, from the whole-job table that names its run folder."""
    for column in json.loads(WHOLE_JOB_RUNS.read_text()).values():
        if column.get("run_dir", "").endswith(run_id):
            return int(column["workers"])
    raise ValueError(f"no column of {WHOLE_JOB_RUNS.name} records run {run_id}")


def checks_minutes(checks: Sequence[Check], workers: int, whole: Sequence[Check] = ()) -> float:
    """What the checks take on `workers`, calibrated: minutes. `whole`: the job the checks are a
    shard of, whose exclusive checks the calibration needs to know (default: the checks)."""
    seconds, exclusive = charged(checks, recorded_durations())
    return modelled_seconds(seconds, exclusive, workers) * calibration(whole or checks) / 60


def kind_workers(
    per_check_memory_gib: float,
    cores: int = SMALLEST_RUNNER_CORES,
    memory_gib: float = SMALLEST_RUNNER_MEMORY_GIB,
) -> int:
    """Checks at once on a runner (the smallest standard one by default): a core each, and their
    memory limits."""
    by_memory = math.floor(memory_gib / per_check_memory_gib)
    return max(1, min(cores, by_memory))


def shard_workers(per_check_memory_gib: float) -> int:
    return kind_workers(per_check_memory_gib, SHARD_RUNNER_CORES, SHARD_RUNNER_MEMORY_GIB)


@dataclass(frozen=True)
class Budget:
    """A job's figures in minutes: what runs before, during and after its checks."""

    name: str
    checks_min: float
    before_min: float  # setup, cluster, install
    after_min: float  # teardown, upload

    @property
    def need_min(self) -> int:
        return math.ceil(MARGIN * (self.before_min + self.checks_min + self.after_min))


def kind_budget(checks: Sequence[Check], workers: int) -> Budget:
    before = RUNNER_SETUP_MIN + KIND_CREATE_MIN + KIND_PREPARE_MIN + KIND_IMAGE_PULL_MIN
    return Budget("nightly-kind", checks_minutes(checks, workers), before, KIND_DELETE_MIN + UPLOAD_MIN)


def expanded(checks: Sequence[Check], recorded: Mapping[str, float]) -> list[Check]:
    """A samples family the listing could not expand, as the recorded checks of that family."""
    out: list[Check] = []
    for check in checks:
        if "[no-samples" not in check.name:
            out.append(check)
            continue
        family = sorted(n for n in recorded if _family(n) == _family(check.name))
        out += [Check(name, check.area, check.exclusive) for name in family]
    return out


def shard_parts(checks: Sequence[Check], count: int) -> list[list[Check]]:
    """The checks of each of `count` shards, split as `run --shard K/N` splits them."""
    recorded = recorded_durations()
    every = expanded(checks, recorded)
    rows = [selection.Row(c.name, c.area, c.unit or c.name, c.exclusive) for c in every]
    parts = selection.longest_first(selection.unit_weights(rows, recorded), count)
    return [[c for c in every if (c.unit or c.name) in set(part)] for part in parts]


def kind_shard_budgets(checks: Sequence[Check], count: int, workers: int) -> list[Budget]:
    """One Budget per shard of nightly-kind: the fixed phases each, the shard's checks."""
    before = RUNNER_SETUP_MIN + KIND_CREATE_MIN + KIND_PREPARE_MIN + KIND_IMAGE_PULL_MIN
    after = KIND_DELETE_MIN + UPLOAD_MIN
    return [
        Budget(f"nightly-kind shard {k}/{count}", checks_minutes(part, workers, checks), before, after)
        for k, part in enumerate(shard_parts(checks, count), start=1)
    ]


def shards_for(checks: Sequence[Check], workers: int) -> int:
    """The fewest shards whose every job fits SHARD_JOB_MOST_MIN."""
    for count in range(1, MOST_SHARDS + 1):
        if max(b.need_min for b in kind_shard_budgets(checks, count, workers)) <= SHARD_JOB_MOST_MIN:
            return count
    raise ValueError(f"no split into at most {MOST_SHARDS} shards fits {SHARD_JOB_MOST_MIN} minutes a job")


def eks_workers(
    per_check_memory_gib: float, nodes: int, allocatable_gib: float = EKS_NODE_ALLOCATABLE_GIB
) -> int:
    """Checks at once on the CPU node group, counted as capacity.workers_for counts memory."""
    return max(1, math.floor(nodes * allocatable_gib / per_check_memory_gib))


def eks_run_budget(checks: Sequence[Check], workers: int) -> Budget:
    """The cluster's life, from the first apply to the end of its destroy: what the budget guard
    (KRC_EKS_MAX_RUN_MINUTES) must allow."""
    return Budget(
        "eks-gpu run", checks_minutes(checks, workers), EKS_CREATE_MIN + EKS_PREPARE_MIN, EKS_DESTROY_MIN
    )


def eks_after_deadline_min() -> int:
    """From the deadline to the end of the run step at worst: the guard's grace, then its own destroy."""
    return math.ceil(EKS_GUARD_GRACE_MIN + MARGIN * EKS_DESTROY_MIN)


def eks_job_min(run_step_min: int) -> int:
    """The job around the run step: setup before; the destroy step (which finds nothing when the
    run or the guard already destroyed) and the upload after."""
    return math.ceil(MARGIN * (RUNNER_SETUP_MIN + EKS_DESTROY_MIN + UPLOAD_MIN)) + run_step_min


def reaper_min() -> int:
    return math.ceil(MARGIN * (RUNNER_SETUP_MIN + REAPER_MOST * EKS_DESTROY_MIN + UPLOAD_MIN))


def collected(profile: str) -> list[Check]:
    """The checks `kuberay-conformance list --profile PROFILE` would print (a pytest collection)."""
    from conformance import listing  # noqa: PLC0415 - heavy, and only needed here

    return [
        Check(c.id.split("::", 1)[1], c.area, "exclusive" in c.markers, c.unit)
        for c in listing.collect(profile, (), (), None)
    ]


def per_check_gib(profile: str) -> float:
    from conformance import profiles  # noqa: PLC0415
    from conformance.capacity import per_check  # noqa: PLC0415

    return float(per_check(profiles.load(profile))[1]) / 2**30


def worker_counts() -> tuple[int, int]:
    """(kind, eks) workers for the profiles the workflows run (kind, eks-gpu): kind's on a shard's
    runner (SHARD_RUNNER_CORES), EKS's on its CPU node group."""
    from conformance.providers.eks import CPU_NODE_GROUP  # noqa: PLC0415

    nodes = CPU_NODE_GROUP["desired_size"]
    return shard_workers(per_check_gib("kind")), eks_workers(per_check_gib("eks-gpu"), nodes)


def budgets(
    kind_checks: Sequence[Check], eks_checks: Sequence[Check], kind_shards: int | None = None
) -> dict[str, int]:
    """Every figure the workflows are held against, in minutes (and the shard count nightly-kind
    needs). `kind_shards`: the shards nightly-kind runs (default: the fewest that fit)."""
    kind_n, eks_n = worker_counts()
    fewest = shards_for(kind_checks, kind_n)
    shards = kind_shard_budgets(kind_checks, kind_shards or fewest, kind_n)
    eks = eks_run_budget(eks_checks, eks_n)
    run_step = eks.need_min + eks_after_deadline_min()
    return {
        "nightly-kind": max(b.need_min for b in shards),
        "nightly-kind shards": fewest,
        "eks-gpu budget": eks.need_min,
        "eks-gpu run step": run_step,
        "eks-gpu job": eks_job_min(run_step),
        "eks-reaper": reaper_min(),
    }


def main() -> int:
    kind_checks, eks_checks = collected("kind"), collected("eks-gpu")
    kind_n, eks_n = worker_counts()
    print(f"calibration {calibration(kind_checks):.3f} (measured), margin {MARGIN}")
    print(f"kind: {kind_n} worker(s) a shard, checks {checks_minutes(kind_checks, kind_n):.1f} min unsharded")
    shards = shards_for(kind_checks, kind_n)
    for budget in kind_shard_budgets(kind_checks, shards, kind_n):
        print(f"  {budget.name}: checks {budget.checks_min:.1f} min, job {budget.need_min} min")
    print(f"eks: {eks_n} worker(s), checks {checks_minutes(eks_checks, eks_n):.1f} min")
    for name, minutes in budgets(kind_checks, eks_checks).items():
        print(f"{name}: {minutes}{'' if name.endswith('shards') else ' min'}")
    print(f"GitHub's limit: {GITHUB_JOB_LIMIT_MIN} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
