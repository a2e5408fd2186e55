"""One run as its options make it, built once, before pytest starts.

`kuberay-conformance run` builds it from its parameters, checks the input and takes the cluster
lock, then hands it to pytest as a plugin object (`pytest.main(args, plugins=[setup])`); under
plain pytest the plugin builds it from the `--conformance-*` options. Either way the profile is
loaded, the `Environment` made and the input checked once per run, and the lock is this
object's: whoever takes it first (the CLI, or the session when the cluster answers only later)
holds it for the other.

A worker of a parallel run (pytest-xdist) is another process: it gets the controller's
`RunOptions` and selection inside the state the controller packs for it (parallel.py), and
makes its own `RunSetup` from them without loading anything again (`for_worker`).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from conformance import cluster_lock
from conformance.environment import Environment, RunOptions
from conformance.options import RunValues


class RunSetup:
    def __init__(
        self,
        options: RunOptions,
        selection: dict[str, object],
        wait_for_lock: bool = False,
        recount_workers: bool = False,
    ) -> None:
        self.options = options
        self.environment = Environment(options)
        self.selection = selection  # as asked (summary.json's `selection`, before the counts)
        self.wait_for_lock = wait_for_lock
        # `--workers auto` before the cluster exists (kind, eks): count once it is made.
        self.recount_workers = recount_workers
        self.lock: cluster_lock.ClusterLock | None = None

    @classmethod
    def build(cls, values: RunValues, keyword: str | None) -> RunSetup:
        """From the options' values; a bad one is a UsageError (or another HarnessError) here."""
        setup = cls(values.run_options(), {}, values.wait_for_lock, values.recount_workers)
        setup.selection = values.asked_selection(keyword)
        return setup

    @classmethod
    def for_worker(cls, state: dict[str, Any]) -> RunSetup:
        """In a worker: the controller's options and selection, from its packed state."""
        return cls(state["options"], dict(state["selection"]))

    @classmethod
    def handed_to(cls, config: pytest.Config) -> RunSetup | None:
        """The setup the CLI gave `pytest.main` as a plugin, if it did."""
        found = [p for p in config.pluginmanager.get_plugins() if isinstance(p, cls)]
        return found[0] if found else None

    @property
    def areas(self) -> tuple[str, ...]:
        return tuple(str(a) for a in self.selection.get("areas", ()))  # type: ignore[union-attr]

    def claim(self, api: client.ApiClient, started: str) -> cluster_lock.ClusterLock:
        """The run's lock: the one already taken, or a newly acquired one (LockHeld if refused)."""
        if self.lock is None:
            self.lock = cluster_lock.claim(api, self.options.run_id, started, self.wait_for_lock)
        return self.lock

    def release_lock(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()
