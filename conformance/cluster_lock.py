"""One conformance run per cluster: a coordination.k8s.io Lease the run holds while it runs.

Two runs on one cluster ruin each other (each re-applies the operator; the operator-upgrade
check swaps the cluster-wide operator for minutes), so a run takes the Lease
`kuberay-conformance/kuberay-conformance-run` before it changes anything and renews it from a
background thread. A second run finds it held and refuses at once, naming the holder's run id,
host and start time (`LockHeld`, exit 2), or waits for it with `wait=True`.

A holder that stopped renewing (killed with SIGKILL, its machine gone) is stale once its
`renewTime` is more than `leaseDurationSeconds` (STALE_AFTER_S) old; the next run takes the
Lease over and says so in its notes. Staleness is judged by this machine's clock against the
holder's, as Kubernetes' own leader election does: clocks more than a few seconds apart
shorten or lengthen that time.

The Lease is released (deleted, only if still ours) at the end of the run and on interrupt.
The namespace stays: it is the harness's own and holds nothing else of a run.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from conformance import interrupts
from conformance.errors import HarnessError
from conformance.progress import progress

NAMESPACE = "kuberay-conformance"
NAME = "kuberay-conformance-run"
STALE_AFTER_S = 60
RENEW_EVERY_S = 15
WAIT_POLL_S = 5.0
_ANNOTATION = "kuberay-conformance.io/"


class LockHeld(HarnessError):
    """Another run holds the cluster; nothing was changed."""


@dataclass(frozen=True)
class Holder:
    run_id: str
    host: str
    started: str
    renewed: datetime.datetime | None

    def describe(self) -> str:
        return f"run {self.run_id} on host {self.host} (started {self.started})"

    def stale(self, at: datetime.datetime, after_s: float = STALE_AFTER_S) -> bool:
        return self.renewed is None or (at - self.renewed).total_seconds() > after_s


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _micro_time(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def holder_of(lease: client.V1Lease) -> Holder:
    notes = lease.metadata.annotations or {}
    renewed = lease.spec.renew_time or lease.spec.acquire_time
    if renewed is not None and renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=datetime.UTC)
    return Holder(
        run_id=lease.spec.holder_identity or "?",
        host=notes.get(_ANNOTATION + "host", "?"),
        started=notes.get(_ANNOTATION + "started", "?"),
        renewed=renewed,
    )


def current_lease(coordination: client.CoordinationV1Api, timeout_s: float = 10) -> client.V1Lease | None:
    """The run Lease as it is now, or None when no run holds the cluster."""
    try:
        return coordination.read_namespaced_lease(NAME, NAMESPACE, _request_timeout=timeout_s)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def live_holder(api: client.ApiClient) -> Holder | None:
    """The run that holds the cluster's lock and still renews it; None when it is free or stale."""
    lease = current_lease(client.CoordinationV1Api(api))
    if lease is None:
        return None
    holder = holder_of(lease)
    return None if holder.stale(_utcnow()) else holder


