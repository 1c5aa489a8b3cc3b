"""The int8 layer law: a decoder layer's two halves, every step an IEEE float32 operation.

The int8 engine's ``tile`` layer kernel (engine/tile_layers.py, its C in
engine/kernels/layer_tile.c) computes exactly this, bit for bit, on every instruction set it has
(AVX-512 VNNI, plain C) and in its NumPy fallback. This module is the law's executable meaning:
readable, slow, the oracle the kernel is tested against. It generalises the head's law
(reference/q8_block_dot.py) from Q8_0 to every block form of engine/blocks.py, and writes down the
operations around the matrices (norms, RoPE, activations) so that they too are the same bits on
every machine.

Glossary
--------
block form     a matrix ``[N, K]`` as ``levels`` (unsigned, < 2**8), and per block of ``B`` = 16
               or 32 inputs a float32 ``scale``, an integer ``zero`` and optionally a float32
               ``min``: ``w = scale * (level - zero) + min`` (engine/blocks.py: every GGUF block
               type maps onto it losslessly).
act block      32 consecutive values of an activation row quantized on their own, as the head's law
               does: ``da = max|x| / 127``, ``a = rint(x / da)`` (reference/q8_block_dot.py).
block dot      per weight block b: ``idot = sum (level - zero) * a`` over its B inputs, exact
               (``|idot| <= 32 * 255 * 127 < 2**24``), and ``asum = sum a``, exact.
the sum        per output row and activation row, in block order, acc from +0.0:
                   sd  = scale * da                 (da: the act block holding weight block b)
                   acc = acc + f32(idot) * sd       (multiply, then add: two roundings)
                   md  = min * da                   } only for a matrix with mins
                   acc = acc + f32(asum) * md       }
               An activation row holding inf or NaN gives a row of NaN.
RMSNorm        ``ss = x0*x0 + x1*x1 + ...`` in index order, ``s = sqrt(ss / n + eps)``,
               ``y = (x / s) * w``: one rounding an operation.
exp            Cephes' ``expf`` written out operation by operation (:func:`exp_law`): ``n =
               floor(x log2 e + 1/2)``, ``r = x - n C1 - n C2``, a degree-5 polynomial, ``ldexp``.
               Within 2 ulp of exp on its range (tests/test_tile_layers.py measures it); what
               matters here is that NumPy and C compute the same bits.
SiLU           ``g * (1 / (1 + exp(-g)))``.
GELU (tanh)    ``(0.5 g) * (1 + t)``, ``t = 1 - 2 / (exp(2 u) + 1)``, ``u = c0 (g + c1 (g g) g)``.
RoPE           ``x * cos + x[rot] * sin``: ``rot`` each dim's partner, ``sin`` signed
               (engine/rope.py).
attention      one query row over the keys it may see (causal; within the window on a sliding
               layer), per query head and its kv head: ``score = dot(q, k) * scale``, the dot in 16
               lanes (lane j sums ``q[16c + j] k[16c + j]`` over c from its first product) then the
               lanes in a fixed tree (j + j+8, + j+4, + j+2, + j+1; a lane without a product is
               +0); ``m = max score``; ``e = exp(score - m)``; ``sum`` the e in slot order; ``p = e /
               sum``; ``out`` the ``p v`` in slot order, from the first term.

A k-row pass gives every row the bits a 1-row pass gives: every operation is per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.q8_block_dot import BLOCK, quantize_activations

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

ACT_SILU = "silu"
ACT_GELU_TANH = "gelu_tanh"

# Cephes expf: the range limits, log2(e), ln 2 in two parts, the polynomial (highest power first)
EXP_MAX = np.float32(88.72283935546875)
EXP_MIN = np.float32(-87.33654022216797)
LOG2E = np.float32(1.44269502162933349609375)
LN2_HI = np.float32(0.693359375)
LN2_LO = np.float32(-2.12194440e-4)
EXP_POLY = tuple(
    np.float32(c)
    for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
)
GELU_C0 = np.float32(0.7978845834732056)  # sqrt(2 / pi)
GELU_C1 = np.float32(0.044715)


class BlockForm(Protocol):
    """A matrix ``[N, K]`` in block form (glossary); engine/blocks.py's KernelBlocks is one."""

    @property
    def block(self) -> int: ...
    @property
    def levels(self) -> U8: ...  # [N, K]
    @property
    def scales(self) -> F32: ...  # [N, K / B]
    @property
    def zeros(self) -> U8: ...  # [N, K / B]
    @property
    def mins(self) -> F32 | None: ...  # [N, K / B] or None


