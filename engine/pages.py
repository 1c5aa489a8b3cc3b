"""Hand a mapped GGUF file's pages back after their bytes were repacked (peak RSS of a load).

A load reads every weight once from the file mapping (:meth:`reference.gguf.GGUFFile.raw`); each
page read stays resident in the process (it counts in RSS and in its peak) although the kernel
now holds its own packed copy. :func:`drop_pages` tells the kernel the range is not needed
(``madvise(MADV_DONTNEED)``): a later read faults the page back in from the file, so nothing
changes but the resident size.

Only a read-only FILE mapping is touched (found by walking the view's ``base`` chain to an
``mmap.mmap``): on anonymous memory (a GGUF parsed from bytes) ``MADV_DONTNEED`` would zero
the data, so such views are left alone.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import numpy.typing as npt


def _mapping(view: npt.NDArray[Any]) -> mmap.mmap | None:
    """The ``mmap.mmap`` under ``view``, or None when it is not a memory-mapped file."""
    base: object = view
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return None


def drop_pages(view: npt.NDArray[np.uint8]) -> bool:
    """Release the resident pages wholly inside ``view``'s byte range (a file mapping only).

    Returns whether anything was advised (False: not a file mapping, no whole page, or no madvise)."""
    mapping = _mapping(view)
    if mapping is None or not hasattr(mapping, "madvise") or view.nbytes == 0:
        return False
    start = view.ctypes.data - np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE   # whole pages only: neighbours may be in use
    end = (start + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= first:
        return False
    mapping.madvise(mmap.MADV_DONTNEED, first, end - first)
    return True
