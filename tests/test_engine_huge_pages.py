"""A load's memory on 2 MiB pages (engine/huge_pages.py): only the memory the load created, only
ranges wholly resident, the same bytes after, nothing where the kernel cannot; the switch; a loaded
model that computes the same logits with and without."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from verispec.engine import huge_pages
from verispec.engine.huge_pages import HUGE_PAGE, Span, anonymous_spans, collapse_new_memory, snapshot, written_ranges
from verispec.engine.model import FastModel
from verispec.reference.errors import ModelError

MAPS = """\
55d4a0000000-55d4a0200000 r--p 00000000 08:01 123 /usr/bin/python3.11
55d4a2000000-55d4a2a00000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000800000 rw-p 00000000 00:00 0
7f0000800000-7f0000900000 rw-p 00001000 08:01 456 /usr/lib/libc.so.6
7f0000a00000-7f0000b00000 r--p 00000000 00:00 0
7ffd00000000-7ffd00100000 rw-p 00000000 00:00 0 [stack]
"""


def test_the_anonymous_writable_mappings_are_the_heap_and_the_nameless() -> None:
    assert anonymous_spans(MAPS) == [Span(0x55D4A2000000, 0x55D4A2A00000), Span(0x7F0000000000, 0x7F0000800000)]


def test_written_ranges_are_whole_2mib_ranges_of_pages_written() -> None:
    """Of a fresh 8 MiB mapping whose every other page is written: no range; whole written: its
    aligned ranges, and none of a mapping read before it was written (the shared zero page)."""
    dense, dense_address, _ = _mapping(1.0, seed=5)
    sparse, sparse_address, _ = _mapping(0.5, seed=6)
    zeros = mmap.mmap(-1, 4 * HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    assert not np.frombuffer(zeros, dtype=np.uint8).any()  # read, never written
    zeros_address = ctypes.addressof(ctypes.c_char.from_buffer(zeros))
    pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        spans = [Span(a, a + 4 * HUGE_PAGE) for a in (dense_address, sparse_address, zeros_address)]
        got = written_ranges(pagemap, spans)
    finally:
        os.close(pagemap)
        dense.close()
        sparse.close()
        zeros.close()
    aligned = -(-dense_address // HUGE_PAGE) * HUGE_PAGE
    assert got == set(range(aligned, dense_address + 4 * HUGE_PAGE - HUGE_PAGE + 1, HUGE_PAGE))


def spy_on_collapse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record, in order, each ``snapshot`` and ``collapse_new_memory`` call a load makes (both still run)."""
    calls: list[str] = []
    real_snapshot, real_collapse = huge_pages.snapshot, huge_pages.collapse_new_memory

    def spied_snapshot() -> frozenset[int]:
        calls.append("snapshot")
        return real_snapshot()

    def spied_collapse(before: Any) -> int:
        calls.append("collapse")
        return real_collapse(before)

    monkeypatch.setattr(huge_pages, "snapshot", spied_snapshot)
    monkeypatch.setattr(huge_pages, "collapse_new_memory", spied_collapse)
    return calls


def _supported() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as file:
            setting = file.read()
    except OSError:
        return False
    release = tuple(int(part) for part in os.uname().release.split(".")[:2] if part.isdigit())
    return "[never]" not in setting and release >= (6, 1)


