"""`run --tier smoke` and `list --tier smoke`: the checks marked `smoke`, at least one per area, an
upgrade under load through the Gateway and a fault-recovery check among them, minutes not hours by
the recorded durations; and bad --tier/--shard input refused before anything is made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import selection
from conformance import workflow_budget as budget
from conformance.errors import EXIT_USAGE
from conformance.report.summary import AREAS

SMOKE_MOST_MIN = 20  # issue 44: the smoke tier within 20 minutes on this 2-core machine
WORKERS = 2  # what `--workers auto` gives here


def _smoke() -> list[dict[str, object]]:
    script = (
        "import json\nfrom conformance import listing\n"
        "print(json.dumps([c.__dict__ for c in listing.collect('default', (), (), None, tier='smoke')]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def smoke() -> list[dict[str, object]]:
    return _smoke()


def _name(check: dict[str, object]) -> str:
    return str(check["id"]).split("::", 1)[1]


def test_the_smoke_tier_covers_every_area(smoke: list[dict[str, object]]) -> None:
    assert {c["area"] for c in smoke} >= set(AREAS)
    assert all("smoke" in c["markers"] for c in smoke)  # type: ignore[operator]


def test_the_smoke_tier_upgrades_a_rayservice_under_load_through_the_gateway_and_recovers_a_fault(
    smoke: list[dict[str, object]],
) -> None:
    upgrades = [c for c in smoke if c["area"] == "upgrade" and "under_load" in _name(c)]
    assert upgrades and all("gateway_api" in c["requires"] for c in upgrades)  # type: ignore[operator]
    assert "test_incremental_upgrade_under_load[ray2.58.0-step100-interval1-surge100]" in map(_name, upgrades)
    assert not any("step5-interval10" in _name(c) for c in upgrades), "only the cheapest plan"
    assert [c for c in smoke if c["area"] == "fault-recovery"]


def test_the_smoke_tier_fits_well_within_its_minutes_by_the_recorded_durations(
    smoke: list[dict[str, object]],
) -> None:
    checks = [budget.Check(_name(c), str(c["area"]), "exclusive" in c["markers"]) for c in smoke]  # type: ignore[operator]
    recorded = budget.recorded_durations()
    assert all(c.name in recorded for c in checks if "[no-samples" not in c.name)
    seconds, exclusive = budget.charged(checks, recorded)
    minutes = (
        budget.modelled_seconds(seconds, exclusive, WORKERS)
        * budget.calibration(budget.collected("default"))
        / 60
    )
    assert minutes <= SMOKE_MOST_MIN / 2, f"the smoke tier's checks take {minutes:.1f} min by the model"


@pytest.mark.parametrize(
    ("ident", "part", "matches"),
    [("ray2.58.0-step100-interval1-surge100", "step100-interval1-surge100", True),
     ("ray2.58.0-step5-interval10-surge25", "step100-interval1-surge100", False),
     ("ray2.58.0-v1", "v1", True), ("ray2.58.0-v12", "v1", False),
     ("ray-cluster.sample.yaml-ray2.58.0", "ray-cluster.sample.yaml", True),
     ("ray-cluster.sample.yaml-ray2.58.0", "sample.yaml", False)],
)  # fmt: skip
def test_a_smoke_marker_names_whole_parts_of_a_parametrization(ident: str, part: str, matches: bool) -> None:
    assert selection.has_part(ident, part) is matches


@pytest.mark.parametrize(
    ("args", "expected"),
    [(["--tier", "nope"], "'nope' is not one of"), (["--shard", "3/2"], "K is above N"),
     (["--shard", "0/4"], "K and N start at 1"), (["--shard", "x"], "is not K/N")],
)  # fmt: skip
@pytest.mark.parametrize("command", ["run", "list"])
def test_a_bad_tier_or_shard_is_a_usage_error_before_anything_is_made(
    tmp_path: Path, command: str, args: list[str], expected: str
) -> None:
    program = Path(sys.executable).with_name("kuberay-conformance")
    done = subprocess.run(
        [str(program), command, *args], capture_output=True, text=True, check=False, cwd=tmp_path, timeout=60
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert (
        done.stderr.startswith("kuberay-conformance: error: ") and len(done.stderr.strip().splitlines()) == 1
    )
    assert expected in done.stderr and "--" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no reports/, no run folder


def test_the_plugin_refuses_a_bad_tier_or_shard_under_plain_pytest(tmp_path: Path) -> None:
    """The options the CLI passes are checked again where pytest is run by hand."""
    from conformance import suite_session  # noqa: PLC0415

    for option, value in (("--conformance-tier", "nope"), ("--conformance-shard", "5/4")):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *suite_session.args(), "--collect-only", "-q",
             "--conformance-provider", "local", option, value],
            capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error
        assert option.removeprefix("--conformance-") in done.stderr
