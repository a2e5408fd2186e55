"""`run --shard K/N` and `list --shard K/N` (conformance/selection.py): every selected check in
exactly one shard, the same split from every process, balanced by the recorded durations."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from conformance import selection
from conformance.selection import Row, Shard, parse_shard

SHARDS = 4


def _list(*args: str) -> dict[str, object]:
    """`kuberay-conformance list` as data, in a process of its own (each a machine of its own)."""
    script = (
        "import json, sys\nfrom conformance import listing\n"
        "found = listing.collect('default', (), (), None, tier=sys.argv[1], shard=sys.argv[2] or None)\n"
        "print(json.dumps({'checks': [c.__dict__ for c in found], 'selection': found.selection}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def whole() -> dict[str, object]:
    return _list("full", "")


@pytest.fixture(scope="module")
def shards() -> list[dict[str, object]]:
    return [_list("full", f"{k}/{SHARDS}") for k in range(1, SHARDS + 1)]


def _ids(listed: dict[str, object]) -> list[str]:
    return [c["id"] for c in listed["checks"]]  # type: ignore[index, union-attr]


@pytest.mark.parametrize(
    ("text", "shard"), [("1/1", Shard(1, 1)), ("2/4", Shard(2, 4)), ("10/10", Shard(10, 10))]
)
def test_a_shard_is_k_of_n(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard and str(shard) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [("3/2", "K is above N"), ("0/4", "start at 1"), ("1/0", "start at 1"), ("x", "not K/N"),
     ("2", "not K/N"), ("-1/4", "not K/N"), ("1/4/2", "not K/N"), (" 1/4", "not K/N")],
)  # fmt: skip
def test_a_bad_shard_says_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_shard(text)


def test_every_check_is_in_exactly_one_shard_and_every_process_splits_alike(
    whole: dict[str, object], shards: list[dict[str, object]]
) -> None:
    every = [check for shard in shards for check in _ids(shard)]
    assert sorted(every) == sorted(_ids(whole)) and len(every) == len(set(every))
    splits = {shard["selection"]["split"] for shard in shards}  # type: ignore[index]
    assert len(splits) == 1 and None not in splits
    for k, shard in enumerate(shards, start=1):
        chosen = shard["selection"]
        assert chosen["shard"] == f"{k}/{SHARDS}" and chosen["selected"] == len(_ids(whole))  # type: ignore[index]
        assert chosen["checks"] == len(_ids(shard)) > 0  # type: ignore[index]
    assert _list("full", f"2/{SHARDS}") == shards[1], "a second collection split differently"


def test_checks_that_share_a_module_cluster_stay_in_one_shard(shards: list[dict[str, object]]) -> None:
    where: dict[str, set[int]] = {}
    for k, shard in enumerate(shards, start=1):
        for check in shard["checks"]:  # type: ignore[union-attr]
            where.setdefault(check["unit"], set()).add(k)
    modules = {unit: found for unit, found in where.items() if unit.startswith("module:")}
    assert "module:conformance/suites/test_raycluster.py" in modules
    assert all(len(found) == 1 for found in modules.values()), modules


def test_shards_are_balanced_by_recorded_durations(whole: dict[str, object]) -> None:
    """Greedy longest-first: no part is heavier than the lightest by more than the heaviest unit."""
    recorded = selection.recorded_durations()
    assert len(recorded) > 200, "the recorded durations are missing"
    rows = [
        Row(c["id"].split("::", 1)[1], c["area"], c["unit"], "exclusive" in c["markers"])
        for c in whole["checks"]  # type: ignore[union-attr]
    ]
    weights = selection.unit_weights(rows, recorded)
    for count in (2, 4, 10):
        loads = [sum(weights[u] for u in part) for part in selection.longest_first(weights, count)]
        assert max(loads) - min(loads) <= max(weights.values()) + 1e-9, loads
        assert max(loads) <= 1.1 * sum(loads) / count, f"{count} shards: {[round(x) for x in loads]}"


def test_the_split_depends_on_the_weights_not_on_their_order() -> None:
    rng = random.Random(44)
    weights = {f"test_{i}": float(rng.randint(1, 300)) for i in range(120)}
    parts = selection.longest_first(weights, 5)
    shuffled = list(weights.items())
    rng.shuffle(shuffled)
    assert selection.longest_first(dict(shuffled), 5) == parts
    assert selection.fingerprint(dict(shuffled)) == selection.fingerprint(weights)
    assert sorted(u for part in parts for u in part) == sorted(weights)
    weights["test_0"] += 1
    assert selection.fingerprint(weights) != selection.fingerprint(dict(shuffled))


def test_unrecorded_checks_weigh_the_median_of_their_area_or_of_all() -> None:
    recorded = {"test_a[1]": 10.0, "test_a[2]": 30.0, "test_a[3]": 50.0, "test_b[1]": 100.0}
    checks = [("test_a[1]", "rayjob"), ("test_a[2]", "rayjob"), ("test_a[3]", "rayjob"),
              ("test_b[1]", "gpu"), ("test_new[1]", "rayjob"), ("test_new[2]", "samples")]  # fmt: skip
    seconds = selection.charged_seconds(checks, recorded)
    assert seconds["test_new[1]"] == 30.0  # the median of rayjob's 10, 30, 50
    assert seconds["test_new[2]"] == 40.0  # no samples recorded: the median of all four
    assert selection.charged_seconds([("test_x", "gpu")], {}) == {"test_x": selection.UNRECORDED_S}


def test_an_exclusive_check_weighs_its_whole_duration_and_others_their_share() -> None:
    rows = [Row("test_a", "upgrade", "test_a", True), Row("test_b", "rayjob", "u", False),
            Row("test_c", "rayjob", "u", False)]  # fmt: skip
    weights = selection.unit_weights(rows, {"test_a": 100.0, "test_b": 100.0, "test_c": 50.0})
    assert weights == {"test_a": 100.0, "u": 150.0 / selection.PARALLEL_WORKERS}
