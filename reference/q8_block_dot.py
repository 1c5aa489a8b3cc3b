"""The Q8 block-dot law: a Q8_0 matrix times float32 rows, every step an IEEE float32 operation.

The int8 engine's ``tile`` head kernel (engine/tile_head.py, its C in engine/kernels/q8_0_tile.c)
computes exactly this, bit for bit, on every instruction set it has (AVX-512 VNNI, AVX2, plain C)
and in its NumPy fallback. This module is the law's executable meaning: readable, slow, the oracle
the kernel is tested against.

Glossary
--------
weight block   32 weights of one output row: ``d`` (float16) and 32 ``qs`` (int8), as the file
               stores Q8_0 (reference/quants.py); the weight is ``d * qs[j]``.
activation     one float32 row ``x [K]`` of the head's input, ``K`` a multiple of 32.
act block      32 consecutive values of an activation row, quantized on their own:
               ``amax = max |x_j|``, ``da = amax / 127`` (float32 division), and
               ``a_j = rint(x_j / da)`` (float32 division, ties to even; all 0 where ``da == 0``).
               ``|x_j / da| <= 127`` rounds into [-127, 127]: a level is an int8.
block dot      ``dot = sum_j qs_j * a_j`` over one weight block and the act block under it: an
               integer, ``|dot| <= 32 * 128 * 127 < 2**24``, so exact in int32 *and* in float32
               whatever the order of the sum (which is what lets a kernel choose its own).
the sum        per output row n and activation row r, in block order b = 0, 1, ...:
                   scale = f32(d[n, b]) * da[r, b]           (float32 multiply)
                   term  = f32(dot[r, n, b]) * scale         (float32 multiply)
                   acc   = acc + term                        (float32 add, acc starts at +0.0)
               two roundings a block, no fused multiply-add: every operation is one IEEE float32
               operation, so NumPy, scalar C and vector C with any lane width agree bit for bit.
non-finite     an activation row holding inf or NaN gives a row of NaN logits (its act blocks
               have no levels); a weight scale that is inf or NaN propagates by IEEE rules.

A k-row pass gives every row the bits a 1-row pass gives: each (weight row, activation row) pair
has its own sum, in its own order, whatever else is computed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BLOCK = 32
MAX_LEVEL = np.float32(127)

F32 = npt.NDArray[np.float32]

# The file's Q8_0 block, 34 bytes: reference/quants.py draws its byte map.
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (BLOCK,))])


@dataclass(frozen=True)
class Q8Activations:
    """Activation rows ``[R, K]`` quantized per act block (glossary)."""

    levels: npt.NDArray[np.int8]  # [R, K]
    scales: F32  # [R, K / 32]  da
    finite: npt.NDArray[np.bool_]  # [R]  rows without inf or NaN


def quantize_activations(x: F32) -> Q8Activations:
    """``x [R, K]`` float32, ``K`` a multiple of 32 -> its act blocks (glossary)."""
    rows, k = x.shape
    if k % BLOCK:
        raise ValueError(f"the activation width {k} is not a multiple of {BLOCK}")
    finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(x).all(axis=1))
    xb = np.where(finite[:, None], x, np.float32(0)).astype(np.float32).reshape(rows, k // BLOCK, BLOCK)
    scales = (np.abs(xb).max(axis=2) / MAX_LEVEL).astype(np.float32)  # [R, nb]
    safe = np.where(scales == 0, np.float32(1), scales)[..., None]  # da == 0: every level 0 (x / 1 rounds to 0)
    levels = np.where(scales[..., None] == 0, np.float32(0), np.rint(xb / safe))
    return Q8Activations(levels.astype(np.int8).reshape(rows, k), scales, finite)


def block_dot_logits(blocks: npt.NDArray[np.void], x: F32) -> F32:
    """The law: ``blocks [N, K / 32]`` Q8_0 weight blocks, ``x [R, K]`` -> ``y [R, N]`` float32."""
    acts = quantize_activations(np.asarray(x, dtype=np.float32))
    n, nb = blocks.shape
    rows = acts.levels.shape[0]
    qs = blocks["qs"].astype(np.int32)  # [N, nb, 32]
    d = blocks["d"].astype(np.float32)  # [N, nb]  (float16 -> float32 is exact)
    a = acts.levels.reshape(rows, nb, BLOCK).astype(np.int32)
    acc = np.zeros((rows, n), dtype=np.float32)
    for b in range(nb):
        dot = (a[:, b, :] @ qs[:, b, :].T).astype(np.float32)  # [R, N], exact (glossary: block dot)
        scale = d[None, :, b] * acts.scales[:, b, None]  # [R, N] float32
        acc = acc + dot * scale  # two float32 roundings: multiply, then add
    acc[~acts.finite] = np.nan
    return acc
