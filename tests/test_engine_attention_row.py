"""The batch-invariant attention's one-row call (FastModel._attend_row) is, bit for bit, the
blocked attention (FastModel._attend_block) at one row: the int8 mode's law did not move when the
row path lost its block loop and its mask where the mask hides nothing.

Cases: plain causal decode (no mask built on a full-attention layer, built on a sliding one with
keys outside its window), keys all inside the window (no mask built on any layer), keys newer than
the query (a rolled-back or tree layout: mask built), on a llama and a gemma3 tiny model (sliding window 3), every layer, random K/V."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verispec.engine.model import FastModel

SLOTS = 9


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_row_attention_is_the_block_attention_bit_for_bit(tiny_gguf: Any, arch: str) -> None:
    model = FastModel.load(tiny_gguf(arch, sliding_window=3), weights="int8")
    for layout in ("causal", "newer-key", "within-window"):
        check_layout(model, layout)


def check_layout(model: FastModel, layout: str) -> None:
    cfg = model.config
    rng = np.random.default_rng(7)
    cache = model.new_cache(16)
    cache.k[:, :, :SLOTS] = rng.standard_normal(cache.k[:, :, :SLOTS].shape).astype(np.float32)
    cache.v[:, :, :SLOTS] = rng.standard_normal(cache.v[:, :, :SLOTS].shape).astype(np.float32)
    cache.positions[:SLOTS] = np.arange(SLOTS)
    end = 3 if layout == "within-window" else SLOTS
    position = end - 1
    if layout == "newer-key":
        cache.positions[2] = position + 5  # a key the query must not see
    q = rng.standard_normal((1, cfg.n_head, cfg.head_dim)).astype(np.float32)
    masked = 0
    for layer in range(cfg.n_layer):
        pos = np.array([position], dtype=np.int64)
        want = model._attend_block(q, layer, cache, pos, end)
        got = model._attend_row(q, layer, cache, position, end)
        assert got.shape == want.shape == (1, cfg.n_head * cfg.head_dim)
        assert np.array_equal(got, want), (layer, layout)
        masked += int(cfg.is_sliding(layer))
    if cfg.arch == "gemma3":
        assert masked > 0  # sliding layers ran (in "causal", keys 0..5 lie outside a window of 3 from 8)