def exp_law(x: F32) -> F32:
    """Elementwise exp by the law (glossary); NaN stays NaN, beyond the range inf or +0."""
    x = np.asarray(x, dtype=np.float32)
    inside = np.where(np.isnan(x), np.float32(0), np.clip(x, EXP_MIN, EXP_MAX))  # NaN: replaced at the end
    n = np.floor(inside * LOG2E + np.float32(0.5))
    r = inside - n * LN2_HI
    r = r - n * LN2_LO
    z = r * r
    p = np.full_like(r, EXP_POLY[0])
    for c in EXP_POLY[1:]:
        p = p * r + c
    p = p * z + r
    p = p + np.float32(1)
    with np.errstate(over="ignore"):  # ldexp at the top of the range may round to inf, as C's does
        y = np.asarray(np.ldexp(p, n.astype(np.int32)), dtype=np.float32)
    y = np.where(x > EXP_MAX, np.float32(np.inf), y)
    y = np.where(x < EXP_MIN, np.float32(0), y)
    return np.asarray(np.where(np.isnan(x), x, y), dtype=np.float32)


def silu_law(g: F32) -> F32:
    return np.asarray(g * (np.float32(1) / (np.float32(1) + exp_law(-g))), dtype=np.float32)


def gelu_tanh_law(g: F32) -> F32:
    g3 = (g * g) * g
    inner = GELU_C0 * (g + GELU_C1 * g3)
    t = np.float32(1) - np.float32(2) / (exp_law(np.float32(2) * inner) + np.float32(1))
    return np.asarray((np.float32(0.5) * g) * (np.float32(1) + t), dtype=np.float32)


def activation_law(g: F32, kind: str) -> F32:
    if kind == ACT_SILU:
        return silu_law(g)
    if kind == ACT_GELU_TANH:
        return gelu_tanh_law(g)
    raise ValueError(f"unknown activation {kind!r}")


def rms_norm_law(x: F32, w: F32, eps: float) -> F32:
    """RMSNorm over the last axis (glossary): the sum of squares in index order (a cumulative sum
    is one addition at a time, left to right)."""
    x = np.asarray(x, dtype=np.float32)
    ss = np.cumsum(x * x, axis=-1, dtype=np.float32)[..., -1:]
    s = np.sqrt(ss / np.float32(x.shape[-1]) + np.float32(eps))
    return np.asarray((x / s) * w, dtype=np.float32)


