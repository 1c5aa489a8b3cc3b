"""A progress line on stderr for long runs: shown on a terminal, silent in CI and in pipes.

Long statistical runs (minutes) print nothing between outcomes, so a user cannot tell a slow
verifier from a hung one or size ``--budget``. The line is rewritten in place (carriage return),
at most every ``interval`` seconds; it is off when stderr is not a terminal or when ``CI`` is set
(CI logs keep every carriage return as a line), so captured output never contains it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO


class ProgressLine:
    """``line(text)`` shows ``text`` in place; ``close()`` clears it."""

    def __init__(self, stream: TextIO, interval: float = 0.25) -> None:
        self.stream, self.interval = stream, interval
        self._last = 0.0
        self._width = 0

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        shown = text[:118]
        self.stream.write("\r" + shown.ljust(self._width))
        self.stream.flush()
        self._width = len(shown)

    def close(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


def wanted(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Whether progress belongs on ``stream``: a terminal, and not in CI."""
    env = os.environ if environ is None else environ
    return bool(stream.isatty()) and not env.get("CI")


def progress_line(stream: TextIO | None = None) -> ProgressLine | None:
    """A progress line on ``stream`` (default stderr), or None where it does not belong."""
    target = sys.stderr if stream is None else stream
    return ProgressLine(target) if wanted(target) else None


class PeriodicLines:
    """Whole progress lines for terminals and CI logs alike (never rewritten in place): a
    milestone (a design, a verdict) is passed on at once, a tick (a block judged) at most every
    ``every`` seconds since the last line (0: no ticks), so a long run shows it is alive at a
    rate a log can hold."""

    def __init__(self, sink: Callable[[str], None], every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.sink, self.every, self.clock = sink, every, clock
        self._last = clock()

    def __call__(self, line: str, milestone: bool = True) -> None:
        now = self.clock()
        if not milestone and (self.every <= 0 or now - self._last < self.every):
            return
        self._last = now
        self.sink(line)


def to_stderr(line: str) -> None:
    """One progress line on stderr, flushed (what a CI log shows as it comes)."""
    print(line, file=sys.stderr, flush=True)
