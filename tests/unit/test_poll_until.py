"""poll_until: the one poll loop for states no watch shows (Ray's node table, an app's answers)."""

from __future__ import annotations

import pytest

from conformance.kube.wait import WaitTimeout, poll_until


def test_returns_the_first_answer_and_retries_only_the_listed_exceptions() -> None:
    answers = iter([None, LookupError("no head yet"), "ready"])

    def check() -> str | None:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert poll_until(check, what="x", timeout=5, every=0.01, retry_on=(LookupError,)) == "ready"


def test_an_unlisted_exception_ends_the_wait_at_once() -> None:
    def check() -> None:
        raise KeyError("a harness bug")

    with pytest.raises(KeyError):
        poll_until(check, what="x", timeout=5, every=0.01)


def test_running_out_of_time_is_a_wait_timeout_naming_what_was_last_seen() -> None:
    def check() -> None:
        raise LookupError("no head yet")

    with pytest.raises(WaitTimeout, match="no head yet"):
        poll_until(check, what="the head", timeout=0.05, every=0.01, retry_on=(LookupError,))


def test_a_timeout_names_what_describe_last_saw() -> None:
    described: list[str] = []

    def describe() -> str:
        described.append(f"endpoints seen {len(described) + 1} times")
        return described[-1]

    with pytest.raises(WaitTimeout) as raised:
        poll_until(lambda: None, what="the new head", timeout=0.05, every=0.01, describe=describe)
    assert len(described) > 1
    assert described[-1] in str(raised.value)