def block_matmul_law(m: BlockForm, x: F32) -> F32:
    """The law's ``x [R, K] @ W.T`` for ``W [N, K]`` in block form -> ``[R, N]`` float32."""
    acts = quantize_activations(np.asarray(x, dtype=np.float32))
    n, k = m.levels.shape
    rows, size = acts.levels.shape[0], m.block
    nbw = k // size
    a = acts.levels.reshape(rows, nbw, size).astype(np.int32)
    levels = m.levels.reshape(n, nbw, size).astype(np.int32)
    acc = np.zeros((rows, n), dtype=np.float32)
    for b in range(nbw):
        asum = a[:, b, :].sum(axis=1)  # [R], exact
        idot = a[:, b, :] @ levels[:, b, :].T - asum[:, None] * m.zeros[None, :, b].astype(np.int32)  # [R, N]
        da = acts.scales[:, (b * size) // BLOCK, None]  # [R, 1]
        sd = m.scales[None, :, b] * da
        acc = acc + idot.astype(np.float32) * sd
        if m.mins is not None:
            md = m.mins[None, :, b] * da
            acc = acc + asum[:, None].astype(np.float32) * md
    acc[~acts.finite] = np.nan
    return acc


@dataclass(frozen=True)
class LayerLaw:
    """One decoder layer's weights for the law: four matrices in block form, its vectors."""

    n_head: int
    n_kv: int
    head_dim: int
    eps: float
    activation: str  # ACT_SILU or ACT_GELU_TANH
    rot: npt.NDArray[np.int32]  # [d]: RoPE's partner of each dim
    attn_norm: F32  # [E]
    qkv: BlockForm  # [n_head d + 2 n_kv d, E]
    bqkv: F32 | None  # [n_head d + 2 n_kv d]
    q_norm: F32 | None  # [d]
    k_norm: F32 | None  # [d]
    o: BlockForm  # [E, n_head d]
    bo: F32 | None  # [E]
    post_attn_norm: F32 | None  # [E]
    ffn_norm: F32  # [E]
    gu: BlockForm  # [2 n_ff, E]: gate rows, then up rows
    down: BlockForm  # [E, n_ff]
    post_ffn_norm: F32 | None  # [E]


def pre_half(layer: LayerLaw, x: F32, cos: F32, sin: F32) -> tuple[F32, F32]:
    """``x [T, E], cos, sin [T, d] -> qk [T, n_head + n_kv, d], v [T, n_kv d]``: RMSNorm, QKV,
    bias, per-head q/k norm, RoPE."""
    t, d = x.shape[0], layer.head_dim
    heads = layer.n_head + layer.n_kv
    qkv = block_matmul_law(layer.qkv, rms_norm_law(x, layer.attn_norm, layer.eps))
    if layer.bqkv is not None:
        qkv = qkv + layer.bqkv
    qk = qkv[:, : heads * d].reshape(t, heads, d)
    if layer.q_norm is not None and layer.k_norm is not None:
        weights = np.concatenate([np.tile(layer.q_norm, (layer.n_head, 1)), np.tile(layer.k_norm, (layer.n_kv, 1))])
        qk = np.concatenate(
            [rms_norm_law(qk[:, h : h + 1], weights[h], layer.eps) for h in range(heads)], axis=1
        )  # one head at a time: each head's own weights
    rotated = qk * cos[:, None, :] + qk[:, :, layer.rot] * sin[:, None, :]
    return np.asarray(rotated, dtype=np.float32), np.ascontiguousarray(qkv[:, heads * d :])


def post_half(layer: LayerLaw, attn: F32, x: F32) -> F32:
    """``attn [T, n_head d], x [T, E] -> y [T, E]``: o, bias, post-attention norm, residual,
    RMSNorm, gate/up, activation, down, post-FFN norm, residual."""
    a = block_matmul_law(layer.o, attn)
    if layer.bo is not None:
        a = a + layer.bo
    if layer.post_attn_norm is not None:
        a = rms_norm_law(a, layer.post_attn_norm, layer.eps)
    x1 = x + a
    gu = block_matmul_law(layer.gu, rms_norm_law(x1, layer.ffn_norm, layer.eps))
    n_ff = gu.shape[1] // 2
    act = activation_law(gu[:, :n_ff], layer.activation) * gu[:, n_ff:]
    f = block_matmul_law(layer.down, act)
    if layer.post_ffn_norm is not None:
        f = rms_norm_law(f, layer.post_ffn_norm, layer.eps)
    return np.asarray(x1 + f, dtype=np.float32)


def lane_dot(q: F32, k: F32) -> F32:
    """``q [..., d] . k [..., d]`` over the last axis by the law's 16 lanes and tree (glossary)."""
    prods = np.asarray(q * k, dtype=np.float32)  # [..., d]
    d = prods.shape[-1]
    whole = d - d % 16
    lanes = np.zeros((*prods.shape[:-1], 16), dtype=np.float32)  # a lane without a product: +0
    if whole:
        chunks = prods[..., :whole].reshape(*prods.shape[:-1], -1, 16)  # [..., d // 16, 16]
        lanes = np.cumsum(chunks, axis=-2, dtype=np.float32)[..., -1, :]  # one addition at a time, per lane
        lanes[..., : d % 16] = lanes[..., : d % 16] + prods[..., whole:]
    else:
        lanes[..., :d] = prods
    t8 = lanes[..., :8] + lanes[..., 8:]
    t4 = t8[..., :4] + t8[..., 4:]
    t2 = t4[..., :2] + t4[..., 2:]
    return np.asarray(t2[..., 0] + t2[..., 1], dtype=np.float32)


def attend_row(
    q: F32,  # [n_head, d]
    k: F32,  # [n_kv, S, d]
    v: F32,  # [n_kv, S, d]
    key_positions: npt.NDArray[np.int64],  # [S]
    position: int,
    window: int,
    scale: np.float32,
) -> F32:
    """One query row's attention by the law (glossary) -> ``[n_head d]``."""
    n_head, d = q.shape
    n_kv = k.shape[0]
    distance = position - key_positions
    visible = np.flatnonzero((distance >= 0) & ((window <= 0) | (distance < window)))
    group = n_head // n_kv
    out = np.empty((n_head, d), dtype=np.float32)
    for head in range(n_head):
        keys, values = k[head // group, visible], v[head // group, visible]  # [S', d]
        scores = lane_dot(q[head][None, :], keys) * np.float32(scale)  # [S']
        e = exp_law(scores - scores.max())
        total = np.cumsum(e, dtype=np.float32)[-1]
        p = e / total
        out[head] = np.cumsum(p[:, None] * values, axis=0, dtype=np.float32)[-1]
    return out.reshape(-1)
