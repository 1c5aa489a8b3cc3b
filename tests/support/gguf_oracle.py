"""gguf-py (the test oracle) opened once per file per test session.

``gguf.GGUFReader`` needs ~9 s to parse gemma3-270m's 262k-token vocabulary, most of it in
``np.memmap``'s bookkeeping on each of its ~10^6 small slices and in its per-element recursion
over the vocabulary arrays; :class:`PlainArrayReader` reads the same bytes through a plain ndarray
view and cuts each array in one pass (0.4 s), and every test that compares against gguf-py shares
one reader per path.
"""

from __future__ import annotations

import functools
import sys
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

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
        """gguf-py's parts of one field. A non-empty array of strings or of scalars in the host's
        byte order is cut in one pass into the very views gguf-py's per-element recursion makes
        (a 1-element array per scalar; a uint64 length and a uint8 run per string), with the same
        data indices and types; anything else is gguf-py's own code."""
        value_type = gguf.GGUFValueType
        if value_type(raw_type) != value_type.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        count, itype = int(alen[0]), value_type(raw_itype[0])
        offs = orig_offs + 12
        parts: list[Any] = [raw_itype, alen]
        if count == 0:
            return super()._get_field_parts(orig_offs, raw_type)
        if itype == value_type.STRING:
            data, raw = self.data, memoryview(self.data)
            indices = []
            for _ in range(count):
                length = int.from_bytes(raw[offs : offs + 8], sys.byteorder)
                parts += (data[offs : offs + 8].view(np.uint64), data[offs + 8 : offs + 8 + length])
                indices.append(len(parts) - 1)
                offs += 8 + length
            return offs - orig_offs, parts, indices, [value_type.ARRAY, itype]
        nptype = self.gguf_scalar_to_np.get(itype)
        if nptype is None:  # arrays of arrays: gguf-py's recursion
            return super()._get_field_parts(orig_offs, raw_type)
        values = self._get(offs, nptype, count)
        parts += list(values.reshape(count, 1))
        return 12 + int(values.nbytes), parts, list(range(2, 2 + count)), [value_type.ARRAY, itype]


@functools.lru_cache(maxsize=4)
def reader(path: Path) -> gguf.GGUFReader:
    """The (cached) gguf-py reader of ``path``."""
    return PlainArrayReader(path)
