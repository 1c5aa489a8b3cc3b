"""GGUF weight blocks -> the block format of an int-dot kernel, losslessly.

A GGUF block type stores each weight as ``scale * (level - zero) + min`` over sub-blocks of 16 or
32 weights along a row (the input dimension). onnxruntime's ``MatMulNBits`` stores a matrix
``[N, K]`` as unsigned ``bits``-bit levels in blocks of ``block`` along K, a float32 scale and a
uint8 zero point per block: ``w = scale * (level - zero)``. Every GGUF type below maps onto that
format with the same levels, the same scale (computed in float32 exactly as
:mod:`reference.quants` computes it: a product of an fp16 and a 6/8-bit integer, exact in float32)
and an integer zero point; types with a per-sub-block minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) keep
it as a float32 ``min`` per block, which the kernel adds as ``min * sum(x over the block)``.

So the repack is LOSSLESS: :meth:`KernelBlocks.dequantize` gives, bit for bit, what
:func:`reference.quants.dequantize` gives (tests/test_engine_blocks.py checks every type). What
differs in the quantized mode is the arithmetic (int8 activations), not the weights.

=========  =====  =====  ====  ====  =========================================================
GGUF type  bits   block  zero  min   note
=========  =====  =====  ====  ====  =========================================================
Q4_0       4      32     8     no
Q4_1       4      32     0     yes
Q5_0       8      32     16    no    5-bit levels in 8-bit storage (the kernel has 4 or 8)
Q5_1       8      32     0     yes
Q8_0       8      32     128   no    int8 levels shifted by 128
Q2_K       4      16     0     yes   2-bit levels in 4-bit storage
Q3_K       4      16     4     no    levels -4..3 shifted by 4
Q4_K       4      32     0     yes
Q5_K       8      32     0     yes
Q6_K       8      16     32    no
=========  =====  =====  ====  ====  =========================================================

Float tensors (F32, F16, BF16) and the IQ types have no such form here: :func:`repack` raises
:class:`NotBlockQuantized` and the caller keeps them as float32 (said in the load report).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ModelError
from verispec.reference.errors import NotBlockQuantized as NotBlockQuantized
from verispec.reference.quants import (
    QK_K,
    GGMLType,
    bits_by_plane,
    bits_lsb_first,
    block_layout,
    f16_at,
    k_scales_mins,
    low_high_nibbles,
    type_name,
)

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class KernelBlocks:
    """A matrix ``[n_out, n_in]`` as levels, scales, zero points and optional mins per block."""

    bits: int  # 4 or 8: the kernel's storage width
    block: int  # weights per block along the input dimension (16 or 32)
    levels: U8  # [n_out, n_in], each < 2**bits
    scales: F32  # [n_out, n_in // block]
    zeros: U8  # [n_out, n_in // block]: the zero point of each block
    mins: F32 | None  # [n_out, n_in // block] or None
    source_types: tuple[int, ...]  # the GGUF types it came from (several after concat)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.levels.shape[0]), int(self.levels.shape[1]))

    def dequantize(self) -> F32:
        """``[n_out, n_in]`` float32 in the reference's evaluation order (bit-identical to it)."""
        n, k = self.shape
        blocked = self.levels.reshape(n, -1, self.block).astype(np.int16)
        q = (blocked - self.zeros[:, :, None].astype(np.int16)).astype(np.float32)
        w = self.scales[:, :, None] * q
        if self.mins is not None:
            w = w + self.mins[:, :, None]
        return np.asarray(w, dtype=np.float32).reshape(n, k)

    def nbytes(self) -> int:
        """Bytes the kernel holds: packed levels plus float32 scales (and mins), uint8 zeros."""
        n, k = self.shape
        blocks = n * (k // self.block)
        return n * k * self.bits // 8 + blocks * (4 + 1 + (4 if self.mins is not None else 0))


# One GGUF block [n, bytes] -> levels [n, E] uint8, scales [n, S], mins [n, S] or None (S sub-blocks).
_Unpacked = tuple[U8, F32, "F32 | None"]


def _q4_0(b: U8) -> _Unpacked:
    return low_high_nibbles(b[:, 2:18]), f16_at(b, 0), None


def _q4_1(b: U8) -> _Unpacked:
    return low_high_nibbles(b[:, 4:20]), f16_at(b, 0), f16_at(b, 2)


def _q5_0(b: U8) -> _Unpacked:
    return low_high_nibbles(b[:, 6:22]) | (bits_lsb_first(b[:, 2:6]) << np.uint8(4)), f16_at(b, 0), None


def _q5_1(b: U8) -> _Unpacked:
    return low_high_nibbles(b[:, 8:24]) | (bits_lsb_first(b[:, 4:8]) << np.uint8(4)), f16_at(b, 0), f16_at(b, 2)


def _q8_0(b: U8) -> _Unpacked:
    # int8 v -> v + 128 as uint8 is the byte with its top bit flipped ((u + 128) mod 256): one
    # byte a weight, no wider temporaries (this is most of a Q8_0 head's load-time peak otherwise)
    levels = np.bitwise_xor(b[:, 2:34], np.uint8(0x80))
    return levels, f16_at(b, 0), None


def _q2_k(b: U8) -> _Unpacked:
    n = b.shape[0]
    scales = b[:, 0:16]
    d, dmin = f16_at(b, 80), f16_at(b, 82)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    levels = ((b[:, 16:80].reshape(n, 2, 1, 32) >> shifts) & np.uint8(3)).reshape(n, QK_K)
    dl = d * (scales & np.uint8(0x0F)).astype(np.float32)
    ml = dmin * (scales >> np.uint8(4)).astype(np.float32)
    return levels, dl, -ml


def _q3_k(b: U8) -> _Unpacked:
    n = b.shape[0]
    packed = b[:, 96:108]
    low4 = low_high_nibbles(packed[:, 0:8])
    high2 = packed[:, 8:12].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)
    high2 = (high2 & np.uint8(3)).reshape(n, 16)
    sc = (low4 | (high2 << np.uint8(4))).astype(np.int8) - np.int8(32)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    low = ((b[:, 32:96].reshape(n, 2, 1, 32) >> shifts) & np.uint8(3)).reshape(n, QK_K)
    hbit = bits_by_plane(b[:, 0:32])
    levels = low + (hbit << np.uint8(2))  # q + 4 = low - 4 (1 - hbit) + 4, in 0..7
    return levels, f16_at(b, 108) * sc.astype(np.float32), None


