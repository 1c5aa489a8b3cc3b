"""Helpers for tests of programs under test that must not outlive the checker, and a stand-in for
the llama.cpp peer child that crashes (:data:`SEGV_AT_FIRST_RUN`)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def group_gone(pgid: int, within: float = 5.0) -> bool:
    """True once no process of the group is left (reaped children may take a moment)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def process_gone(pid: int, within: float = 5.0) -> bool:
    """True once process ``pid`` has exited (a zombie waiting for its reaper counts as exited)."""
    deadline = time.monotonic() + within
    while True:
        if not _running(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _running(pid: int) -> bool:
    if Path("/proc/self/stat").exists():  # Linux: a zombie's state is Z
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        return text[text.rindex(")") + 2] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def sigint_default() -> None:
    """A ``preexec_fn`` for a program a test will send SIGINT: SIGINT back to its default action.

    A test run started as a background job of a non-interactive shell (``nohup make test &``)
    inherits SIGINT ignored, and so does every program it starts; a program started with SIGINT
    ignored rightly keeps ignoring it (Python then raises no KeyboardInterrupt), so a SIGINT the
    test sends would do nothing. A terminal's Ctrl-C reaches a program whose SIGINT is default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A stand-in llama.cpp peer child (verispec/bench): answers "open" like the real child, then faults
# on the first "run" (after a last word on stderr).
SEGV_AT_FIRST_RUN = """
import json, os, signal, sys
for line in sys.stdin:
    op = json.loads(line)["op"]
    if op == "open":
        info = {"available": True, "version": "stand-in", "system_info": "AMX_INT8 = 1", "threads": 1,
                "num_pred_tokens": 4, "n_ctx": 64}
        sys.stdout.write(json.dumps({"ok": True, "result": info}) + "\\n"); sys.stdout.flush()
    else:
        sys.stderr.write("ggml_backend_amx: prompt eval\\n"); sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
"""
