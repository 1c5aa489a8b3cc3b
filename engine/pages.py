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

import functools
import mmap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: neighbours may be in use
    end = (start + view.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= first:
        return False
    mapping.madvise(mmap.MADV_DONTNEED, first, end - first)
    return True


def drop_mapping(view: npt.NDArray[np.uint8]) -> bool:
    """Release every resident page of the read-only file mapping under ``view`` (the whole file,
    not only the view's range): after a load, the pages left are the partial pages at tensor
    boundaries that :func:`drop_pages` keeps for their neighbours, and the metadata the config and
    the tokenizer read, none needed again (a later read, such as an embedding row, faults its page
    back in from the file). False where ``view`` is not a file mapping (anonymous memory would lose
    its bytes) or madvise is missing."""
    mapping = _mapping(view)
    if mapping is None or not hasattr(mapping, "madvise") or len(mapping) == 0:
        return False
    mapping.madvise(mmap.MADV_DONTNEED)  # the whole mapping
    return True


# NumPy asks for 2 MiB pages on every allocation of 4 MiB or more (``madvise(MADV_HUGEPAGE)``)
SMALL_PAGES_FROM_BYTES = 4 << 20


def zeros_on_small_pages(shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """Zeros whose memory is taken 4 KiB at a time, where written: a KV cache's preallocation.

    ``np.zeros`` of 4 MiB or more is advised onto 2 MiB pages by NumPy, so the first write into
    any 2 MiB range makes all of it resident (the kernel zeroes a whole huge page, and where free
    huge pages are short it compacts memory first: milliseconds a fault). A cache laid out
    ``[L, n_kv, S, d]`` and preallocated for thousands of slots is written a few slots into every
    (layer, head) block: on huge pages nearly the whole preallocation becomes resident for a short
    request. Here the memory is an anonymous private mapping advised ``MADV_NOHUGEPAGE``: a page
    is resident once written, and a read of an unwritten page maps the kernel's zero page.
    Smaller arrays, or where the advice does not exist, are plain ``np.zeros``."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if nbytes < SMALL_PAGES_FROM_BYTES or advice is None:
        return np.zeros(shape, dtype=dt)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        memory.madvise(advice)
    except OSError:  # a kernel without transparent huge pages: its pages are small already
        pass
    return np.frombuffer(memory, dtype=dt).reshape(shape)


@functools.cache
def libc() -> Any:
    """The C library the interpreter already runs on (``ctypes.CDLL(None)``, errno kept), or None
    where it cannot be had. Looked up once a process, without ``ctypes.util.find_library``, which
    runs ``ldconfig -p`` in a child process."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


@functools.cache
def libc_madvise() -> Any:
    """libc's ``madvise`` through ctypes, or None where it cannot be had. engine/huge_pages.py
    collapses through it too."""
    import ctypes

    fn = getattr(libc(), "madvise", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _prefixes(folders: str | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(folder.rstrip("/") + "/" for folder in ((folders,) if isinstance(folders, str) else folders))


def _is_header(line: str) -> bool:
    """A mapping's header line (range perms offset dev inode path), not a ``Key: value`` line."""
    head = line.split(maxsplit=1)
    return bool(head) and not head[0].endswith(":")


def _blocks_naming(prefixes: tuple[str, ...], smaps: str) -> list[str]:
    """The blocks of ``smaps`` (a header line and its key lines) whose header line holds one of
    ``prefixes`` somewhere, each once, in file order. A process holds thousands of mappings (every
    library, every onnxruntime arena, more in a long test run) and a folder's are a few: the text
    is searched for the prefixes, and only the lines of those blocks are read one by one."""
    starts: set[int] = set()
    for prefix in prefixes:
        at = smaps.find(prefix)
        while at >= 0:
            line_start = smaps.rfind("\n", 0, at) + 1
            line_end = smaps.find("\n", at)
            line_end = len(smaps) if line_end < 0 else line_end
            if _is_header(smaps[line_start:line_end]):
                starts.add(line_start)
            at = smaps.find(prefix, line_end)
    blocks: list[str] = []
    for start in sorted(starts):
        end = smaps.find("\n", start)
        while end >= 0:  # the block runs up to the next header line
            next_end = smaps.find("\n", end + 1)
            if _is_header(smaps[end + 1 : len(smaps) if next_end < 0 else next_end]):
                break
            end = next_end
        blocks.append(smaps[start : len(smaps) if end < 0 else end])
    return blocks


def clean_mappings(folders: str | tuple[str, ...], smaps: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the mappings in ``smaps`` (the text of /proc/self/smaps) of files under
    one of ``folders`` with no anonymous page (no page the process wrote: a write to a private file
    mapping copies the page into anonymous memory), so every resident page is the file's own.
    (``Private_Dirty`` would not tell: a page of a file just written is dirty in the page cache.)
    Only the blocks whose header line holds a folder are parsed (:func:`_blocks_naming`): a block's
    header alone decides whether it is a candidate, so the result is what parsing every line gives."""
    prefix = _prefixes(folders)
    found: list[tuple[int, int]] = []
    for block in _blocks_naming(prefix, smaps):
        lines = block.splitlines()
        head = lines[0].split(maxsplit=5)
        path = head[5] if len(head) > 5 else ""
        if not path.startswith(prefix):
            continue
        low, _, high = head[0].partition("-")
        written = 0
        for line in lines[1:]:
            key = line.split(maxsplit=2)
            if key and key[0] == "Anonymous:":
                written += int(key[1])
        if written == 0:
            found.append((int(low, 16), int(high, 16)))
    return found


# Folders whose drop waits for one pass over /proc/self/smaps (per thread: see batched_drops).
_waiting = threading.local()
# Folders one pass drops: reading smaps walks every mapping of the process (a model load makes
# hundreds of graphs, each reading it again was most of an int8 load's time), while each folder
# waiting keeps its few scale pages resident a little longer (a load's peak grows by at most this
# many graphs' scales: tens of KiB each).
BATCH_FOLDERS = 16


@contextmanager
def batched_drops() -> Iterator[None]:
    """Within: :func:`drop_folder_pages` queues its folder, and every :data:`BATCH_FOLDERS` folders
    (and at the end) one pass over /proc/self/smaps drops the queued folders' pages together. The
    same pages are advised as one call per folder would advise (a mapping outlives its folder: a
    deleted file's mapping keeps its path), with one read of smaps instead of one per folder."""
    outer = getattr(_waiting, "folders", None)
    if outer is not None:  # nested: the outer block drops them
        yield
        return
    _waiting.folders = []
    try:
        yield
    finally:
        folders, _waiting.folders = _waiting.folders, None
        drop_folders(tuple(folders))


def drop_folder_pages(folder: str) -> int:
    """Release the resident pages of this process's mappings of files under ``folder``; returns
    the bytes advised (0 where /proc or madvise is missing; 0 inside :func:`batched_drops`, which
    drops them with its next pass).

    The case: onnxruntime maps an external-data file (engine.matmul.OrtGraph) and, on x86,
    keeps ``MatMulNBits``' scales and zero points referenced after packing them into its own
    buffer (it never reads them again: measured, RSS stays down through decoding, the same bits).
    Their pages stay resident, 4-5 bytes a block. Only mappings with no page the process wrote are advised:
    ``MADV_DONTNEED`` on a clean file page drops it, and a later read faults in the same bytes from
    the file (which lives while mapped), so nothing but the resident size changes."""
    waiting: list[str] | None = getattr(_waiting, "folders", None)
    if waiting is None:
        return drop_folders((folder,))
    waiting.append(folder)
    if len(waiting) >= BATCH_FOLDERS:
        folders = tuple(waiting)
        waiting.clear()
        drop_folders(folders)
    return 0


def drop_folders(folders: tuple[str, ...]) -> int:
    """One pass over /proc/self/smaps: advise the clean mappings of files under ``folders``; returns
    the bytes advised."""
    if not folders:
        return 0
    try:  # the cheap list first (no page counts): most passes find no mapping under these folders
        with open("/proc/self/maps") as fh:
            maps: str | None = fh.read()
    except OSError:
        maps = None
    if maps is not None and not any(prefix in maps for prefix in _prefixes(folders)):
        return 0
    try:
        with open("/proc/self/smaps") as fh:
            smaps = fh.read()
    except OSError:
        return 0
    advise = libc_madvise()
    if advise is None:
        return 0
    advised = 0
    for low, high in clean_mappings(folders, smaps):
        if advise(low, high - low, mmap.MADV_DONTNEED) == 0:
            advised += high - low
    return advised