def _q4_k(b: U8) -> _Unpacked:
    n = b.shape[0]
    sc, mn = k_scales_mins(b[:, 4:16])
    qs = b[:, 16:144].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    levels = (qs & np.uint8(0x0F)).reshape(n, QK_K)
    return levels, f16_at(b, 0) * sc.astype(np.float32), -(f16_at(b, 2) * mn.astype(np.float32))


def _q5_k(b: U8) -> _Unpacked:
    n = b.shape[0]
    sc, mn = k_scales_mins(b[:, 4:16])
    qs = b[:, 48:176].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (qs & np.uint8(0x0F)).reshape(n, 8, 32)
    high = bits_by_plane(b[:, 16:48]).reshape(n, 8, 32)
    levels = (low | (high << np.uint8(4))).reshape(n, QK_K)
    return levels, f16_at(b, 0) * sc.astype(np.float32), -(f16_at(b, 2) * mn.astype(np.float32))


def _q6_k(b: U8) -> _Unpacked:
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (ql & np.uint8(0x0F)).reshape(n, 2, 4, 32)
    qh = b[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh & np.uint8(3)).reshape(n, 2, 4, 32)
    levels = (low | (high << np.uint8(4))).reshape(n, QK_K)
    scales = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    return levels, f16_at(b, 208) * scales, None