def _huge_kib(address: int) -> int:
    """AnonHugePages (KiB) of the mapping holding ``address``."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as file:
        for line in file:
            head = line.split(maxsplit=1)[0]
            if not head.endswith(":"):
                start, _, end = head.partition("-")
                inside = int(start, 16) <= address < int(end, 16)
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def _mapping(pages_touched: float, seed: int) -> tuple[mmap.mmap, int, np.ndarray[Any, Any]]:
    """A fresh anonymous 8 MiB mapping between two inaccessible guard pages (its own mapping in
    /proc/self/smaps: an anonymous neighbour would merge with it), random bytes in every page
    (``pages_touched`` 1.0) or every other page (0.5) -> (the whole mapping, the 8 MiB's address,
    what they hold)."""
    size = 4 * HUGE_PAGE
    region = mmap.mmap(-1, size + 2 * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for guard in (base, base + mmap.PAGESIZE + size):
        assert libc.mprotect(guard, mmap.PAGESIZE, 0) == 0  # PROT_NONE
    view = np.frombuffer(region, dtype=np.uint8)[mmap.PAGESIZE : mmap.PAGESIZE + size]
    rng = np.random.default_rng(seed)
    pages = size // mmap.PAGESIZE
    for page in range(0, pages, 1 if pages_touched == 1.0 else 2):
        view[page * mmap.PAGESIZE : (page + 1) * mmap.PAGESIZE] = rng.integers(0, 256, mmap.PAGESIZE, dtype=np.uint8)
    return region, base + mmap.PAGESIZE, view.copy()


def _held(region: mmap.mmap) -> np.ndarray[Any, Any]:
    return np.frombuffer(region, dtype=np.uint8)[mmap.PAGESIZE : mmap.PAGESIZE + 4 * HUGE_PAGE]


def test_new_resident_memory_is_collapsed_and_keeps_its_bytes() -> None:
    if not _supported():
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux >= 6.1, THP not never)")
    before = snapshot()
    region, address, held = _mapping(1.0, seed=1)
    try:
        collapsed = collapse_new_memory(before)
        assert collapsed >= 3 * HUGE_PAGE  # the mapping's aligned ranges (3 or 4 of them)
        assert _huge_kib(address) >= 3 * HUGE_PAGE // 1024
        assert np.array_equal(_held(region), held)
    finally:
        region.close()


def test_partly_resident_and_older_memory_is_left_alone() -> None:
    if not _supported():
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux >= 6.1, THP not never)")
    older, older_address, older_held = _mapping(1.0, seed=2)
    before = snapshot()
    sparse, sparse_address, sparse_held = _mapping(0.5, seed=3)  # every other page never written
    try:
        collapse_new_memory(before)
        assert _huge_kib(older_address) == 0  # the host's memory from before the load
        assert _huge_kib(sparse_address) == 0  # a huge page there would make half of it resident
        assert np.array_equal(_held(older), older_held)
        assert np.array_equal(_held(sparse), sparse_held)
    finally:
        older.close()
        sparse.close()


def test_the_switch_turns_it_off_and_refuses_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot()
    region, address, _ = _mapping(1.0, seed=4)
    try:
        monkeypatch.setenv(huge_pages.ENV, "0")
        assert collapse_new_memory(before) == 0 and _huge_kib(address) == 0
        monkeypatch.setenv(huge_pages.ENV, "yes")
        with pytest.raises(ModelError, match="VERISPEC_HUGE_PAGES"):
            collapse_new_memory(before)
    finally:
        region.close()


def test_a_model_loaded_on_huge_pages_computes_the_same_logits(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load reports what it collapsed (0 with the switch off), and the logits are bit for bit
    those of the same model on small pages, in both engine modes."""
    path = tiny_gguf("llama", n_layer=2, n_vocab=16384, n_embd=256, n_head=4, context_length=32)
    prompt = [5, 9, 12, 7, 3]
    for weights in ("int8", "f32"):
        monkeypatch.setenv(huge_pages.ENV, "0")
        small = FastModel.load(path, weights=weights)
        monkeypatch.setenv(huge_pages.ENV, "1")
        huge = FastModel.load(path, weights=weights)
        assert small.store.huge_page_bytes == 0 and huge.store.huge_page_bytes % HUGE_PAGE == 0
        want = small.forward(prompt, small.new_cache(8)).logits
        assert np.array_equal(huge.forward(prompt, huge.new_cache(8)).logits, want)


