"""gguf-py (the test oracle) opened once per file per test session.

``gguf.GGUFReader`` needs ~13 s to parse gemma3-270m's 262k-token vocabulary, so every test that
compares against it shares one reader per path.
"""

from __future__ import annotations

import functools
from pathlib import Path

import gguf


@functools.lru_cache(maxsize=4)
def reader(path: Path) -> gguf.GGUFReader:
    """The (cached) gguf-py reader of ``path``."""
    return gguf.GGUFReader(path)