# type -> (unpack, bits, block, zero)
_FORMS: dict[int, tuple[Callable[[U8], _Unpacked], int, int, int]] = {
    GGMLType.Q4_0: (_q4_0, 4, 32, 8),
    GGMLType.Q4_1: (_q4_1, 4, 32, 0),
    GGMLType.Q5_0: (_q5_0, 8, 32, 16),
    GGMLType.Q5_1: (_q5_1, 8, 32, 0),
    GGMLType.Q8_0: (_q8_0, 8, 32, 128),
    GGMLType.Q2_K: (_q2_k, 4, 16, 0),
    GGMLType.Q3_K: (_q3_k, 4, 16, 4),
    GGMLType.Q4_K: (_q4_k, 4, 32, 0),
    GGMLType.Q5_K: (_q5_k, 8, 32, 0),
    GGMLType.Q6_K: (_q6_k, 8, 16, 32),
}
LOSSLESS_TYPES: frozenset[int] = frozenset(int(t) for t in _FORMS)
# Types whose blocks store the scale (and the min) as one float16, which the block form's float32
# scale is exactly; the k-quants' scales are products of a float16 and a sub-block integer.
HALF_SCALE_TYPES: frozenset[int] = frozenset(
    int(t) for t in (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0)
)
_MIN_TYPES = frozenset(int(t) for t in (GGMLType.Q4_1, GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q4_K, GGMLType.Q5_K))


def kernel_nbytes(ggml_type: int, n_elements: int) -> int:
    """Bytes :func:`repack` of ``n_elements`` of ``ggml_type`` holds in the kernel (levels, float32
    scales and mins, uint8 zeros); 4 bytes an element for a type without a block form."""
    form = _FORMS.get(int(ggml_type))
    if form is None:
        return 4 * n_elements
    unpack, bits, block, _ = form
    has_min = int(ggml_type) in _MIN_TYPES
    return n_elements * bits // 8 + (n_elements // block) * (5 + (4 if has_min else 0))


def stacked_form(ggml_types: tuple[int, ...]) -> tuple[int, int, bool] | None:
    """``(bits, block, has_min)`` of the matrices of ``ggml_types`` stacked by :func:`concat` (the
    widest storage, the smallest block, mins where any part has them); None where a part has no
    block form."""
    forms = [_FORMS.get(int(t)) for t in ggml_types]
    if not forms or any(form is None for form in forms):
        return None
    bits = max(form[1] for form in forms if form is not None)
    block = min(form[2] for form in forms if form is not None)
    return bits, block, any(int(t) in _MIN_TYPES for t in ggml_types)


# Bits a level of each type needs (levels are < 2**bits): what a storage narrower than the block
# form's could hold (the block form keeps 5- and 6-bit levels in bytes).
LEVEL_BITS: dict[int, int] = {
    int(GGMLType.Q4_0): 4,
    int(GGMLType.Q4_1): 4,
    int(GGMLType.Q5_0): 5,
    int(GGMLType.Q5_1): 5,
    int(GGMLType.Q8_0): 8,
    int(GGMLType.Q2_K): 2,
    int(GGMLType.Q3_K): 3,
    int(GGMLType.Q4_K): 4,
    int(GGMLType.Q5_K): 5,
    int(GGMLType.Q6_K): 6,
}
assert set(LEVEL_BITS) == LOSSLESS_TYPES


def stacked_level_bits(ggml_types: tuple[int, ...]) -> int:
    """Bits every level of the stack of ``ggml_types`` (:func:`concat`) fits in."""
    return max(LEVEL_BITS[int(t)] for t in ggml_types)


def stacked_has_zero(ggml_types: tuple[int, ...]) -> bool:
    """Some part of the stack of ``ggml_types`` (:func:`concat`) has a zero point other than 0."""
    return any(_FORMS[int(t)][3] != 0 for t in ggml_types)


PREPACKED_BLOCK_EXTRA = 8  # bytes a block beyond its levels in MLAS's int8-compute packing (see prepacked_nbytes)


