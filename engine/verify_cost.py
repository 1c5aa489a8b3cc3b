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

Cost of measuring: (``repeats`` + 1) x (k_max + 1) forward passes of 1..k_max+1 rows before the
first speculative request of a model (Gemma 3 with k_max 4: ~3 s on f32/ort, ~1 s on int8, measured at load ~12); each point is the
minimum of its repeats (the least-disturbed run on a shared machine), c is clipped below at 1.
Measured once per process: a curve read during a burst of load stays for the process (bench
prints it as ``verify_cost``).
"""

from __future__ import annotations

import time
import weakref

from verispec.reference.seams import TargetModel  # the protocol, not engine.model: no import loop back to the model

CONTEXT_TOKENS = 16  # positions already in the cache when a curve point is timed (a short prompt)
REPEATS = 3

_CURVES: "weakref.WeakKeyDictionary[TargetModel, dict[int, float]]" = weakref.WeakKeyDictionary()


def measure_curve(model: TargetModel, max_rows: int, repeats: int = REPEATS) -> dict[int, float]:
    """rows -> c(rows) for rows 1..max_rows (c(1) = 1), measured now on ``model``.

    Round-robin over the row counts, ``repeats`` rounds after one warm-up round, the least time of
    each kept: a burst of load on the shared machine then disturbs every row count alike instead
    of one block of them (measured back to back, one Gemma 3 curve read c(5) = 1.2 and then 2.4)."""
    cfg = model.config
    cache = model.new_cache(min(cfg.context_length, CONTEXT_TOKENS + max_rows))
    model.forward([i % cfg.n_vocab for i in range(1, CONTEXT_TOKENS + 1)], cache)  # the short prompt
    tokens = [(CONTEXT_TOKENS + 1 + i) % cfg.n_vocab for i in range(max_rows)]
    best = {rows: float("inf") for rows in range(1, max_rows + 1)}
    for round_index in range(max(1, repeats) + 1):
        for rows in best:
            cache.truncate(CONTEXT_TOKENS)
            t0 = time.perf_counter()
            model.forward(tokens[:rows], cache)  # the head on every row, as verification runs it
            elapsed = time.perf_counter() - t0
            if round_index > 0:  # round 0 warms up (first calls allocate)
                best[rows] = min(best[rows], elapsed)
    return {rows: 1.0 if rows == 1 else max(1.0, seconds / best[1]) for rows, seconds in best.items()}


def cost_curve(model: TargetModel, max_rows: int) -> dict[int, float]:
    """:func:`measure_curve`, cached per model object; measured again only for more rows."""
    cached = _CURVES.get(model)
    if cached is None or max(cached) < max_rows:
        cached = measure_curve(model, max_rows)
        _CURVES[model] = cached
    return {r: c for r, c in cached.items() if r <= max_rows}
