"""One progress line for long waits: what we wait for and for how long.

On a terminal the line is rewritten in place; in CI logs (no TTY) a line is printed
when the wait starts, every `interval` seconds while it lasts, and when it ends, so a
log shows progress without flooding.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from conformance import interrupts

# Where progress lines go instead of the stream, when something (the pytest plugin, whose
# capture would otherwise swallow them) takes them over. Receives whole lines.
_line_writer: Callable[[str], None] | None = None


def route_lines_to(writer: Callable[[str], None] | None) -> None:
    global _line_writer  # noqa: PLW0603 - one process-wide sink, set by the plugin
    _line_writer = writer


class Progress:
    def __init__(self, what: str, stream: TextIO | None = None, interval: float = 30.0) -> None:
        self.what = what
        self.detail = ""
        self.stream = stream or sys.stderr
        self.interval = interval
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._tty = self.stream.isatty() and _line_writer is None
        self._thread = threading.Thread(target=self._tick, daemon=True)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, detail: str) -> None:
        self.detail = detail

    def _line(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"… {self.what}{detail} [{self.elapsed:.0f}s]"

    def _tick(self) -> None:
        period = 1.0 if self._tty else self.interval
        while not self._stop.wait(period):
            self._emit(self._line())

    def _emit(self, line: str) -> None:
        if _line_writer is not None:
            _line_writer(line)
            return
        if self._tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def start(self) -> Progress:
        if not self._tty:
            self._emit(f"… {self.what}")
        interrupts.start_thread(self._thread)
        return self

    def finish(self, outcome: str = "done") -> None:
        self._stop.set()
        interrupts.join_thread(self._thread)
        end = f"{'✓' if outcome == 'done' else '✗'} {self.what}: {outcome} in {self.elapsed:.1f}s"
        if _line_writer is not None:
            _line_writer(end)
            return
        if self._tty:
            self.stream.write("\r\033[K")
        self.stream.write(end + "\n")
        self.stream.flush()


@contextmanager
def progress(what: str, stream: TextIO | None = None, interval: float = 30.0) -> Iterator[Progress]:
    line = Progress(what, stream, interval).start()
    try:
        yield line
    except BaseException as exc:
        line.finish(f"failed ({type(exc).__name__})")
        raise
    line.finish()
