"""What the checks of the suites import from the harness: the markers a check carries, the words
of its outcome, the run's labels, and how a check's area and kuberay issues are read.

A check is a test function marked with its area (`@pytest.mark.area(...)`, usually the module's
`pytestmark`), the kuberay issues it encodes (`kuberay_issue`) and its preconditions
(`requires`); see docs/writing-checks.md. How its outcome is judged is outcomes.py; the fixtures
it takes are fixtures.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance import exclusive, node_pressure, selection
from conformance.report.summary import AREAS, HARNESS

# A skip whose reason starts with this is "not applicable" (a precondition is absent), not "skipped".
NOT_APPLICABLE = "not applicable: "
# Labels every namespace of a run with its run id.
RUN_LABEL = "kuberay-conformance.io/run-id"
KUBERAY_ISSUE_URL = "https://github.com/ray-project/kuberay/issues/{}"
# The session's run, a session/base.py ConformanceRun: `request.config.stash[RUN_KEY]` (typed Any
# here, since the session imports this module).
RUN_KEY = pytest.StashKey[Any]()

MARKERS = (
    "area(name): the conformance area a check belongs to",
    "kuberay_issue(*numbers): kuberay issues the check encodes",
    "requires(*needs): preconditions (gpu, gateway_api, gate:X, kuberay>=V)",
    exclusive.MARKER_HELP,
    node_pressure.NO_PODS_HELP,
    selection.SMOKE_HELP,
)


def register_markers(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def area_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("area")
    if marker is None or marker.args[0] not in (*AREAS, HARNESS):
        raise pytest.UsageError(
            f"{item.nodeid}: every conformance check needs @pytest.mark.area(one of {AREAS})"
        )
    return str(marker.args[0])


def issues_of(item: pytest.Item) -> list[int]:
    return [int(n) for marker in item.iter_markers("kuberay_issue") for n in marker.args]


def check_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]