def prepacked_nbytes(ggml_types: tuple[int, ...], n_out: int, n_in: int) -> int:
    """Bytes onnxruntime holds for the matrix ``[n_out, n_in]`` stacked (:func:`concat`) from parts
    of ``ggml_types``, as the int8 mode builds it (engine.matmul.blocks_nodes), steady state:

    - ``MatMulNBits`` prepacked by MLAS for int8 compute: per block, the levels (``bits * block / 8``
      bytes), a float32 scale and a float32 block sum (:data:`PREPACKED_BLOCK_EXTRA`; measured 24.2
      bytes a 4-bit block of 32 and 40.6 an 8-bit one on onnxruntime 1.32, lab/load_memory.py);
      the kernel's rows include the block-sum rows (one per input block) when a part has mins;
    - the min term's float32 matrix, ``[n_in / block, n_out + n_in / block]`` (its wide form,
      the larger), single copy (measured 4.2-4.4 bytes an element);
    - a part without a block form makes the whole stack float32 (4 bytes an element, MatMul).

    Not counted: onnxruntime's fixed cost per session and node (tens of KiB each)."""
    form = stacked_form(ggml_types)
    if form is None:
        return 4 * n_out * n_in
    bits, block, has_min = form
    n_blocks = n_in // block
    rows = n_out + (n_blocks if has_min else 0)
    levels = rows * n_in * bits // 8
    mins = 4 * n_blocks * (n_out + n_blocks) if has_min else 0
    return levels + rows * n_blocks * PREPACKED_BLOCK_EXTRA + mins


def repack(raw: U8, ggml_type: int, shape: tuple[int, int], *, name: str = "") -> KernelBlocks:
    """The GGUF bytes of a matrix ``[n_out, n_in]`` -> :class:`KernelBlocks` (lossless).

    NotBlockQuantized for a type without a block form; ModelError when the byte count does not
    match the shape (checked before anything is allocated).
    """
    form = _FORMS.get(int(ggml_type))
    if form is None:
        raise NotBlockQuantized(f"tensor {name!r}: ggml type {type_name(ggml_type)} has no kernel block form")
    unpack, bits, block, zero = form
    n_out, n_in = shape
    block_elements, block_bytes = block_layout(ggml_type)
    flat = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if n_in % block_elements or flat.size != n_out * (n_in // block_elements) * block_bytes:
        raise ModelError(
            f"tensor {name!r}: {flat.size} bytes of {type_name(ggml_type)} do not hold a [{n_out}, {n_in}] matrix"
        )
    levels, scales, mins = unpack(flat.reshape(-1, block_bytes))  # [nb, E], [nb, S], [nb, S]|None
    per_row = n_in // block
    return KernelBlocks(
        bits=bits,
        block=block,
        levels=np.ascontiguousarray(levels, dtype=np.uint8).reshape(n_out, n_in),
        scales=np.ascontiguousarray(scales, dtype=np.float32).reshape(n_out, per_row),
        zeros=np.full((n_out, per_row), zero, dtype=np.uint8),
        mins=None if mins is None else np.ascontiguousarray(mins, dtype=np.float32).reshape(n_out, per_row),
        source_types=(int(ggml_type),),
    )


def _split_blocks(kb: KernelBlocks, block: int) -> KernelBlocks:
    """The same weights in blocks of ``block`` (a divisor of kb.block): scale, zero, min repeated."""
    if block == kb.block:
        return kb
    times = kb.block // block
    return KernelBlocks(
        bits=kb.bits,
        block=block,
        levels=kb.levels,
        scales=np.repeat(kb.scales, times, axis=1),
        zeros=np.repeat(kb.zeros, times, axis=1),
        mins=None if kb.mins is None else np.repeat(kb.mins, times, axis=1),
        source_types=kb.source_types,
    )


def concat(parts: list[KernelBlocks]) -> KernelBlocks:
    """Stack matrices along n_out (fused QKV, gate/up), losslessly: the widest storage (4-bit levels
    fit 8-bit storage), the smallest block (a block splits into equal ones), zero mins where a part
    has none (``+ 0.0`` is exact)."""
    if len(parts) == 1:
        return parts[0]
    if len({p.shape[1] for p in parts}) != 1:
        raise ModelError(f"cannot stack matrices of input sizes {[p.shape[1] for p in parts]}")
    bits, block = max(p.bits for p in parts), min(p.block for p in parts)
    same = [_split_blocks(p, block) for p in parts]
    any_mins = any(p.mins is not None for p in same)
    return KernelBlocks(
        bits=bits,
        block=block,
        levels=np.concatenate([p.levels for p in same]),
        scales=np.concatenate([p.scales for p in same]),
        zeros=np.concatenate([p.zeros for p in same]),
        mins=np.concatenate([p.mins if p.mins is not None else np.zeros_like(p.scales) for p in same])
        if any_mins
        else None,
        source_types=tuple(t for p in parts for t in p.source_types),
    )