def test_a_load_in_a_fresh_process_collapses_its_weights(tiny_gguf: Any) -> None:
    """In a process of its own, as a user's load runs: the load's weights land on 2 MiB pages. (In
    a long test process a load may reuse memory written before it, which is left alone as the
    host's: what it collapses there depends on the allocator's history, so it is not asserted.)"""
    if not _supported():
        pytest.skip("this kernel has no MADV_COLLAPSE (Linux >= 6.1, THP not never)")
    path = tiny_gguf("llama", n_layer=2, n_vocab=16384, n_embd=256, n_head=4, context_length=32)
    code = (
        "import sys; from verispec.engine.model import FastModel; "
        "print(*(FastModel.load(sys.argv[1], weights=w).store.huge_page_bytes for w in ('int8', 'f32')))"
    )
    env = {**os.environ, huge_pages.ENV: "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, check=True)
    int8_bytes, f32_bytes = (int(v) for v in out.stdout.split())
    assert int8_bytes >= HUGE_PAGE and f32_bytes >= HUGE_PAGE  # the heads: 4 MiB of int8 blocks, 16 MiB of float32


def test_a_sparse_head_built_after_the_load_is_collapsed_as_a_load_is(
    tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``with_head("sparse")`` builds its sketch after the load's collapse: its new memory is
    collapsed the same way, from a snapshot taken before the sketch was built. (The sketch needs a
    Q8_0 head, which the tiny float32 model has not: its build is stood in for here; the real
    sketch on both real models is tests/test_sparse_head_mode.py's.)"""
    from verispec.engine.sparse_head import SparseHead

    path = tiny_gguf("llama", n_layer=2, n_vocab=16384, n_embd=256, n_head=4, context_length=32)
    model = FastModel.load(path, weights="int8")
    calls = spy_on_collapse(monkeypatch)

    def built(*_: Any) -> Any:
        calls.append("build")
        return None

    monkeypatch.setattr(SparseHead, "from_gguf", built)
    model.with_head("full", path)
    assert calls == []  # nothing built, nothing to collapse
    model.with_head("sparse", path)
    assert calls == ["snapshot", "build", "collapse"]


def test_a_load_from_a_small_file_is_not_collapsed(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file under MIN_FILE_BYTES (the tiny llama, ~100 KB) loads without walking the host's
    memory (no snapshot, no collapse: nothing it could gain), with the same logits; the switch is
    still read, so a wrong value is refused by such a load too. A file of unknown size (None) or at
    the bound is collapsed."""
    assert huge_pages.worth_collapsing(None) and huge_pages.worth_collapsing(huge_pages.MIN_FILE_BYTES)
    assert not huge_pages.worth_collapsing(huge_pages.MIN_FILE_BYTES - 1)
    path = tiny_gguf("llama")
    assert path.stat().st_size < huge_pages.MIN_FILE_BYTES
    calls = spy_on_collapse(monkeypatch)

    monkeypatch.setenv(huge_pages.ENV, "1")
    prompt = [5, 9, 12, 7, 3]
    for weights in ("int8", "f32"):
        small = FastModel.load(path, weights=weights)
        assert calls == [] and small.store.huge_page_bytes == 0
        monkeypatch.setenv(huge_pages.ENV, "0")
        off = FastModel.load(path, weights=weights)
        assert np.array_equal(
            small.forward(prompt, small.new_cache(8)).logits, off.forward(prompt, off.new_cache(8)).logits
        )
        monkeypatch.setenv(huge_pages.ENV, "yes")
        with pytest.raises(ModelError, match="VERISPEC_HUGE_PAGES"):
            FastModel.load(path, weights=weights)
        monkeypatch.setenv(huge_pages.ENV, "1")
    large = tiny_gguf("llama", n_layer=2, n_vocab=16384, n_embd=256, n_head=4, context_length=32)
    assert large.stat().st_size >= huge_pages.MIN_FILE_BYTES
    FastModel.load(large, weights="int8")
    assert calls == ["snapshot", "collapse"]
