"""The outcome rules: how a check's pytest reports become its outcome in summary.json.

- A skip whose reason starts with `NOT_APPLICABLE` ("not applicable: ") is `not_applicable`, with
  the rest as its reason; any other skip is `skipped`.
- A failure in the check's call that is an `AssertionError` (also a wait inside `behaviour(...)`,
  which raises one) is `failed`: the system under test misbehaved. Any other failure, and any
  failure in setup or teardown (a wait that timed out, an API error, a provisioning error), is
  `error`: the environment or the harness failed. The first failure of a check is the one that
  counts.
- A check that was set up but whose call never ended (the run was interrupted) is `error`.
- A rerun (pytest-rerunfailures) starts the check afresh: a later pass is `passed`, with the
  earlier attempt's reason kept and `attempts` counted.
- A check whose worker process died is `error`, with xdist's reason.
- A check whose secret appears in a file of the finished run is `failed` (session/controller.py).
"""

from __future__ import annotations

import pytest

from conformance.checks import NOT_APPLICABLE
from conformance.report.summary import TestResult

INTERRUPTED = "interrupted: the run stopped while this check ran"


def judge(result: TestResult, report: pytest.TestReport, call: pytest.CallInfo[None]) -> bool:
    """Apply one phase's report (setup, call, teardown) to the check's result; False when the report
    changes nothing, being a failure after the first."""
    if report.skipped:
        reason = skip_reason(report)
        result.outcome = "not_applicable" if reason.startswith(NOT_APPLICABLE) else "skipped"
        result.reason = reason.removeprefix(NOT_APPLICABLE)
    elif report.failed:
        if result.outcome in ("failed", "error"):
            return False  # the first failure is the one that matters
        conformance_failure = (
            report.when == "call"
            and call.excinfo is not None
            and isinstance(call.excinfo.value, AssertionError)
        )
        result.outcome = "failed" if conformance_failure else "error"
        result.reason = failure_reason(call, report)
        result.details = failure_details(report)
    return True


def settles(report: pytest.TestReport) -> bool:
    """Whether the check's outcome is known after this report: its call ran, or setup ended it."""
    return report.when == "call" or not report.passed


def unsettled(result: TestResult) -> None:
    """Set up, then interrupted before its call ended: nothing was observed."""
    if result.outcome == "passed":
        result.outcome, result.reason = "error", INTERRUPTED


def rerun(result: TestResult) -> None:
    """A failed attempt became "rerun": the check starts afresh, and a pass on a later attempt is flaky."""
    result.attempts += 1
    result.reason = f"attempt {result.attempts - 1}: {result.reason}"
    result.outcome, result.details = "passed", ""


def crashed(result: TestResult, reason: str) -> None:
    """Its worker died while it ran: the check is known, and nothing was observed."""
    result.outcome, result.reason = "error", reason


def secret_leaked(result: TestResult, files: list[str]) -> None:
    result.outcome = "failed"
    result.reason = f"its secret appears in files of the finished run: {', '.join(files)}"


def skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


def failure_reason(call: pytest.CallInfo[None], report: pytest.TestReport) -> str:
    if call.excinfo is not None:
        text = str(call.excinfo.value).strip().splitlines()
        first = text[0] if text else ""
        return f"{call.excinfo.typename}: {first}"[:500]
    return str(report.longrepr).splitlines()[-1][:500] if report.longrepr else ""


def failure_details(report: pytest.TestReport) -> str:
    """The whole assertion message, with pytest's explanation of the values compared."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text[:4000]
