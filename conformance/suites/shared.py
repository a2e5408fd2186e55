"""An object several checks of a module look at, made once, by the first check that needs it.

Made inside a check's call rather than in a fixture's setup: when KubeRay fails to make it (a
`behaviour` wait runs out), that is the check's `failed`, with the evidence, instead of a setup
`error`; every later check that needs it fails with the same cause. A harness error while making
it stays an error, for the later checks too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Shared(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: list[T] = []
        self._failure: BaseException | None = None

    def get(self) -> T:
        if isinstance(self._failure, AssertionError):
            raise AssertionError(f"(as an earlier check found) {self._failure}")
        if self._failure is not None:
            raise RuntimeError(f"(as an earlier check found) {self._failure}")
        if not self._made:
            try:
                self._made.append(self._make())
            except Exception as exc:
                self._failure = exc
                raise
        return self._made[0]
