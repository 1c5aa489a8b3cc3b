"""The measured verify-cost curve of a loaded model: what a pass over r rows costs, relative to 1.

Speculative decoding verifies k drafts in one pass of k+1 rows. Whether drafting k tokens pays,
and how many, depends on c(k+1) = time(k+1 rows) / time(1 row), which is a property of the
kernel (OpenBLAS: 2.5-3.7x already at 2 rows; MLAS float32: 1.1-1.5x at 5; the int8 kernel:
compute-bound past ~3 rows, measured by ``verispec bench``). :func:`cost_curve` measures it on the
model's own forward (the real verify pass: embedding, every layer with attention over a short
context, the head on every row), once per model object in a process (cached; weights mode and
backend are fixed per object), and :meth:`reference.drafts.AdaptiveK` caps its k with it
(:func:`reference.drafts.best_k_for_cost`: the k maximizing Leviathan's expected tokens per cycle
over the cycle's measured cost, at the running acceptance).

Cost of measuring: ``repeats`` x (k_max + 1) forward passes of 1..k_max+1 rows at load of the
first speculative request (SmolLM2 int8: ~0.2 s for k_max 8); each point is the minimum of its
repeats (the least-disturbed run on a shared machine), and c is clipped below at 1.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.model import FastModel

CONTEXT_TOKENS = 16  # positions already in the cache when a curve point is timed (a short prompt)
REPEATS = 3

_CURVES: "weakref.WeakKeyDictionary[FastModel, dict[int, float]]" = weakref.WeakKeyDictionary()


def _pass_seconds(model: "FastModel", rows: int, repeats: int) -> float:
    """Least time of ``repeats`` forward passes of ``rows`` tokens after CONTEXT_TOKENS cached."""
    cfg = model.config
    cache = model.new_cache(min(cfg.context_length, CONTEXT_TOKENS + rows))
    context = [i % cfg.n_vocab for i in range(1, CONTEXT_TOKENS + 1)]
    model.forward(context, cache, last_only=True)
    tokens = [(CONTEXT_TOKENS + 1 + i) % cfg.n_vocab for i in range(rows)]
    best = float("inf")
    for _ in range(max(1, repeats) + 1):  # the first run warms up (allocations): not counted
        cache.truncate(CONTEXT_TOKENS)
        t0 = time.perf_counter()
        model.forward(tokens, cache)  # the head on every row, as verification runs it
        best = min(best, time.perf_counter() - t0)
    return best


def measure_curve(model: "FastModel", max_rows: int, repeats: int = REPEATS) -> dict[int, float]:
    """rows -> c(rows) for rows 1..max_rows (c(1) = 1), measured now on ``model``."""
    one = _pass_seconds(model, 1, repeats)
    curve = {1: 1.0}
    for rows in range(2, max_rows + 1):
        curve[rows] = max(1.0, _pass_seconds(model, rows, repeats) / one)
    return curve


def cost_curve(model: "FastModel", max_rows: int) -> dict[int, float]:
    """:func:`measure_curve`, cached per model object; measured again only for more rows."""
    cached = _CURVES.get(model)
    if cached is None or max(cached) < max_rows:
        cached = measure_curve(model, max_rows)
        _CURVES[model] = cached
    return {r: c for r, c in cached.items() if r <= max_rows}
