"""Every seeded fault is caught by the check that names it, as `failed` (not `error`), and by no other.

For each fault of faults_*.py: a copy of the default profile carrying the seed (or a rogue plugin)
runs the catching checks and a few bystanders through `kuberay-conformance run` on the local
cluster; the healthy operator is put back before the cluster lock is released. Each fault's figures
go to benchmarks/results/sensitivity/<fault>.json (benchmarks/sensitivity.py tabulates them).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import checkouts
import pytest

from conformance import profiles
from conformance.providers.local import nodes
from conformance.providers.local.nodes import NODES_ENV

from . import runner
from .faults import Fault, all_faults
from .rogue import FAILED_MARK

pytestmark = [pytest.mark.sensitivity, pytest.mark.local_cluster]
RESULTS = runner.ROOT / "benchmarks" / "results" / "sensitivity"
GREEN = ("passed", "not_applicable")


@pytest.mark.parametrize("fault", all_faults(), ids=lambda f: f.name)
def test_seeded_fault_is_caught_by_its_check_and_no_other(fault: Fault, tmp_path: Path) -> None:
    if fault.on_checkout and checkouts.named_checkout() is None:
        pytest.skip(checkouts.NO_CHECKOUT)
    if fault.worker_nodes and not nodes.asked(profiles.load(runner.HEALTHY_PROFILE).local_nodes):
        pytest.skip(f"needs a local cluster with worker nodes: {NODES_ENV} asks for none")
    observed = runner.run(fault, tmp_path)
    tests = observed.summary["tests"]
    context = f"exit {observed.exit_code}; outcomes {_outcomes(tests)}\n{observed.output}"
    _record(fault, observed)
    _seed_took_effect(fault, observed)
    for index, check in enumerate(fault.catching):
        found = [t for t in tests if check.matches(t["id"])]
        assert found, f"{check} did not run: {context}"
        evidence = fault.evidence_for(index)
        for test in found:
            assert test["outcome"] == fault.expect, (
                f"{test['id']}: {test['outcome']} ({test['reason']}); {context}"
            )
            assert evidence.lower() in test["reason"].lower() + test.get("details", "").lower(), (
                f"{test['id']} failed without the evidence {evidence!r}: {test['reason']}"
            )
    for check in fault.others:
        found = [t for t in tests if check.matches(t["id"])]
        assert found, f"bystander {check} did not run: {context}"
        red = [t for t in found if t["outcome"] not in GREEN]
        assert not red, f"bystander {check} is red under {fault.name}: {red}"
    named = [*fault.catching, *fault.others]
    strays = [t["id"] for t in tests if not any(c.matches(t["id"]) for c in named)]
    assert not strays, f"the -k selection {fault.keyword()!r} also ran {strays}"


def _seed_took_effect(fault: Fault, observed: runner.Observed) -> None:
    """A fault that was never seeded proves nothing: the operator the run left ran with it, or the
    rogue acted at least once (and never broke)."""
    operator = observed.seeded_operator
    for name, value in fault.env.items():
        assert operator["env"].get(name) == value, (
            f"the run's operator did not have {name}={value}: {operator}"
        )
    for arg in fault.extra_args:
        assert arg in operator["args"], f"the run's operator did not have {arg}: {operator}"
    if fault.version:
        assert operator["image"].endswith(fault.version), (
            f"the run's operator is not {fault.version}: {operator}"
        )
    if fault.claimed_version:
        tag = f":{fault.claimed_version}-src."  # kuberay_source.image_tag: the claimed version, a tree
        assert tag in operator["image"], (
            f"the run's operator is not a checkout claiming {fault.claimed_version}: {operator}"
        )
    if fault.on_checkout:
        assert "-src." in operator["image"], f"the run's operator is not built from the checkout: {operator}"
    if fault.rogue:
        broken = [line for line in observed.rogue_log if line.startswith(FAILED_MARK)]
        assert not broken, f"the rogue broke: {broken}"
        assert observed.rogue_log, f"the rogue {fault.rogue.__name__} never acted"


def _outcomes(tests: list[dict]) -> dict[str, str]:
    return {t["id"].rsplit("::", 1)[-1]: t["outcome"] for t in tests}


def _record(fault: Fault, observed: runner.Observed) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    tests = observed.summary["tests"]
    record = {
        "fault": fault.name,
        "area": fault.area,
        "misbehaviour": fault.misbehaviour,
        "seed": fault.seed(),
        "catches": list(fault.catches),
        "expect": fault.expect,
        "outcomes": {t["id"].removeprefix("conformance/suites/"): t["outcome"] for t in tests},
        "reasons": {
            t["id"].removeprefix("conformance/suites/"): t["reason"][:200] for t in tests if t["reason"]
        },
        "run_id": observed.summary.get("run_id", ""),  # reports/sensitivity/<run id>/
        "run_s": observed.run_s,
        "restore_s": observed.restore_s,
        "date": datetime.date.today().isoformat(),
        "rogue_actions": len(observed.rogue_log),
    }
    (RESULTS / f"{fault.name}.json").write_text(json.dumps(record, indent=2) + "\n")
