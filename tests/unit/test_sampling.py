"""What makes a sampler's history evidence (conformance/kube/sampling.py)."""

import pytest

from conformance.kube.sampling import assert_complete, history_problems


def test_a_full_history_has_no_problems() -> None:
    assert history_problems("x", [], [0.5, 1.0, 1.5], end=2.0, max_gap_s=1.0, start=0.0) == []


def test_failed_reads_too_few_reads_and_holes_are_problems() -> None:
    assert history_problems("x", ["ApiException: 500"], [0.5, 1.0], 1.5, 1.0, 0.0) == [
        "1 reads of x failed: ApiException: 500"
    ]
    assert history_problems("x", [], [0.5], 1.0, 1.0, 0.0) == ["only 1 reads of x were made"]
    (hole,) = history_problems("x", [], [0.5, 4.0], 4.5, 1.0, 0.0)
    assert "3.5s apart" in hole
    # A sampler that stopped reading long before it was stopped left a hole at the end.
    (tail,) = history_problems("x", [], [0.5, 1.0], 9.0, 1.0, 0.0)
    assert "8.0s apart" in tail


def test_an_incomplete_history_fails_the_check() -> None:
    with pytest.raises(AssertionError, match="history of x is incomplete: only 0 reads"):
        assert_complete("x", history_problems("x", [], [], 1.0, 1.0, 0.0))
