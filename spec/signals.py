"""Ctrl-C and SIGTERM in a checker with threads: waits that a signal always ends, and a section
that a signal cannot split.

CPython runs a Python signal handler (Ctrl-C's ``KeyboardInterrupt``, the CLI's SIGTERM handler)
only in the main thread, between bytecodes. A signal sent to the process goes to whichever of its
threads the kernel picks: the main thread as a rule, but another one when the main thread has it
blocked at that instant (glibc blocks every signal in a thread while it creates a thread) or when
a thread just started takes the pending signal first. The handler's C half then runs on that other
thread and only marks the signal; a main thread asleep in a lock wait (``queue.get``,
``Thread.join``, ``Future.result``) is not woken by it and runs the handler only when its wait
ends, which for the checker is the whole per-response ``--timeout``. So every wait of the checker's
main thread that can be long is made of slices of at most :data:`SIGNAL_POLL` seconds: between
slices the interpreter runs whatever handler is pending, so a signal ends the wait within a slice
whichever thread received it.

:func:`deferred` holds SIGINT and SIGTERM's Python handlers off for a short section (a program
under test between its fork and its registration for killing), then runs them: an interruption
there would leave a program running that nothing knows to kill.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TypeVar

T = TypeVar("T")

SIGNAL_POLL = 0.1  # seconds: the longest a signal waits for the main thread to act on it
DEFERRED = (signal.SIGINT, signal.SIGTERM)


def queue_get(lines: "queue.Queue[T]", timeout: float) -> T:
    """``lines.get(timeout=timeout)`` in slices: the next item, or queue.Empty after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise queue.Empty
        try:
            return lines.get(timeout=min(remaining, SIGNAL_POLL))
        except queue.Empty:
            continue


def join(thread: threading.Thread, timeout: float) -> None:
    """``thread.join(timeout)`` in slices (it returns after ``timeout`` s even if the thread runs on)."""
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        thread.join(min(remaining, SIGNAL_POLL))


def result(future: "concurrent.futures.Future[T]") -> T:
    """``future.result()`` (no time limit: the future's own work bounds it), waited for in slices."""
    while not concurrent.futures.wait([future], timeout=SIGNAL_POLL).done:
        pass
    return future.result()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run the block whole: a SIGINT or SIGTERM arriving inside it is acted on (its Python handler
    called, by the signal raised again) only after it. Off the main thread it does nothing, as no
    handler runs there. A signal whose handler is not a Python function (SIG_DFL, SIG_IGN) is left
    as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        arrived.append(signum)

    previous = {}
    for signum in DEFERRED:
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = handler
            signal.signal(signum, record)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for caught in dict.fromkeys(arrived):
            signal.raise_signal(caught)  # its handler runs now, in this thread
