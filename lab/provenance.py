"""The commit a lab measurement ran at: one reading for every script that saves a measurement."""

from __future__ import annotations

import subprocess
from pathlib import Path

UNCOMMITTED = " (uncommitted changes)"


def git(*args: str) -> str:
    """``git ARGS`` in this checkout, its output stripped; "" outside a git checkout or without git."""
    try:
        run = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=Path(__file__).parent)
    except OSError:
        return ""
    return run.stdout.strip()


def commit(full: bool = False) -> str:
    """HEAD's hash (short unless ``full``), marked when tracked files differ from it (the run
    measured code no commit holds); "unknown" outside a git checkout."""
    head = git("rev-parse", "HEAD") if full else git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    return head + (UNCOMMITTED if git("status", "--porcelain", "--untracked-files=no") else "")
