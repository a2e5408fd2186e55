"""The end-to-end tests' topology: the one-node local cluster, unless the caller sets one.

What these tests assert is the control-plane node's (its GPUs, its programs, its clean `down`),
and one node is the quicker cluster. `kuberay-conformance` commands they start would otherwise make
the default profile's worker nodes and refuse the one-node cluster the session shares;
test_local_multinode.py makes the worker nodes itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from conformance.providers.local.nodes import NODES_ENV, ONE_NODE


@pytest.fixture(scope="session", autouse=True)
def one_node_unless_asked() -> Iterator[None]:
    if NODES_ENV in os.environ:
        yield
        return
    os.environ[NODES_ENV] = ONE_NODE
    yield
    del os.environ[NODES_ENV]
