"""A pytest plugin loaded into a conformance run (PYTEST_PLUGINS) that acts behind the operator's back.

The run prepares first (cluster, operator, images); then this plugin runs the function named by
KRC_SENSITIVITY_ROGUE ("module:function"). The function gets a `Rogue`. One marked
`@before_checks` (a CRD or a Role changed in one go) is run to its end before the first check
starts: in a thread, a check that makes its object at once would win the race and see the healthy
schema. Any other is started in a thread of the run's process and acts on the run's objects until
`rogue.stopped`. Every action it takes is written to
KRC_SENSITIVITY_ROGUE_LOG, one line each, so the sensitivity test can tell that the fault was
really seeded; an exception in it is written there too (a seed that broke proves nothing).
"""

from __future__ import annotations

import importlib
import os
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from conformance import parallel
from conformance.checks import RUN_KEY, RUN_LABEL
from conformance.kube.sampling import own_client

ROGUE_ENV = "KRC_SENSITIVITY_ROGUE"
LOG_ENV = "KRC_SENSITIVITY_ROGUE_LOG"
FAILED_MARK = "rogue-failed"
_BEFORE_CHECKS = "_krc_before_checks"


def before_checks(act: Callable[[Rogue], None]) -> Callable[[Rogue], None]:
    """Mark a seed that is done in one go: the run's checks start once it has returned."""
    setattr(act, _BEFORE_CHECKS, True)
    return act


class Rogue:
    def __init__(self, api: client.ApiClient, run_id: str, operator_namespace: str, log: Path) -> None:
        self.api, self.run_id, self.operator_namespace = api, run_id, operator_namespace
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._log = log
        self._stop = threading.Event()

    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.api)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()

    def acted(self, what: str) -> None:
        with self._log.open("a") as out:
            out.write(what + "\n")

    def in_run(self, obj: Any) -> bool:
        """Whether an object lives in one of this run's namespaces."""
        namespace = obj["metadata"]["namespace"] if isinstance(obj, dict) else obj.metadata.namespace
        try:
            labels = self.core.read_namespace(namespace).metadata.labels or {}
        except ApiException as exc:
            if exc.status == 404:  # a namespace gone since the event: no longer the run's concern
                return False
            raise
        return labels.get(RUN_LABEL) == self.run_id

    def events(self, list_fn: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Watch events of `list_fn` (a cluster-wide list call) until stopped, re-opened as they end.

        Each re-open resumes where the last left off: a fresh one would replay every object as
        ADDED (seen: a second Ingress create, 409). After 410 Gone it starts over, replaying."""
        watcher = watch.Watch()
        while not self.stopped:
            since = {"resource_version": watcher.resource_version} if watcher.resource_version else {}
            try:
                for event in watcher.stream(list_fn, timeout_seconds=5, **since, **kwargs):
                    yield event
                    if self.stopped:
                        return
            except ApiException as exc:
                if exc.status != 410:
                    raise
                watcher = watch.Watch()

    def ray_objects(self, plural: str) -> Iterator[dict[str, Any]]:
        """ADDED/MODIFIED events of Ray custom objects in the run's namespaces."""

        def list_all(**kwargs: Any) -> Any:
            return self.custom.list_cluster_custom_object("ray.io", "v1", plural, **kwargs)

        for event in self.events(list_all):
            if event["type"] in ("ADDED", "MODIFIED") and self.in_run(event["object"]):
                yield event["object"]


def side_by_side(rogue: Rogue, *acts: Callable[[Rogue], None]) -> None:
    """Run several watches of one rogue, each in a thread of its own, until they end (when the
    rogue is stopped). One that breaks is logged as the rogue's failure, as `_guarded` logs it."""
    threads = [
        threading.Thread(target=_guarded, args=(act, rogue), daemon=True, name=f"rogue-{act.__name__}")
        for act in acts
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _resolve(target: str) -> Callable[[Rogue], None]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def _guarded(act: Callable[[Rogue], None], rogue: Rogue) -> None:
    try:
        act(rogue)
    except Exception:  # noqa: BLE001 - recorded for the sensitivity test, which then fails
        rogue.acted(f"{FAILED_MARK}: {traceback.format_exc()}")


# One rogue per run, in the process that prepared it: a serial run prepares as its collection ends,
# a parallel run's controller as its session starts, before its workers get a check (each worker
# has the prepared environment too, so starting there would run one rogue per worker).
@pytest.hookimpl(trylast=True)  # after the conformance plugin has prepared the environment
def pytest_sessionstart(session: pytest.Session) -> None:
    if parallel.is_controller(session.config):
        _start(session)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if not parallel.is_controller(session.config) and not parallel.is_worker(session.config):
        _start(session)


def _start(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    target = os.environ.get(ROGUE_ENV, "")
    if run is None or not target or run.environment.api is None:
        return
    # A client of its own: an exec on the checks' client swaps its requests for websocket ones.
    api = own_client(run.environment.api)
    rogue = Rogue(api, run.options.run_id, run.environment.operator_namespace, Path(os.environ[LOG_ENV]))
    act = _resolve(target)
    if getattr(act, _BEFORE_CHECKS, False):
        _guarded(act, rogue)
    else:
        threading.Thread(target=_guarded, args=(act, rogue), daemon=True, name="rogue").start()
    session.config.stash[_ROGUE_KEY] = rogue


_ROGUE_KEY = pytest.StashKey[Rogue]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    rogue = session.config.stash.get(_ROGUE_KEY, None)
    if rogue is not None:
        rogue.stop()
