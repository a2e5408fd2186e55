"""The sensitivity suite runs only when asked (`make sensitivity`, or `pytest -m sensitivity`).

Each fault takes minutes of the one local cluster, so `make test` (which runs `pytest tests`)
leaves these out unless the marker expression names them.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "sensitivity" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="sensitivity suite: run with `make sensitivity` (-m sensitivity)")
    for item in items:
        if item.get_closest_marker("sensitivity"):
            item.add_marker(skip)
