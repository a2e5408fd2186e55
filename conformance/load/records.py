"""One record per request, parsed from vegeta's JSON encoding, with the kind of each error.

A request failed when it got no HTTP answer (a connection or timeout error) or an answer
outside 2xx/3xx. Error kinds are snake_case so they can be keys in metrics and timelines:
`http_503`, `connection_refused`, `timeout`, ...
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

BEGIN_MARK = "---- records: vegeta json, gzip, base64 ----"
END_MARK = "---- end of records ----"
DETAIL_CHARS = 80

# Substrings of Go's network errors, most specific first.
_ERROR_KINDS = (
    ("connection refused", "connection_refused"),
    ("connection reset", "connection_reset"),
    ("broken pipe", "broken_pipe"),
    ("no such host", "dns"),
    ("Client.Timeout", "timeout"),
    ("deadline exceeded", "timeout"),
    ("i/o timeout", "timeout"),
    ("timeout", "timeout"),
    ("EOF", "eof"),
    ("no route to host", "no_route"),
)


@dataclass(frozen=True)
class Record:
    sent: float  # seconds since the epoch
    latency_s: float
    status: int  # 0: no HTTP answer
    error: str  # "" for success, else its kind
    backend: str = ""  # which cluster answered, when the app says
    version: str = ""  # what the app's config says it is (the Serve config's message)
    detail: str = ""  # for a failure: the start of the answer's body, or the client's error
    seq: int = -1  # the request's place in the generator's schedule

    @property
    def ok(self) -> bool:
        return not self.error


def error_kind(status: int, error: str) -> str:
    """ "" for a success, else the kind of failure."""
    if status and 200 <= status < 400:
        return ""
    if status:
        return f"http_{status}"
    for needle, kind in _ERROR_KINDS:
        if needle in error:
            return kind
    return "other" if error else "no_response"


def parse_timestamp(text: str) -> float:
    """RFC 3339 with up to nanoseconds (Go's encoding) to epoch seconds."""
    head, _, frac_zone = text.partition(".")
    if not frac_zone:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    digits = "".join(ch for ch in frac_zone if ch.isdigit())
    zone = frac_zone[len(digits) :]
    zone = "+00:00" if zone in ("Z", "") else zone
    whole = datetime.fromisoformat(head + zone).timestamp()
    return whole + float("0." + digits)


def from_vegeta(entry: dict) -> Record:
    status = int(entry.get("code") or 0)
    answer = _answer(entry.get("body") or "") if status else {}
    error = error_kind(status, entry.get("error") or "")
    return Record(
        sent=parse_timestamp(entry["timestamp"]),
        latency_s=int(entry.get("latency") or 0) / 1e9,
        status=status,
        error=error,
        backend=str(answer.get("cluster", "")),
        version=str(answer.get("version", "")),
        detail=_detail(entry) if error else "",
        seq=int(entry.get("seq", -1)),
    )


def _detail(entry: dict) -> str:
    """Who answered a failure says more than its code: the proxy's own page or the app's."""
    try:
        body = base64.b64decode(entry.get("body") or "").decode(errors="replace")
    except (binascii.Error, ValueError):
        body = ""
    return " ".join((body or entry.get("error") or "").split())[:DETAIL_CHARS]


def _answer(body_b64: str) -> dict:
    """The app's JSON answer, or {} when the body is something else (an error page)."""
    try:
        answer = json.loads(base64.b64decode(body_b64))
    except (binascii.Error, ValueError):
        return {}
    return answer if isinstance(answer, dict) else {}


def parse_lines(lines: Iterable[str]) -> list[Record]:
    return sorted((from_vegeta(json.loads(line)) for line in lines if line.strip()), key=lambda r: r.sent)


def extract_block(log: str) -> list[Record]:
    """The records the generator printed between its marks (gzip, base64), parsed.

    Raises ValueError when the block is missing or cut short, so a lost result is never read
    as "no requests failed"."""
    start = log.find(BEGIN_MARK)
    end = log.find(END_MARK, start + 1)
    if start < 0 or end < 0:
        raise ValueError("the load generator's output has no complete block of records")
    payload = "".join(log[start + len(BEGIN_MARK) : end].split())
    text = gzip.decompress(base64.b64decode(payload)).decode()
    return parse_lines(text.splitlines())
