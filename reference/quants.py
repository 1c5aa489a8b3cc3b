"""ggml tensor types and their codecs: raw GGUF bytes <-> float32.

Every ggml type stores a tensor as a flat run of *blocks*; a block holds ``block_elements`` values in
``block_bytes`` bytes (plain float types are blocks of one). Each quantized type below has one
declarative section: the block layout drawn as a byte map, then a decoder that works on all blocks
at once (``[n_blocks, block_bytes] uint8 -> [n_blocks, block_elements] float32``).

Arithmetic follows ggml's ``dequantize_row_*`` in ``ggml-quants.c`` operation by operation, in
float32 and without fused multiply-adds, so results are bit-identical to ggml's reference C code and
to gguf-py (``gguf.quants``), which the tests check on random blocks and on every tensor of the real
models.

fp16 scales are converted to float32 exactly (IEEE half -> single is exact for every half value,
subnormals included), as ``GGML_FP16_TO_FP32`` does. Nothing is sanitised: a scale that is ±inf or
NaN propagates by IEEE rules (``inf * 0 = NaN``, ``inf * q = ±inf``, ``x - inf = -inf`` ...), exactly
as in ggml and gguf-py. A well-formed model never contains such scales; a corrupt one decodes to
inf/NaN weights rather than failing here (the model layer checks activations).

Quantization (``quantize``) is provided for the legacy 32-element types only, with the rounding of
ggml's ``quantize_row_*_ref`` (see the notes at :func:`quantize`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import NonFiniteQuantInput as NonFiniteQuantInput
from verispec.reference.errors import QuantSizeMismatch as QuantSizeMismatch
from verispec.reference.errors import UnsupportedQuantType

__all__ = [
    "GGMLType",
    "NonFiniteQuantInput",
    "QuantSizeMismatch",
    "SUPPORTED_DEQUANT",
    "SUPPORTED_QUANT",
    "block_layout",
    "dequantize",
    "quantize",
    "tensor_nbytes",
    "type_name",
]

U8 = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


class GGMLType(enum.IntEnum):
    """Every ggml tensor type id that a GGUF file may name (ggml.h ``enum ggml_type``).

    Ids 4, 5 (Q4_2, Q4_3), 31-33 and 36-38 (repacked layouts) were removed from ggml and are not
    valid in a file.
    """

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


QK_K = 256  # elements in a K-quant super-block
K_SCALE_SIZE = 12  # bytes of packed 6-bit scales and mins in Q4_K / Q5_K

# (elements per block, bytes per block) for every type (ggml's type_traits blck_size / type_size).
_LAYOUT: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 2 + 16),
    GGMLType.Q4_1: (32, 2 + 2 + 16),
    GGMLType.Q5_0: (32, 2 + 4 + 16),
    GGMLType.Q5_1: (32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: (32, 2 + 32),
    GGMLType.Q8_1: (32, 4 + 4 + 32),
    GGMLType.Q2_K: (QK_K, QK_K // 16 + QK_K // 4 + 2 + 2),
    GGMLType.Q3_K: (QK_K, QK_K // 8 + QK_K // 4 + 12 + 2),
    GGMLType.Q4_K: (QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 2),
    GGMLType.Q5_K: (QK_K, 2 + 2 + K_SCALE_SIZE + QK_K // 8 + QK_K // 2),
    GGMLType.Q6_K: (QK_K, QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),
    GGMLType.Q8_K: (QK_K, 4 + QK_K + QK_K // 8),
    GGMLType.IQ2_XXS: (QK_K, 2 + QK_K // 4),
    GGMLType.IQ2_XS: (QK_K, 2 + QK_K // 4 + QK_K // 32),
    GGMLType.IQ3_XXS: (QK_K, 2 + QK_K // 4 + QK_K // 8),
    GGMLType.IQ1_S: (QK_K, 2 + QK_K // 8 + QK_K // 16),
    GGMLType.IQ4_NL: (32, 2 + 16),
    GGMLType.IQ3_S: (QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    GGMLType.IQ2_S: (QK_K, 2 + QK_K // 4 + QK_K // 16),
    GGMLType.IQ4_XS: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (QK_K, 2 + 4 * 13),
    GGMLType.TQ2_0: (QK_K, 2 + 64),
    GGMLType.MXFP4: (32, 1 + 16),
    GGMLType.NVFP4: (64, 4 + 32),
    GGMLType.Q1_0: (128, 2 + 16),
}


def _known_type(ggml_type: int, tensor_name: str = "") -> GGMLType:
    try:
        return GGMLType(ggml_type)
    except ValueError:
        where = f" (tensor {tensor_name!r})" if tensor_name else ""
        raise UnsupportedQuantType(f"unknown ggml type id {ggml_type}{where}") from None


def type_name(ggml_type: int) -> str:
    """ggml's name for a type id (``"Q4_K"``); ``"type<N>"`` for an id ggml does not define."""
    try:
        return GGMLType(ggml_type).name
    except ValueError:
        return f"type{ggml_type}"


