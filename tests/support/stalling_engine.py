"""An engine for containment tests of ``check-decoder --workers``: ``generate`` says it has begun
(a file named by its process id in ``$VERISPEC_TEST_BUSY_DIR``), then never answers."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

STALL = 600.0  # seconds: far past any test's wait; the process is killed long before


class StallingEngine:
    def generate(self, *args: Any, **kwargs: Any) -> Any:
        folder = os.environ.get("VERISPEC_TEST_BUSY_DIR")
        if folder:
            (Path(folder) / str(os.getpid())).write_text("decoding\n")
        time.sleep(STALL)
        raise AssertionError("a stalled engine is killed before it answers")

    generate_plain = generate


def engine(path: Path) -> StallingEngine:
    """The ``module:FACTORY`` factory: ``tests.support.stalling_engine:engine``."""
    return StallingEngine()
