"""gguf-py (the test oracle) opened once per file per test session.

``gguf.GGUFReader`` needs ~9 s to parse gemma3-270m's 262k-token vocabulary, most of it in
``np.memmap``'s bookkeeping on each of its ~10^6 small slices; :class:`PlainArrayReader` reads the
same bytes through a plain ndarray view (~4 s), and every test that compares against gguf-py
shares one reader per path.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import gguf
import numpy as np


class PlainArrayReader(gguf.GGUFReader):
    """``gguf.GGUFReader`` whose ``data`` is a plain ndarray view of its memory map.

    The same bytes, so the same fields and tensors (tests/test_gguf_oracle.py checks them equal);
    only the per-slice cost of the ``np.memmap`` subclass is gone. The view keeps the map alive.
    """

    @property
    def data(self) -> Any:
        return self._plain

    @data.setter
    def data(self, value: Any) -> None:
        self._plain = np.asarray(value).view(np.ndarray)


@functools.lru_cache(maxsize=4)
def reader(path: Path) -> gguf.GGUFReader:
    """The (cached) gguf-py reader of ``path``."""
    return PlainArrayReader(path)
