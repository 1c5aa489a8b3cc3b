"""Put a load's weights on 2 MiB pages: the same bytes, fewer TLB misses a decode step.

A decode step streams every weight once, a few hundred MiB through 4 KiB pages: a TLB miss every
4 KiB, and the hardware prefetchers stop at every page boundary. On the usual kernel setting
(``/sys/kernel/mm/transparent_hugepage/enabled`` = ``madvise``) anonymous memory gets 2 MiB
pages only where it is advised, and onnxruntime's and NumPy's allocations never are.

After a load, :func:`collapse_new_memory` asks the kernel to copy each 2 MiB-aligned range of the
anonymous memory that the load created into one 2 MiB page at once (``madvise(MADV_COLLAPSE)``,
Linux >= 6.1; it does not depend on the sysfs setting short of ``never``). Only ranges whose
512 small pages are all the process's own written pages are asked (/proc/self/pagemap: present
and mapped once; a page never written, or read before it was written and so mapped to the
kernel's shared zero page, would become real memory in a huge page), so the resident size does
not grow; memory that existed before the load (the host program's own) is never touched, nor are
file mappings. What a range holds is unchanged, bit for bit: the kernel copies the pages.

A load from a file under :data:`MIN_FILE_BYTES` is not collapsed (:func:`worth_collapsing`): its
weights cannot be enough for TLB misses to matter, and the two walks of the host's memory that a
collapse needs cost more than such a load in a large host.

How much a step gains: ``python -m lab.huge_pages_ab MODEL`` (fresh processes taking turns),
saved runs on docs/results/engine-studies.md. ``VERISPEC_HUGE_PAGES=0`` turns it off. Where the call cannot be had
(not Linux, an older kernel, THP ``never``, no /proc) nothing happens and the load is as before.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

import numpy as np

from verispec.engine.matmul import env_switch
from verispec.engine.pages import libc_madvise

ENV = "VERISPEC_HUGE_PAGES"
BY_DEFAULT = True
HUGE_PAGE = 2 << 20  # bytes: the x86-64 and arm64 (4 KiB base pages) PMD size
MADV_COLLAPSE = 25  # linux/mman.h (Linux >= 6.1)
MAPS = "/proc/self/maps"
PAGEMAP = "/proc/self/pagemap"
MAX_SPAN = 16 << 30  # bytes: larger anonymous mappings are reservations, not a load's weights
READ_BLOCK = 64 << 20  # bytes of address space a pagemap read covers (128 KiB of entries)
# A GGUF file under this size is loaded on small pages: its weights are a few MiB at most (float32
# from the densest type, IQ1_S's 1.5625 bits a weight: 20.5 times the file, 5 MiB), so a decode step
# takes at most ~1,300 TLB misses on them (tens of microseconds, under the step's own per-call
# overhead), and at most two 2 MiB ranges could be collapsed. The collapse's price does not shrink
# with the load: :func:`snapshot` and :func:`collapse_new_memory` each walk the whole host's
# /proc/self/maps and pagemap. In a process holding the real models (1.6 GiB resident, 1,400
# mappings; the 2-core EPYC) the two walks took ~10 ms of CPU a load of a 100 KB model, while all the
# rest of a fuzz case on it (parse, tokenizer, both engines' load and forward) took ~3.5 ms.
MIN_FILE_BYTES = 256 << 10


class Span(NamedTuple):
    """A mapping's address range ``[start, end)``."""

    start: int
    end: int


def enabled() -> bool:
    """``VERISPEC_HUGE_PAGES`` (1 / 0), else :data:`BY_DEFAULT`; ModelError for another value."""
    return env_switch(ENV, BY_DEFAULT)


def worth_collapsing(file_bytes: int | None) -> bool:
    """Whether a load from a file of ``file_bytes`` (None: not known) is to be collapsed: when
    :func:`enabled` and the file is at least :data:`MIN_FILE_BYTES` (or of unknown size). The switch
    is read either way, so a wrong ``VERISPEC_HUGE_PAGES`` is refused by every load."""
    return enabled() and (file_bytes is None or file_bytes >= MIN_FILE_BYTES)


