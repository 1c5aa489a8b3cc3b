"""A worker process that ends when the process that started it dies.

A ``check-decoder --workers N`` worker (verispec/decoder/worker.py) is a program under test of its
checker (spec/decoder/depth/pool.py): the checker kills the worker's process group on every exit path it
runs (close, a failure, Ctrl-C, the CLI's SIGTERM handler, interpreter exit). A checker killed
outright runs none of them: SIGKILL, or SIGTERM to a Python program that calls
``verispec.check_decoder(..., workers=N)`` and installs no handler (SIGTERM's default action ends
it at once). The worker then ends by itself, through :func:`die_with_parent`:

- on Linux the kernel sends it SIGKILL the moment its parent is gone (``prctl(PR_SET_PDEATHSIG)``),
  also in the middle of a block, whatever the worker is doing. Linux's "parent" is the thread that
  started the worker: a decoder pool's thread, which lives as long as the pool;
- elsewhere a daemon thread sees its parent id change (the worker was re-parented) within
  :data:`PARENT_POLL` seconds;
- and a worker waiting for a request reads EOF on stdin (the checker's end of the pipe is closed)
  and exits, as every served program does (:func:`spec.external.serve`). That also covers a checker
  that died before the watch began (while the worker's interpreter started).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL = 0.2  # seconds between looks at the parent id where the kernel does not watch it
EXIT_ORPHANED = 1  # the status of a worker that ended because its checker died (nobody reads it)


def die_with_parent() -> None:
    """Arrange for this process to end when its parent does (see the module's text)."""
    parent = os.getppid()
    if not _kernel_kills_on_parent_death():
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="verispec-parent-watch").start()
    if os.getppid() != parent:  # it died while the watch was being set up
        os._exit(EXIT_ORPHANED)


def _kernel_kills_on_parent_death() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux; False where there is no such call."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(EXIT_ORPHANED)
