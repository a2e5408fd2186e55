"""SIGTERM as an exception, so that cleanup blocks run as they do for Ctrl-C.

Raising from a signal handler can land in code that swallows exceptions (an at-fork
hook, a __del__): "Exception ignored in ...". The signal is therefore also remembered,
and long loops call `check()` at safe points to raise it again.
"""

from __future__ import annotations

import signal
from typing import NoReturn


class Interrupted(BaseException):
    """SIGTERM arrived; what the command created is being cleaned up."""


_received: str | None = None


def _on_signal(signum: int, _frame: object) -> NoReturn:
    global _received  # noqa: PLW0603 - one process-wide flag, set by the handler
    _received = signal.Signals(signum).name
    raise Interrupted(_received)


def install() -> None:
    signal.signal(signal.SIGTERM, _on_signal)


def check() -> None:
    """Raise Interrupted if a signal came in, even if its first raise was swallowed."""
    if _received is not None:
        raise Interrupted(_received)