def anonymous_spans(maps: str | None = None) -> list[Span]:
    """The private writable anonymous mappings of this process (``maps``: the text of
    /proc/self/maps; read here when None, [] where it cannot be read). The heap counts as one; the
    stack, file mappings and the kernel's special mappings do not."""
    if maps is None:
        try:
            with open(MAPS, encoding="ascii") as file:
                maps = file.read()
        except OSError:
            return []
    spans: list[Span] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or fields[1] != "rw-p":
            continue
        name = fields[5].strip() if len(fields) == 6 else ""
        if name not in ("", "[heap]"):
            continue
        first, _, last = fields[0].partition("-")
        spans.append(Span(int(first, 16), int(last, 16)))
    return spans


def written_ranges(pagemap: int, spans: Sequence[Span]) -> set[int]:
    """The starts of the 2 MiB-aligned ranges of ``spans`` whose pages are all present and mapped
    by this process alone (/proc/self/pagemap, open as ``pagemap``: bit 63 present, bit 56
    exclusively mapped): memory written, a page at a time. The kernel's shared zero page, which an
    anonymous page read before it is written maps, is present but not exclusive; a page never
    touched is not present. A mapping larger than :data:`MAX_SPAN` (an address-space reservation)
    is not read."""
    own = np.uint64((1 << 63) | (1 << 56))
    per_range = HUGE_PAGE // mmap.PAGESIZE
    starts: set[int] = set()
    for span in spans:
        first = -(-span.start // HUGE_PAGE) * HUGE_PAGE
        last = span.end // HUGE_PAGE * HUGE_PAGE
        if last - first > MAX_SPAN:
            continue
        for block in range(first, last, READ_BLOCK):
            end = min(block + READ_BLOCK, last)
            count = (end - block) // mmap.PAGESIZE
            try:
                raw = os.pread(pagemap, 8 * count, 8 * (block // mmap.PAGESIZE))
            except OSError:
                continue
            if len(raw) != 8 * count:
                continue
            entries = np.frombuffer(raw, dtype=np.uint64).reshape(-1, per_range)
            full = np.all(entries & own == own, axis=1)
            starts.update(block + HUGE_PAGE * int(i) for i in np.flatnonzero(full))
    return starts


def snapshot() -> frozenset[int]:
    """The 2 MiB ranges of this process's anonymous memory that are written now (taken before a
    load: the host's own memory, never collapsed); empty where /proc cannot be read or
    :func:`enabled` is off."""
    return frozenset(_written_now()) if enabled() else frozenset()


def collapse_new_memory(before: AbstractSet[int]) -> int:
    """Collapse into 2 MiB pages every 2 MiB-aligned range of the anonymous memory that is written
    now and was not in ``before`` (:func:`snapshot` taken before the load). Returns the bytes now
    on 2 MiB pages (0 where the kernel cannot, or :func:`enabled` is off)."""
    madvise = libc_madvise() if sys.platform.startswith("linux") else None
    if madvise is None or not enabled():
        return 0
    collapsed = 0
    for start in sorted(_written_now() - before):
        if madvise(start, HUGE_PAGE, MADV_COLLAPSE) == 0:
            collapsed += HUGE_PAGE
        elif ctypes.get_errno() == errno.EINVAL:  # no MADV_COLLAPSE in this kernel, or THP never
            break
    return collapsed


def _written_now() -> set[int]:
    """:func:`written_ranges` of this process's anonymous mappings now; empty where /proc cannot be read."""
    try:
        pagemap = os.open(PAGEMAP, os.O_RDONLY)
    except OSError:
        return set()
    try:
        return written_ranges(pagemap, anonymous_spans())
    finally:
        os.close(pagemap)
