"""The engine's KV cache takes memory only for the slots written (engine.pages.zeros_on_small_pages).

An EngineCache preallocates up to 4096 slots laid out ``[L, n_kv, S, d]``. On 2 MiB pages (what
NumPy advises for every ``np.zeros`` of 4 MiB or more) a few slots written into each (layer, head)
block made nearly the whole preallocation resident: measured +180 MiB on SmolLM2's shape for a
55-token prompt, and the first prompt pass 3.7x slower while the kernel zeroed and compacted
huge pages. These tests fail on that allocation."""

from __future__ import annotations

import mmap
import os
import sys
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from verispec.engine.model import PREALLOCATE_SLOTS, EngineCache, FastModel
from verispec.engine.pages import SMALL_PAGES_FROM_BYTES, zeros_on_small_pages
from verispec.reference.config import Config
from verispec.reference.gguf import GGUFFile
from verispec.reference.kvcache import KVCache

PRESENT = np.uint64(1 << 63)  # /proc/self/pagemap: the page is resident

needs_pagemap = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_NOHUGEPAGE"),
    reason="reads /proc/self/pagemap; MADV_NOHUGEPAGE is Linux's",
)


def _resident_bytes(a: np.ndarray[Any, Any]) -> int:
    """Bytes of the pages under ``a`` that are resident now (/proc/self/pagemap's present bit)."""
    address = a.__array_interface__["data"][0]
    first = address // mmap.PAGESIZE
    last = -(-(address + a.nbytes) // mmap.PAGESIZE)
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        raw = os.pread(fd, 8 * (last - first), 8 * first)
    finally:
        os.close(fd)
    entries = np.frombuffer(raw, dtype=np.uint64)
    return int(np.count_nonzero(entries & PRESENT)) * mmap.PAGESIZE


@pytest.fixture
def tiny_config(tiny_gguf: Any) -> Config:
    with GGUFFile.open(tiny_gguf("llama", n_layer=2, n_embd=64, n_head=4, context_length=64)) as f:
        return Config.from_gguf(f)


def _smollm2_shape(config: Config) -> Config:
    """A config with SmolLM2-135M's cache shape (30 layers, 3 KV heads of 64): 90 MiB for each
    of K and V at the preallocated 4096 slots."""
    return replace(config, n_layer=30, n_head_kv=3, head_dim=64, n_head=9, context_length=8192)


def test_small_page_zeros_are_writable_zeros_and_small_arrays_stay_plain() -> None:
    big = zeros_on_small_pages((3, SMALL_PAGES_FROM_BYTES // 4 // 3 + 7), np.float32)
    assert big.dtype == np.float32 and big.flags.writeable and big.flags.c_contiguous
    assert not big.any()
    big[1, 5] = 2.5
    assert float(big.sum()) == 2.5
    small = zeros_on_small_pages((4, 8), np.int64)
    assert not isinstance(small.base, mmap.mmap)
    assert small.shape == (4, 8) and not small.any()


@needs_pagemap
def test_a_fresh_cache_makes_resident_only_the_pages_written(tiny_config: Config) -> None:
    config = _smollm2_shape(tiny_config)
    cache = EngineCache(config, config.context_length)
    assert cache.k.shape == (30, 3, PREALLOCATE_SLOTS, 64) and cache.k.nbytes == 90 << 20
    rows = 55  # a prompt: every layer writes 55 slots of K and V into every head's block
    start = cache.reserve(rows)
    kv = np.ones((3, rows, 64), dtype=np.float32)
    for layer in range(config.n_layer):
        cache.store(layer, start, kv, kv, np.arange(rows))
    cache.advance(rows)
    # written: 55 slots x 256 bytes = 14,080 bytes a (layer, head) block, at most 5 pages of it
    blocks = config.n_layer * config.n_head_kv
    bound = blocks * (-(-rows * 64 * 4 // mmap.PAGESIZE) + 1) * mmap.PAGESIZE
    assert _resident_bytes(cache.k) <= bound and _resident_bytes(cache.v) <= bound
    assert float(cache.k[:, :, :rows].sum()) == blocks * rows * 64  # what was written is there
    assert not cache.k[:, :, rows:].any()


@needs_pagemap
def test_growing_past_the_preallocation_keeps_the_slots_and_small_pages(tiny_config: Config) -> None:
    config = _smollm2_shape(tiny_config)
    cache = EngineCache(config, config.context_length)
    marks = np.arange(30 * 3 * 64, dtype=np.float32).reshape(30, 3, 1, 64)
    cache.reserve(1)
    for layer in range(30):
        cache.store(layer, 0, marks[layer], -marks[layer], np.array([0]))
    cache.advance(1)
    cache.reserve(PREALLOCATE_SLOTS + 1)  # past the preallocation: the cache grows by doubling
    assert cache.k.shape[2] == 2 * PREALLOCATE_SLOTS
    assert np.array_equal(cache.k[:, :, :1], marks) and np.array_equal(cache.v[:, :, :1], -marks)
    # the copy wrote the old 4096 slots of every block (the zeros too): at most those pages
    # (plus one at each block's ends); nothing of the new half of each block
    old = cache.k[:, :, :PREALLOCATE_SLOTS].nbytes
    assert _resident_bytes(cache.k) <= old + 2 * 90 * mmap.PAGESIZE


def test_the_reference_cache_allocates_as_before(tiny_config: Config) -> None:
    cache = KVCache(tiny_config, 1000)
    assert cache.k.shape[2] == 64 and not isinstance(cache.k.base, mmap.mmap)


@needs_pagemap
def test_a_model_prompt_pass_in_the_default_cache_stays_small(tiny_gguf: Any) -> None:
    """The whole path a user's run takes: ``new_cache()`` at the context length, a prompt pass,
    steps; the logits are those of a cache sized to the request."""
    model = FastModel.load(tiny_gguf("llama", n_layer=2, n_embd=256, n_head=4, context_length=4096), weights="int8")
    big = model.new_cache()
    sized = model.new_cache(24)
    prompt = np.arange(1, 17) % model.config.n_vocab
    a = model.forward(prompt, big).logits
    b = model.forward(prompt, sized).logits
    assert np.array_equal(a, b)
    for token in (3, 5, 7):
        assert np.array_equal(model.forward([token], big).logits, model.forward([token], sized).logits)
    assert big.k.nbytes >= SMALL_PAGES_FROM_BYTES  # 2 layers x 4 heads x 4096 slots x 64 x 4 bytes
    assert _resident_bytes(big.k) <= big.k.nbytes // 16
