"""Quantize float32 weights to the GGUF types the synthetic models write, with NumPy alone.

The arithmetic is gguf-py's (``gguf/quants.py``, MIT licence, itself ggml-quants.c's reference
quantizers): the same block formulas, the same float32 rounding, the same byte layout, so a
synthetic file is the same bytes whether gguf-py or this module quantized it (tested against
gguf-py where it is installed). Output: a uint8 array whose last axis is the row's bytes (blocks
of 32 weights), as gguf-py returns it; F16 and F32 are plain float arrays.

verispec's reader (reference/quants.py) dequantizes every one of these types; tests round-trip them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import QuantError as QuantError  # re-exported: its old home
from verispec.synth.gguf_writer import BF16, F16, F32, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0

F32s = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
BLOCK = 32  # weights per block of every block type here

TYPE_IDS = {"F32": F32, "F16": F16, "BF16": BF16, "Q4_0": Q4_0, "Q4_1": Q4_1, "Q5_0": Q5_0, "Q5_1": Q5_1, "Q8_0": Q8_0}


def _f16_bytes(x: F32s) -> U8:
    return x.astype(np.float16).view(np.uint8)


def _inverse(d: F32s) -> F32s:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)


def _signed_absmax(blocks: F32s) -> F32s:
    """Each block's entry of largest magnitude, with its sign (the first such entry)."""
    imax = np.abs(blocks).argmax(axis=-1, keepdims=True)
    out: F32s = np.take_along_axis(blocks, imax, axis=-1)
    return out


def _nibbles(q: U8) -> U8:
    """Pack 32 values per block: byte j holds value j (low nibble) and value j + 16 (high)."""
    halves = q.reshape((q.shape[0], 2, BLOCK // 2))
    packed: U8 = (halves[..., 0, :] & np.uint8(0x0F)) | (halves[..., 1, :] << np.uint8(4))
    return packed


def _high_bits(q: U8) -> U8:
    """The fifth bit of each of a block's 32 values, as a little-endian 32-bit mask."""
    bits: U8 = np.packbits(q.reshape((q.shape[0], 1, BLOCK)) >> np.uint8(4), axis=-1, bitorder="little")
    return bits.reshape(q.shape[0], 4)


def _q4_0(blocks: F32s) -> U8:
    d = (_signed_absmax(blocks) / np.float32(-8)).astype(np.float32)
    q = np.trunc(blocks * _inverse(d) + np.float32(8.5)).astype(np.float32).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _nibbles(q)], axis=-1)


def _q4_1(blocks: F32s) -> U8:
    hi, lo = blocks.max(axis=-1, keepdims=True), blocks.min(axis=-1, keepdims=True)
    d = ((hi - lo) / np.float32(15)).astype(np.float32)
    q = np.trunc((blocks - lo) * _inverse(d) + np.float32(0.5)).astype(np.float32).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _nibbles(q)], axis=-1)


def _q5_0(blocks: F32s) -> U8:
    d = (_signed_absmax(blocks) / np.float32(-16)).astype(np.float32)
    q = np.trunc(blocks * _inverse(d) + np.float32(16.5)).astype(np.float32).astype(np.uint8).clip(0, 31)
    return np.concatenate([_f16_bytes(d), _high_bits(q), _nibbles(q)], axis=-1)


def _q5_1(blocks: F32s) -> U8:
    hi, lo = blocks.max(axis=-1, keepdims=True), blocks.min(axis=-1, keepdims=True)
    d = ((hi - lo) / np.float32(31)).astype(np.float32)
    q = np.trunc((blocks - lo) * _inverse(d) + np.float32(0.5)).astype(np.float32).astype(np.uint8).clip(0, 31)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _high_bits(q), _nibbles(q)], axis=-1)


def _round_half_away(x: F32s) -> F32s:
    """C's roundf: halves away from zero (NumPy's round goes to even). Not floor(|x| + 0.5): in
    float32 that sum rounds up for |x| just below a half."""
    a = np.abs(x)
    floored = np.floor(a)
    out: F32s = (np.sign(x) * (floored + np.floor(2 * (a - floored)))).astype(np.float32)
    return out


def _q8_0(blocks: F32s) -> U8:
    d = (np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    qs = _round_half_away(blocks * _inverse(d)).astype(np.int8).view(np.uint8)
    return np.concatenate([_f16_bytes(d), qs], axis=1)


_BLOCK_QUANTIZERS: dict[int, Callable[[F32s], U8]] = {Q4_0: _q4_0, Q4_1: _q4_1, Q5_0: _q5_0, Q5_1: _q5_1, Q8_0: _q8_0}


def _bf16(array: F32s) -> U8:
    """ggml_compute_fp32_to_bf16: NaNs made quiet, then round to nearest even."""
    n = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    n = np.where(
        (n & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000), (n & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), n
    )
    rounded = (n.astype(np.uint64) + (np.uint64(0x7FFF) + ((n >> np.uint32(16)) & np.uint32(1)))) >> np.uint64(16)
    out: U8 = rounded.astype(np.uint16).view(np.uint8)
    return out


def quantize(array: npt.NDArray[np.floating[Any]], type_name: str) -> npt.NDArray[np.generic]:
    """``array`` (float32, rows along the last axis) as ``type_name``: float32 / float16 arrays for
    F32 / F16, else its uint8 bytes of shape ``[..., row bytes]``."""
    if type_name not in TYPE_IDS:
        raise QuantError(f"cannot write type {type_name!r}; known: {', '.join(TYPE_IDS)}")
    x = np.ascontiguousarray(array, dtype=np.float32)
    if type_name == "F32":
        return x
    if type_name == "F16":
        return x.astype(np.float16)
    if type_name == "BF16":
        return _bf16(x)
    if x.shape[-1] % BLOCK:
        raise QuantError(f"a row of {x.shape[-1]} weights is not a whole number of {BLOCK}-weight blocks ({type_name})")
    blocks = x.reshape((-1, BLOCK))
    packed = _BLOCK_QUANTIZERS[TYPE_IDS[type_name]](blocks)
    return packed.reshape((*x.shape[:-1], x.shape[-1] // BLOCK * packed.shape[-1]))