class ClusterLock:
    """The Lease of one run: `acquire`, then renewed in the background until `release`."""

    def __init__(self, api: client.ApiClient, run_id: str, started: str) -> None:
        self.api = api
        self.run_id = run_id
        self.started = started
        self.coordination = client.CoordinationV1Api(api)
        # Facts for the report: a stale lock taken over, or the lock lost while running.
        self.notes: list[str] = []
        self._resource_version: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._last_holder: Holder | None = None

    # -- taking it ------------------------------------------------------------------------

    def acquire(self, wait: bool = False) -> None:
        """Take the Lease, or raise LockHeld naming its holder (with `wait`, wait for it instead)."""
        self._ensure_namespace()
        if not self._try_once():
            if not wait:
                raise self._refusal()
            with progress(f"waiting for the cluster lock held by {self._holder_text()}") as line:
                while not self._try_once():
                    line.update(f"now held by {self._holder_text()}")
                    time.sleep(WAIT_POLL_S)  # poll-interval: a Lease has no event worth watching for
        self._renewer = threading.Thread(target=self._renew_loop, name="cluster-lock-renewer", daemon=True)
        interrupts.start_thread(self._renewer)

    def _try_once(self) -> bool:
        try:
            made = self.coordination.create_namespaced_lease(NAMESPACE, self._body(acquired=_utcnow()))
        except ApiException as exc:
            if exc.status != 409:
                raise
        else:
            self._resource_version = made.metadata.resource_version
            return True
        lease = current_lease(self.coordination)
        if lease is None:  # released between our create and read: try again
            return False
        holder = holder_of(lease)
        if holder.run_id == self.run_id:
            self._resource_version = lease.metadata.resource_version
            return True
        if not holder.stale(_utcnow()):
            self._last_holder = holder
            return False
        return self._take_over(lease, holder)

    def _take_over(self, lease: client.V1Lease, holder: Holder) -> bool:
        body = self._body(acquired=_utcnow(), transitions=(lease.spec.lease_transitions or 0) + 1)
        body["metadata"]["resourceVersion"] = lease.metadata.resource_version
        try:
            made = self.coordination.replace_namespaced_lease(NAME, NAMESPACE, body)
        except ApiException as exc:
            if exc.status in (404, 409):  # someone else moved first; look again
                return False
            raise
        self._resource_version = made.metadata.resource_version
        renewed = holder.renewed.isoformat(timespec="seconds") if holder.renewed else "never"
        self.notes.append(
            f"the cluster lock of {holder.describe()} was taken over: it had not been renewed "
            f"since {renewed}, more than {STALE_AFTER_S} s before this run started"
        )
        return True

    def _refusal(self) -> LockHeld:
        return LockHeld(
            f"the cluster is in use by {self._holder_text()} (Lease {NAMESPACE}/{NAME})",
            "wait for it with --wait-for-lock, or run on another cluster",
        )

    def _holder_text(self) -> str:
        return self._last_holder.describe() if self._last_holder else "another run"

    def _ensure_namespace(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def _body(self, acquired: datetime.datetime, transitions: int = 0) -> dict[str, object]:
        return {
            "metadata": {
                "name": NAME,
                "annotations": {
                    _ANNOTATION + "host": socket.gethostname(),
                    _ANNOTATION + "pid": str(os.getpid()),
                    _ANNOTATION + "started": self.started,
                },
            },
            "spec": {
                "holderIdentity": self.run_id,
                "leaseDurationSeconds": STALE_AFTER_S,
                "acquireTime": _micro_time(acquired),
                "renewTime": _micro_time(acquired),
                "leaseTransitions": transitions,
            },
        }

    # -- keeping it -----------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                self.renew()
            except ApiException as exc:
                if exc.status in (404, 409):
                    self.notes.append(
                        f"the cluster lock was lost at {_utcnow().isoformat(timespec='seconds')} "
                        f"(the Lease was {'deleted' if exc.status == 404 else 'changed'} by someone else)"
                    )
                    return
            except Exception:  # noqa: BLE001 - a passing API or network error: the next tick tries
                pass  # again, and STALE_AFTER_S leaves room for three missed ones

    def renew(self) -> None:
        patch = {
            "metadata": {"resourceVersion": self._resource_version},
            "spec": {"renewTime": _micro_time(_utcnow())},
        }
        made = self.coordination.patch_namespaced_lease(NAME, NAMESPACE, patch)
        self._resource_version = made.metadata.resource_version

    # -- giving it back -------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing and delete the Lease if it is still ours; safe to call twice."""
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            interrupts.join_thread(self._renewer, timeout=10)
        if self._resource_version is None:
            return
        try:
            lease = self.coordination.read_namespaced_lease(NAME, NAMESPACE)
            if lease.spec.holder_identity == self.run_id:
                self.coordination.delete_namespaced_lease(
                    NAME,
                    NAMESPACE,
                    body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=lease.metadata.uid)),
                )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        finally:
            self._resource_version = None


def claim(api: client.ApiClient, run_id: str, started: str, wait: bool = False) -> ClusterLock:
    """Take the run's lock (the caller keeps it, and releases it with `ClusterLock.release`)."""
    lock = ClusterLock(api, run_id, started)
    lock.acquire(wait=wait)
    return lock
