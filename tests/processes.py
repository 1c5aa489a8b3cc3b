"""Helpers for tests of programs under test that must not outlive the checker."""

from __future__ import annotations

import os
import time


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
