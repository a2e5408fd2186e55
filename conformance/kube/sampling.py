"""What makes a background sampler's history evidence: its reads were made, at its cadence.

The samplers (kube/scaling.py ScaleWatcher, kube/rayservice.py Sampler) read the API in a thread
while a check drives KubeRay. A check that judges their history ("never above maxReplicas",
"traffic never moved back") must first know the history was taken: a read that failed, or a
hole longer than the cadence allows, is something the history cannot vouch for, so the check
fails with it rather than passing on what it did not see. A sampler that crashed on anything
but the API is a harness bug: HarnessError.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from conformance.errors import HarnessError

# What a read of the API may raise: the sample is lost, noted, and the sampler goes on.
LOST_SAMPLE = (ApiException, HTTPError, OSError)


def own_client(api: client.ApiClient) -> client.ApiClient:
    """A client of the sampler's own on the same configuration. kubernetes.stream (every exec)
    swaps the `request` of the ApiClient it runs on for a websocket one while it runs, so a
    sampler sharing the check's client would send its reads as websocket handshakes meanwhile."""
    return client.ApiClient(api.configuration)


def history_problems(
    what: str, errors: Sequence[str], reads: Sequence[float], end: float, max_gap_s: float, start: float
) -> list[str]:
    """Why `reads` (times of successful reads, on the same clock as `start` and `end`) are not
    a full history: failed reads, fewer than two reads, or a gap over `max_gap_s`."""
    found = []
    if errors:
        found.append(f"{len(errors)} reads of {what} failed: {'; '.join(dict.fromkeys(errors))[:400]}")
    if len(reads) < 2:
        return [*found, f"only {len(reads)} reads of {what} were made"]
    gap = max(b - a for a, b in pairwise([start, *reads, end]))
    if gap > max_gap_s:
        found.append(f"reads of {what} came up to {gap:.1f}s apart (at most {max_gap_s:.1f}s allowed)")
    return found


def assert_complete(what: str, problems: Sequence[str]) -> None:
    assert not problems, f"the sampled history of {what} is incomplete: {'; '.join(problems)}"


def crashed(what: str, exc: BaseException) -> HarnessError:
    return HarnessError(
        f"the sampler of {what} crashed: {type(exc).__name__}: {exc}",
        "a bug in the harness's samplers (conformance/kube); report it with the run's log",
    )