def block_layout(ggml_type: int) -> tuple[int, int]:
    """``(elements per block, bytes per block)`` of a ggml type; ``UnsupportedQuantType`` if unknown."""
    return _LAYOUT[_known_type(ggml_type)]


def tensor_nbytes(ggml_type: int, n_elements: int) -> int:
    """Bytes that ``n_elements`` values of ``ggml_type`` occupy (``n_elements`` a multiple of the block)."""
    block_elements, block_bytes = block_layout(ggml_type)
    if n_elements % block_elements:
        raise QuantSizeMismatch(
            f"{n_elements} elements is not a multiple of the {type_name(ggml_type)} block of {block_elements}"
        )
    return n_elements // block_elements * block_bytes


# ---------------------------------------------------------------------------------------------
# Field helpers: slice a byte field out of every block at once.
# ---------------------------------------------------------------------------------------------


def f16_at(blocks: U8, start: int) -> F32:
    """fp16 at byte ``start`` of every block -> float32 ``[n_blocks, 1]`` (exact conversion)."""
    half = np.ascontiguousarray(blocks[:, start : start + 2]).view("<f2")  # [n, 1]
    return half.astype(np.float32)


def low_high_nibbles(packed: U8) -> U8:
    """``[n, m]`` bytes -> ``[n, 2m]``: all low nibbles, then all high nibbles (ggml's qs order)."""
    return np.concatenate([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=-1)


def bits_lsb_first(packed: U8) -> U8:
    """``[n, m]`` bytes -> ``[n, 8m]`` bits, bit 0 of byte 0 first."""
    return np.unpackbits(packed, axis=-1, bitorder="little")


# ---------------------------------------------------------------------------------------------
# Plain float types.
# ---------------------------------------------------------------------------------------------


def _dequant_f32(blocks: U8) -> F32:
    # [n, 4] -> [n, 1]
    return np.ascontiguousarray(blocks).view("<f4").astype(np.float32)


def _dequant_f16(blocks: U8) -> F32:
    # [n, 2] -> [n, 1], exact (subnormals, inf and NaN payloads kept)
    return np.ascontiguousarray(blocks).view("<f2").astype(np.float32)


def _dequant_bf16(blocks: U8) -> F32:
    # [n, 2] -> [n, 1]: bf16 is the high half of an f32, so shift the bits into place (exact, NaN kept)
    bits = np.ascontiguousarray(blocks).view("<u2").astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32)


