"""The commit a lab measurement ran at: one reading for every script that saves a measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

UNCOMMITTED = " (uncommitted changes)"


def git(*args: str) -> str:
    """``git ARGS`` in this checkout, its output stripped; "" outside a git checkout or without git."""
    try:
        run = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=Path(__file__).parent)
    except OSError:
        return ""
    return run.stdout.strip()


def commit(full: bool = False) -> str:
    """HEAD's hash (short unless ``full``), marked when tracked files other than the saved
    measurements differ from it (the run measured code no commit holds; a measurement saved by an
    earlier run of the same session is data, not code); "unknown" outside a git checkout."""
    head = git("rev-parse", "HEAD") if full else git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)lab/measurements")
    return head + (UNCOMMITTED if changed else "")


def record(module: str, load_start: float) -> dict[str, Any]:
    """A measurement's provenance: date, the command as run (``python -m MODULE`` and this
    process's arguments), the commit, the machine (the bench's record) and the load average at the
    start and now."""
    from verispec.bench.machine import machine_info

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": " ".join(["python -m " + module, *sys.argv[1:]]),
        "commit": commit(),
        "machine": machine_info().as_json(),
        "load_average": [load_start, os.getloadavg()[0]],
    }


def print_and_save(results: dict[str, Any], path: str | None) -> None:
    """Print ``results`` as JSON, and write it to ``path`` when given."""
    text = json.dumps(results, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
