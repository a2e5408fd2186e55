"""Timeouts typed by the kind of operation waited on.

A profile sets them and the command line can override any of them; a wait names its
kind, never a bare number, so that a slow cluster is tuned in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from conformance.errors import UsageError


@dataclass(frozen=True)
class Timeouts:
    apply: float = 30.0  # an object is accepted and first observed
    ready: float = 300.0  # pods Running, a RayCluster ready, a node Ready
    scale: float = 300.0  # autoscaling up or down
    cleanup: float = 180.0  # deletion of children, TTL-driven cleanup
    upgrade: float = 900.0  # a RayService or operator upgrade completes
    # The hard cap on one check, setup and teardown included (pytest-timeout): a hang anywhere,
    # even outside a wait, ends as an `error` with diagnostics instead of stopping the run.
    check: float = 3600.0

    def with_overrides(self, overrides: dict[str, float]) -> Timeouts:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise UsageError(
                f"unknown timeout kind {', '.join(sorted(unknown))}",
                f"use one of: {', '.join(sorted(known))}",
            )
        for kind, seconds in overrides.items():
            if seconds <= 0:
                raise UsageError(f"timeout {kind}={seconds} is not positive", "give a number of seconds > 0")
        return replace(self, **overrides)

    @staticmethod
    def parse_override(text: str) -> tuple[str, float]:
        """`ready=600` -> ("ready", 600.0)."""
        kind, sep, value = text.partition("=")
        try:
            if not sep:
                raise ValueError(text)
            return kind.strip(), float(value)
        except ValueError as exc:
            raise UsageError(f"bad timeout override {text!r}", "write KIND=SECONDS, e.g. ready=600") from exc