# ---------------------------------------------------------------------------------------------
# Q4_0: 32 weights, 18 bytes.          w = d * (q - 8),  q in 0..15
#
#   byte  0      2                                  18
#         +------+----------------------------------+
#         |  d   | qs[16]: lo nibble -> w[0..15]    |
#         | f16  |         hi nibble -> w[16..31]   |
#         +------+----------------------------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q4_0(blocks: U8) -> F32:
    d = f16_at(blocks, 0)  # [n, 1]
    q = low_high_nibbles(blocks[:, 2:18]).astype(np.int8) - np.int8(8)  # [n, 32]
    return np.asarray(d * q.astype(np.float32), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Q4_1: 32 weights, 20 bytes.          w = d * q + m,  q in 0..15
#
#   byte  0      2      4                           20
#         +------+------+---------------------------+
#         |  d   |  m   | qs[16]: lo -> w[0..15]    |
#         | f16  | f16  |         hi -> w[16..31]   |
#         +------+------+---------------------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q4_1(blocks: U8) -> F32:
    d = f16_at(blocks, 0)  # [n, 1]
    m = f16_at(blocks, 2)  # [n, 1]
    q = low_high_nibbles(blocks[:, 4:20]).astype(np.float32)  # [n, 32]
    return np.asarray(d * q + m, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Q5_0: 32 weights, 22 bytes.          w = d * (q - 16),  q = lo4 | hi1 << 4 in 0..31
#
#   byte  0      2             6                    22
#         +------+-------------+--------------------+
#         |  d   | qh: u32 LE  | qs[16]: lo nibble  |
#         | f16  | bit j = 5th | -> w[0..15], hi    |
#         |      | bit of w[j] | -> w[16..31]       |
#         +------+-------------+--------------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q5_0(blocks: U8) -> F32:
    d = f16_at(blocks, 0)  # [n, 1]
    high = bits_lsb_first(blocks[:, 2:6])  # [n, 32]
    q = (low_high_nibbles(blocks[:, 6:22]) | (high << np.uint8(4))).astype(np.int8) - np.int8(16)
    return np.asarray(d * q.astype(np.float32), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Q5_1: 32 weights, 24 bytes.          w = d * q + m,  q = lo4 | hi1 << 4 in 0..31
#
#   byte  0      2      4             8             24
#         +------+------+-------------+-------------+
#         |  d   |  m   | qh: u32 LE  | qs[16]      |
#         | f16  | f16  | (as Q5_0)   | (as Q5_0)   |
#         +------+------+-------------+-------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q5_1(blocks: U8) -> F32:
    d = f16_at(blocks, 0)  # [n, 1]
    m = f16_at(blocks, 2)  # [n, 1]
    high = bits_lsb_first(blocks[:, 4:8])  # [n, 32]
    q = (low_high_nibbles(blocks[:, 8:24]) | (high << np.uint8(4))).astype(np.float32)
    return np.asarray(d * q + m, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Q8_0: 32 weights, 34 bytes.          w = d * q,  q int8
#
#   byte  0      2                                  34
#         +------+----------------------------------+
#         |  d   | qs[32]: int8, w[j] = d * qs[j]   |
#         +------+----------------------------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q8_0(blocks: U8) -> F32:
    d = f16_at(blocks, 0)  # [n, 1]
    q = np.ascontiguousarray(blocks[:, 2:34]).view(np.int8).astype(np.float32)  # [n, 32]
    return np.asarray(q * d, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Q2_K: 256 weights, 84 bytes; 16 sub-blocks of 16.
#       w = (d * sc_lo4) * q - (dmin * sc_hi4),  q in 0..3
#
#   byte  0                16                               80     82     84
#         +----------------+--------------------------------+------+------+
#         | scales[16]     | qs[64]: 2-bit q, see below     |  d   | dmin |
#         | lo4 = scale    |                                | f16  | f16  |
#         | hi4 = min      |                                |      |      |
#         +----------------+--------------------------------+------+------+
#   qs: two halves of 32 bytes, each covering 128 weights: weight 32*s + l of the half is
#   bits (2s, 2s+1) of byte l, s = 0..3.  Sub-block i holds weights 16i .. 16i+15.
# ---------------------------------------------------------------------------------------------


def _dequant_q2_k(blocks: U8) -> F32:
    n = blocks.shape[0]
    scales = blocks[:, 0:16]  # [n, 16]
    d = f16_at(blocks, 80)  # [n, 1]
    dmin = f16_at(blocks, 82)  # [n, 1]
    dl = (d * (scales & np.uint8(0x0F)).astype(np.float32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> np.uint8(4)).astype(np.float32)).reshape(n, 16, 1)
    qs = blocks[:, 16:80].reshape(n, 2, 1, 32)  # [n, half, 1, byte]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q = ((qs >> shifts) & np.uint8(3)).reshape(n, 16, 16).astype(np.float32)  # [n, sub, 16]
    return np.asarray(dl * q - ml, dtype=np.float32).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------------
# Q3_K: 256 weights, 110 bytes; 16 sub-blocks of 16.
#       w = (d * (sc - 32)) * (q_lo2 - (hbit ? 0 : 4)),  sc 6-bit
#
#   byte  0             32                      96              108    110
#         +-------------+-----------------------+----------------+------+
#         | hmask[32]   | qs[64]: 2-bit low q   | scales[12]     |  d   |
#         | bit b of    | (layout as Q2_K)      | 16 x 6 bits    | f16  |
#         | byte l ->   |                       | (map below)    |      |
#         | w[32b + l]  |                       |                |      |
#         +-------------+-----------------------+----------------+------+
#   scales: byte k in 0..7: lo4 = low bits of scale k, hi4 = low bits of scale k+8;
#           byte 8+k in 0..3: bits (2j, 2j+1) = high 2 bits of scale k + 4j.
# ---------------------------------------------------------------------------------------------


def _dequant_q3_k(blocks: U8) -> F32:
    n = blocks.shape[0]
    hmask = blocks[:, 0:32]
    qs = blocks[:, 32:96]
    packed = blocks[:, 96:108]
    d = f16_at(blocks, 108)  # [n, 1]
    low4 = low_high_nibbles(packed[:, 0:8])  # [n, 16]: scales 0..7, then 8..15
    high2 = packed[:, 8:12].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)
    high2 = (high2 & np.uint8(3)).reshape(n, 16)  # [n, 16]: scale k + 4j at index 4j + k
    scales = (low4 | (high2 << np.uint8(4))).astype(np.int8) - np.int8(32)  # [n, 16]
    dl = (d * scales.astype(np.float32)).reshape(n, 16, 1)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    low = ((qs.reshape(n, 2, 1, 32) >> shifts) & np.uint8(3)).reshape(n, 16, 16)
    hbit = bits_by_plane(hmask).reshape(n, 16, 16)
    q = low.astype(np.int8) - ((hbit ^ np.uint8(1)) << np.uint8(2)).astype(np.int8)  # [n, 16, 16]
    return np.asarray(dl * q.astype(np.float32), dtype=np.float32).reshape(n, QK_K)


def bits_by_plane(mask: U8) -> U8:
    """``[n, 32]`` bytes -> ``[n, 256]``: bit b of byte l lands at index 32*b + l."""
    n = mask.shape[0]
    planes = mask.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    return (planes & np.uint8(1)).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------------
# Q4_K: 256 weights, 144 bytes; 8 sub-blocks of 32.
#       w = (d * sc) * q - (dmin * mn),  q in 0..15, sc/mn 6-bit
#
#   byte  0      2      4               16                                  144
#         +------+------+---------------+-----------------------------------+
#         |  d   | dmin | scales[12]    | qs[128]: four chunks of 32 bytes; |
#         | f16  | f16  | 8 sc + 8 mn,  | chunk c: lo nibble -> sub 2c,     |
#         |      |      | 6 bits each   |          hi nibble -> sub 2c+1    |
#         +------+------+---------------+-----------------------------------+
#   scales (6-bit sc[j], mn[j], j = 0..7):
#     j < 4:  sc = b[j] & 63,                     mn = b[j+4] & 63
#     j >= 4: sc = (b[j+4] & 15) | (b[j-4] >> 6) << 4,  mn = (b[j+4] >> 4) | (b[j] >> 6) << 4
# ---------------------------------------------------------------------------------------------


def k_scales_mins(packed: U8) -> tuple[U8, U8]:
    """Unpack Q4_K/Q5_K's 12 bytes into 8 six-bit scales and 8 six-bit mins, each ``[n, 8]``."""
    lo = packed[:, 0:4]  # scales 0..3 (low 6 bits), high 2 bits of scales 4..7
    mid = packed[:, 4:8]  # mins 0..3 (low 6 bits), high 2 bits of mins 4..7
    hi = packed[:, 8:12]  # low 4 bits of scales 4..7 (lo nibble) and mins 4..7 (hi nibble)
    six = np.uint8(0x3F)
    scales = np.concatenate([lo & six, (hi & np.uint8(0x0F)) | ((lo >> np.uint8(6)) << np.uint8(4))], axis=-1)
    mins = np.concatenate([mid & six, (hi >> np.uint8(4)) | ((mid >> np.uint8(6)) << np.uint8(4))], axis=-1)
    return scales, mins


def _dequant_q4_k(blocks: U8) -> F32:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)  # [n, 1]
    dmin = f16_at(blocks, 2)  # [n, 1]
    sc, mn = k_scales_mins(blocks[:, 4:16])  # [n, 8] each
    d_sub = (d * sc.astype(np.float32)).reshape(n, 8, 1)
    m_sub = (dmin * mn.astype(np.float32)).reshape(n, 8, 1)
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    q = (qs & np.uint8(0x0F)).reshape(n, 8, 32).astype(np.float32)  # [n, sub, 32]
    return np.asarray(d_sub * q - m_sub, dtype=np.float32).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------------
# Q5_K: 256 weights, 176 bytes; 8 sub-blocks of 32.
#       w = (d * sc) * (q_lo4 | hbit << 4) - (dmin * mn)
#
#   byte  0      2      4               16             48                     176
#         +------+------+---------------+--------------+----------------------+
#         |  d   | dmin | scales[12]    | qh[32]: bit  | qs[128]: low nibbles |
#         | f16  | f16  | (as Q4_K)     | s of byte l  | (layout as Q4_K)     |
#         |      |      |               | -> sub s, l  |                      |
#         +------+------+---------------+--------------+----------------------+
# ---------------------------------------------------------------------------------------------


def _dequant_q5_k(blocks: U8) -> F32:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    dmin = f16_at(blocks, 2)
    sc, mn = k_scales_mins(blocks[:, 4:16])
    d_sub = (d * sc.astype(np.float32)).reshape(n, 8, 1)
    m_sub = (dmin * mn.astype(np.float32)).reshape(n, 8, 1)
    qs = blocks[:, 48:176].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (qs & np.uint8(0x0F)).reshape(n, 8, 32)
    high = bits_by_plane(blocks[:, 16:48]).reshape(n, 8, 32)
    q = (low | (high << np.uint8(4))).astype(np.float32)  # [n, sub, 32]
    return np.asarray(d_sub * q - m_sub, dtype=np.float32).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------------
# Q6_K: 256 weights, 210 bytes; 16 sub-blocks of 16.
#       w = (d * sc) * (q - 32),  q = lo4 | hi2 << 4 in 0..63, sc int8
#
#   byte  0                       128              192            208    210
#         +-----------------------+----------------+--------------+------+
#         | ql[128]: low nibbles  | qh[64]: high   | scales[16]   |  d   |
#         |                       | 2-bit pairs    | int8         | f16  |
#         +-----------------------+----------------+--------------+------+
#   Two halves of 128 weights (ql 64 bytes, qh 32 bytes each). In a half, weight 32*s + l:
#     low nibble = ql[l + 32*(s & 1)] >> 4*(s >> 1) & 15,   high = qh[l] >> 2s & 3.
# ---------------------------------------------------------------------------------------------


def _dequant_q6_k(blocks: U8) -> F32:
    n = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    low = (ql & np.uint8(0x0F)).reshape(n, 2, 4, 32)  # [n, half, s, l]
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh & np.uint8(3)).reshape(n, 2, 4, 32)
    q = (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)
    scales = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)  # [n, 16]
    d = f16_at(blocks, 208)  # [n, 1]
    d_sub = (d * scales).reshape(n, 16, 1)
    return np.asarray(d_sub * q.reshape(n, 16, 16).astype(np.float32), dtype=np.float32).reshape(n, QK_K)


# ---------------------------------------------------------------------------------------------
# Dispatch.
# ---------------------------------------------------------------------------------------------

_Decoder = Callable[[U8], F32]

_DECODERS: dict[GGMLType, _Decoder] = {
    GGMLType.F32: _dequant_f32,
    GGMLType.F16: _dequant_f16,
    GGMLType.BF16: _dequant_bf16,
    GGMLType.Q4_0: _dequant_q4_0,
    GGMLType.Q4_1: _dequant_q4_1,
    GGMLType.Q5_0: _dequant_q5_0,
    GGMLType.Q5_1: _dequant_q5_1,
    GGMLType.Q8_0: _dequant_q8_0,
    GGMLType.Q2_K: _dequant_q2_k,
    GGMLType.Q3_K: _dequant_q3_k,
    GGMLType.Q4_K: _dequant_q4_k,
    GGMLType.Q5_K: _dequant_q5_k,
    GGMLType.Q6_K: _dequant_q6_k,
}

SUPPORTED_DEQUANT: frozenset[int] = frozenset(int(t) for t in _DECODERS)

# Decode this many bytes' worth of blocks at a time: bounds the temporaries (a few times the chunk)
# and keeps them in cache; the result is the same as decoding all blocks at once.
_CHUNK_BYTES = 1 << 20


def _unsupported(ggml_type: int, tensor_name: str, what: str) -> UnsupportedQuantType:
    where = f" of tensor {tensor_name!r}" if tensor_name else ""
    return UnsupportedQuantType(f"cannot {what} ggml type {type_name(ggml_type)} (id {ggml_type}){where}")


def dequantize(raw: U8, ggml_type: int, n_elements: int, *, tensor_name: str = "") -> F32:
    """Decode ``n_elements`` values of ``ggml_type`` from ``raw`` bytes into a flat float32 array.

    ``raw`` is a 1-D uint8 array of exactly ``n_elements / block_elements * block_bytes`` bytes
    (a zero-copy view into a GGUF file is fine; it is never written). Returns a new
    ``float32[n_elements]`` array bit-identical to ggml's ``dequantize_row_*``.
    Raises ``UnsupportedQuantType`` (naming the type and ``tensor_name``) for types not in
    :data:`SUPPORTED_DEQUANT`, and :class:`QuantSizeMismatch` when the sizes do not agree.
    """
    kind = _known_type(ggml_type, tensor_name)
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise _unsupported(ggml_type, tensor_name, "dequantize")
    block_elements, block_bytes = _LAYOUT[kind]
    where = f" (tensor {tensor_name!r})" if tensor_name else ""
    if n_elements < 0 or n_elements % block_elements:
        raise QuantSizeMismatch(
            f"{n_elements} elements is not a multiple of the {kind.name} block of {block_elements}{where}"
        )
    n_blocks = n_elements // block_elements
    flat = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if flat.size != n_blocks * block_bytes:
        raise QuantSizeMismatch(
            f"{kind.name}: {n_elements} elements need {n_blocks * block_bytes} bytes, got {flat.size}{where}"
        )
    blocks = flat.reshape(n_blocks, block_bytes)  # [n_blocks, block_bytes]
    out = np.empty((n_blocks, block_elements), dtype=np.float32)  # [n_blocks, block_elements]
    step = max(1, _CHUNK_BYTES // block_bytes)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales propagate silently, as in C
        for start in range(0, n_blocks, step):
            out[start : start + step] = decoder(blocks[start : start + step])
    return out.reshape(n_elements)


# ---------------------------------------------------------------------------------------------
# Quantization (legacy 32-element types), with the rounding of ggml's quantize_row_*_ref:
#
#   Q4_0 / Q5_0 (symmetric): max = the first value of largest |x| (+0.0 when the block is all
#       zeros), d = max / -8 (-16), id = 1/d (0 if d == 0), q = min(15 (31), trunc(x*id + 8.5 (16.5))).
#   Q4_1 / Q5_1 (affine): min/max = first occurrence of the smallest/largest value,
#       d = (max - min) / 15 (31), id as above, q = min(15 (31), trunc((x - min)*id + 0.5)), m = min.
#   Q8_0: amax = max |x|, d = amax / 127, id as above, q = roundf(x * id) (half away from zero).
#   Scales are stored with round-to-nearest-even fp32 -> fp16 (GGML_FP32_TO_FP16; overflow -> inf).
#
# All arithmetic is float32, as in C. The inputs must be finite; for finite inputs the quantities
# x*id + 8.5 etc. stay inside the integer range the C casts assume, except when 1/d overflows
# (block extreme below ~1e-37 in magnitude), where ggml's float -> int cast is undefined
# behaviour. There we take the limit: a zero times id = inf is 0 (the level of 0.0), a non-zero one
# is +-inf and clamps to the extreme level. (d itself is then 0 in fp16, so the block decodes to
# its offset m, or to zeros.)
#
# gguf-py (gguf/quants.py) vectorises the same formulas and gives the same bytes on finite input
# (tests/test_quants.py checks it), with these differences from ggml, which we follow:
#   - extremes that are zeros: ggml keeps max = +0.0 for an all-zero Q4_0/Q5_0 block (d = -0.0),
#     gguf-py uses x[argmax |x|], so a block starting with -0.0 gets d = +0.0; for Q4_1/Q5_1 ggml
#     keeps the first of equal extremes, gguf-py whichever zero numpy's min/max returns;
#   - Q5_1: ggml has no MIN(31, ...) on the level, gguf-py clips; x*id + 0.5 < 32 always, so moot;
#   - non-finite input: undefined in ggml, arbitrary in gguf-py, refused here.
# ---------------------------------------------------------------------------------------------


def _first_at(values: F32, index: npt.NDArray[np.intp]) -> F32:
    """``values[b, index[b]]`` for every block b, as ``[n, 1]``."""
    return np.asarray(np.take_along_axis(values, index[:, None], axis=1), dtype=np.float32)


def _reciprocal(d: F32) -> F32:
    """ggml's ``id = d ? 1.0f/d : 0.0f`` in float32."""
    with np.errstate(divide="ignore", over="ignore"):
        safe = np.where(d == 0, np.float32(1), d)
        return np.asarray(np.where(d == 0, np.float32(0), np.float32(1) / safe), dtype=np.float32)


def _scaled(values: F32, inv: F32) -> F32:
    """``values * id`` in float32, with ``0 * inf`` taken as 0 (see the note on overflowing id)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(np.where(values == 0, np.float32(0), values * inv), dtype=np.float32)


def _trunc_to_level(scaled: F32, offset: float, top: int) -> U8:
    """``min(top, trunc(scaled + offset))`` as in ``MIN(top, (int8_t)(x + offset))``, clamped at 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = np.asarray(scaled + np.float32(offset), dtype=np.float32)
        return np.clip(np.trunc(shifted), 0, top).astype(np.uint8)  # clip maps +-inf to the ends


def _symmetric_scale(blocks: F32, levels_below_zero: int) -> tuple[F32, F32]:
    """Q4_0/Q5_0: ``(d, id)`` per block, ``[n, 1]`` each, with d = max / -levels."""
    magnitude = np.abs(blocks)
    first_max = _first_at(blocks, np.argmax(magnitude, axis=1))  # first value of largest |x|
    first_max = np.where(first_max == 0, np.float32(0.0), first_max)  # ggml keeps max = +0.0 then
    d = np.asarray(first_max / np.float32(-levels_below_zero), dtype=np.float32)
    return d, _reciprocal(d)


def _affine_scale(blocks: F32, levels: int) -> tuple[F32, F32, F32]:
    """Q4_1/Q5_1: ``(d, id, min)`` per block, ``[n, 1]`` each, with d = (max - min) / levels."""
    low = _first_at(blocks, np.argmin(blocks, axis=1))
    high = _first_at(blocks, np.argmax(blocks, axis=1))
    d = np.asarray((high - low) / np.float32(levels), dtype=np.float32)
    return d, _reciprocal(d), low


def _half_bytes(values: F32) -> U8:
    """float32 ``[n, 1]`` -> fp16 little-endian bytes ``[n, 2]`` (round to nearest even, overflow -> inf)."""
    with np.errstate(over="ignore"):
        return values.astype("<f2").view(np.uint8)


def _pack_nibbles(q: U8) -> U8:
    """``[n, 32]`` levels -> ``[n, 16]`` bytes: q[j] low nibble, q[j+16] high nibble."""
    return (q[:, :16] & np.uint8(0x0F)) | ((q[:, 16:] & np.uint8(0x0F)) << np.uint8(4))


def _pack_fifth_bits(q: U8) -> U8:
    """``[n, 32]`` levels -> ``[n, 4]``: the u32 LE whose bit j is bit 4 of q[j]."""
    return np.packbits((q >> np.uint8(4)) & np.uint8(1), axis=1, bitorder="little")


def _quant_q4_0(blocks: F32) -> U8:
    d, inv = _symmetric_scale(blocks, 8)
    q = _trunc_to_level(_scaled(blocks, inv), 8.5, 15)
    return np.concatenate([_half_bytes(d), _pack_nibbles(q)], axis=1)


def _quant_q4_1(blocks: F32) -> U8:
    d, inv, low = _affine_scale(blocks, 15)
    q = _trunc_to_level(_scaled(blocks - low, inv), 0.5, 15)
    return np.concatenate([_half_bytes(d), _half_bytes(low), _pack_nibbles(q)], axis=1)


def _quant_q5_0(blocks: F32) -> U8:
    d, inv = _symmetric_scale(blocks, 16)
    q = _trunc_to_level(_scaled(blocks, inv), 16.5, 31)
    return np.concatenate([_half_bytes(d), _pack_fifth_bits(q), _pack_nibbles(q)], axis=1)


def _quant_q5_1(blocks: F32) -> U8:
    d, inv, low = _affine_scale(blocks, 31)
    q = _trunc_to_level(_scaled(blocks - low, inv), 0.5, 31)
    return np.concatenate([_half_bytes(d), _half_bytes(low), _pack_fifth_bits(q), _pack_nibbles(q)], axis=1)


def _quant_q8_0(blocks: F32) -> U8:
    amax = np.asarray(np.max(np.abs(blocks), axis=1, keepdims=True), dtype=np.float32)
    d = np.asarray(amax / np.float32(127), dtype=np.float32)
    scaled = _scaled(blocks, _reciprocal(d))
    scaled = np.clip(scaled, np.float32(-127), np.float32(127))  # only bites when id overflowed
    # roundf (half away from zero), exactly: |x| = f + r with f = floor|x|, r in [0, 1) exact, and
    # 2r exact, so floor(2r) is 1 iff r >= 0.5. (floor(|x| + 0.5) would round 0.49999997 up.)
    magnitude = np.abs(scaled)
    whole = np.floor(magnitude)
    rounded = np.sign(scaled) * (whole + np.floor(np.float32(2) * (magnitude - whole)))
    q = np.clip(rounded, -128, 127).astype(np.int8).view(np.uint8)
    return np.concatenate([_half_bytes(d), q], axis=1)


_ENCODERS: dict[GGMLType, Callable[[F32], U8]] = {
    GGMLType.Q4_0: _quant_q4_0,
    GGMLType.Q4_1: _quant_q4_1,
    GGMLType.Q5_0: _quant_q5_0,
    GGMLType.Q5_1: _quant_q5_1,
    GGMLType.Q8_0: _quant_q8_0,
}

SUPPORTED_QUANT: frozenset[int] = frozenset(int(t) for t in _ENCODERS)


def quantize(values: npt.NDArray[np.float32], ggml_type: int) -> U8:
    """Encode finite float32 ``values`` (any shape, size a multiple of 32) as ``ggml_type`` blocks.

    Returns the flat uint8 bytes, block after block, bit-identical to ggml's
    ``quantize_row_*_ref`` for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0. Raises ``UnsupportedQuantType``
    for any other type, :class:`QuantSizeMismatch` if the size is not a whole number of blocks and
    :class:`NonFiniteQuantInput` (a ValueError too) if a value is NaN or inf.

    gguf-py's ``quantize`` gives the same bytes except where a block's extreme is a zero whose sign
    matters (ggml starts from ``max = +0.0`` and keeps the first strict extreme; gguf-py takes
    ``x[argmax |x|]`` or numpy's max/min), e.g. an all-zero Q4_0 block starting with -0.0: ggml and
    we store d = -0.0, gguf-py +0.0. Both decode to zeros.
    """
    kind = _known_type(ggml_type)
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise _unsupported(ggml_type, "", "quantize")
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    block_elements, block_bytes = _LAYOUT[kind]
    if flat.size % block_elements:
        raise QuantSizeMismatch(f"{flat.size} values is not a multiple of the {kind.name} block of {block_elements}")
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size:
        raise NonFiniteQuantInput(
            f"quantize({kind.name}): values must be finite; value {flat[bad[0]]} at index {bad[0]} is not"
        )
    blocks = flat.reshape(-1, block_elements)  # [n_blocks, 32]
    out = encoder(blocks)  # [n_blocks, block_bytes]
    assert out.shape == (blocks.shape[0], block_bytes)
    return np.ascontiguousarray(out, dtype=np.uint8).reshape(-1)
