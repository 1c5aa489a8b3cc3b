"""reference/quants.py against gguf-py (the oracle) and against hand-worked blocks.

Dequantization: bit-exact (compared as uint32 bit patterns, NaN payloads included) with
``gguf.quants.dequantize`` on Hypothesis-generated raw blocks whose fp16 scales are often zero,
subnormal, +-inf or NaN. Quantization: bit-exact with ``gguf.quants.quantize`` for the five legacy
types on finite inputs, plus hand-derived bytes where gguf-py and ggml's quantize_row_*_ref differ.
"""

from __future__ import annotations

import struct

import gguf
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference import quants
from verispec.reference.errors import GGUFError, UnsupportedQuantType
from verispec.reference.quants import GGMLType

pytestmark = pytest.mark.oracle

# Byte offsets of every fp16 scale inside a block, per type (from ggml-common.h's block structs).
SCALE_OFFSETS: dict[GGMLType, tuple[int, ...]] = {
    GGMLType.Q4_0: (0,),
    GGMLType.Q4_1: (0, 2),
    GGMLType.Q5_0: (0,),
    GGMLType.Q5_1: (0, 2),
    GGMLType.Q8_0: (0,),
    GGMLType.Q2_K: (80, 82),
    GGMLType.Q3_K: (108,),
    GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2),
    GGMLType.Q6_K: (208,),
}

DEQUANT_TYPES = [
    GGMLType.F32,
    GGMLType.F16,
    GGMLType.BF16,
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
    GGMLType.Q8_0,
    GGMLType.Q2_K,
    GGMLType.Q3_K,
    GGMLType.Q4_K,
    GGMLType.Q5_K,
    GGMLType.Q6_K,
]
QUANT_TYPES = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0]

# fp16 bit patterns worth a scale: zeros, subnormals, the largest finite, infinities, NaNs.
SPECIAL_HALVES = [
    0x0000,
    0x8000,  # +-0
    0x0001,
    0x8001,
    0x03FF,
    0x0200,  # subnormals (smallest, negative, largest, middle)
    0x0400,
    0x3C00,
    0xBC00,
    0x7BFF,
    0xFBFF,  # smallest normal, +-1, +-max finite
    0x7C00,
    0xFC00,  # +-inf
    0x7E00,
    0xFE00,
    0x7C01,
    0x7FFF,
    0xFD55,  # quiet and signalling NaNs with payloads
]


def oracle_dequantize(raw: npt.NDArray[np.uint8], kind: GGMLType) -> npt.NDArray[np.float32]:
    block_elements, block_bytes = quants.block_layout(kind)
    blocks = raw.reshape(-1, block_bytes)
    with np.errstate(all="ignore"):
        out = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType(int(kind)))
    return np.asarray(out, dtype=np.float32).reshape(-1)


def assert_same_bits(ours: npt.NDArray[np.float32], theirs: npt.NDArray[np.float32]) -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    diff = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    assert diff.size == 0, f"{diff.size} values differ, first at {diff[0]}: {ours[diff[0]]!r} vs {theirs[diff[0]]!r}"


# ---------------------------------------------------------------------------------------------
# Tables: ids and block layouts agree with gguf-py's constants.
# ---------------------------------------------------------------------------------------------


def test_type_ids_match_gguf_py() -> None:
    ours = {t.name: t.value for t in GGMLType}
    theirs = {t.name: t.value for t in gguf.GGMLQuantizationType}
    assert ours == theirs


def test_block_layouts_match_gguf_py() -> None:
    for kind in gguf.GGMLQuantizationType:
        assert quants.block_layout(int(kind)) == gguf.GGML_QUANT_SIZES[kind], kind.name


def test_supported_sets() -> None:
    assert quants.SUPPORTED_DEQUANT == frozenset(int(t) for t in DEQUANT_TYPES)
    assert quants.SUPPORTED_QUANT == frozenset(int(t) for t in QUANT_TYPES)
    assert quants.type_name(12) == "Q4_K" and quants.type_name(4) == "type4"


# ---------------------------------------------------------------------------------------------
# Dequantize: random blocks with hostile scales, bit-exact against gguf-py.
# ---------------------------------------------------------------------------------------------


@st.composite
def raw_blocks(draw: st.DrawFn, kind: GGMLType) -> npt.NDArray[np.uint8]:
    """1..6 random blocks of ``kind``; each fp16 scale is a special value about half the time."""
    _, block_bytes = quants.block_layout(kind)
    n_blocks = draw(st.integers(1, 6))
    raw = bytearray(draw(st.binary(min_size=n_blocks * block_bytes, max_size=n_blocks * block_bytes)))
    halves = st.one_of(st.sampled_from(SPECIAL_HALVES), st.integers(0, 0xFFFF))
    if kind in (GGMLType.F16, GGMLType.BF16):  # every element is a "scale"
        for i in range(0, len(raw), 2):
            raw[i : i + 2] = struct.pack("<H", draw(halves))
    for b in range(n_blocks):
        for offset in SCALE_OFFSETS.get(kind, ()):
            at = b * block_bytes + offset
            raw[at : at + 2] = struct.pack("<H", draw(halves))
    return np.frombuffer(bytes(raw), dtype=np.uint8)


@pytest.mark.parametrize("kind", DEQUANT_TYPES, ids=lambda k: k.name)
@settings(max_examples=examples(100))
@given(data=st.data())
def test_dequantize_bit_exact_vs_gguf_py(kind: GGMLType, data: st.DataObject) -> None:
    raw = data.draw(raw_blocks(kind))
    block_elements, block_bytes = quants.block_layout(kind)
    n_elements = raw.size // block_bytes * block_elements
    with np.errstate(all="ignore"):
        ours = quants.dequantize(raw, kind, n_elements)
    assert_same_bits(ours, oracle_dequantize(raw, kind))


def test_dequantize_chunking_does_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=144 * 37, dtype=np.uint8)
    raw.reshape(37, 144)[:, 0:4] = np.frombuffer(struct.pack("<2e", 0.01, 0.002) * 37, np.uint8).reshape(37, 4)
    whole = quants.dequantize(raw, GGMLType.Q4_K, 256 * 37)
    monkeypatch.setattr(quants, "_CHUNK_BYTES", 144 * 5)  # 5 blocks per chunk, last one partial
    assert_same_bits(quants.dequantize(raw, GGMLType.Q4_K, 256 * 37), whole)


# ---------------------------------------------------------------------------------------------
# Dequantize: what special scales do, worked by hand (ggml semantics: exact fp16 -> fp32, IEEE).
# ---------------------------------------------------------------------------------------------


def q8_0_block(d_bits: int, qs: list[int]) -> npt.NDArray[np.uint8]:
    return np.frombuffer(struct.pack("<H32b", d_bits, *qs), dtype=np.uint8)


def test_subnormal_scale_is_converted_exactly() -> None:
    # d = 0x0001 = 2^-24 (smallest fp16 subnormal); w = q * 2^-24 exactly in float32.
    qs = list(range(-16, 16))
    out = quants.dequantize(q8_0_block(0x0001, qs), GGMLType.Q8_0, 32)
    assert out.tolist() == [q * 2.0**-24 for q in qs]


def test_infinite_scale_propagates() -> None:
    # d = +inf: q > 0 -> +inf, q < 0 -> -inf, q == 0 -> inf * 0 = NaN (IEEE), as in ggml.
    qs = [1, -1, 0] + [2] * 29
    out = quants.dequantize(q8_0_block(0x7C00, qs), GGMLType.Q8_0, 32)
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


def test_nan_scale_gives_nan_weights() -> None:
    out = quants.dequantize(q8_0_block(0x7E00, [3] * 32), GGMLType.Q8_0, 32)
    assert np.isnan(out).all()


def test_q4_1_min_adds_after_scaling() -> None:
    # d = 0.5, m = -1: nibble q -> 0.5*q - 1. qs byte 0x21: w[0] = lo 1 -> -0.5, w[16] = hi 2 -> 0.
    raw = np.frombuffer(struct.pack("<ee", 0.5, -1.0) + bytes([0x21] + [0] * 15), dtype=np.uint8)
    out = quants.dequantize(raw, GGMLType.Q4_1, 32)
    assert out[0] == -0.5 and out[16] == 0.0 and out[1] == -1.0


def test_q5_0_high_bits() -> None:
    # qh bit j set -> q[j] gets +16; d = 1: w = q - 16. Bit 0 and bit 17 set, all nibbles 0.
    raw = np.frombuffer(struct.pack("<eI", 1.0, (1 << 0) | (1 << 17)) + bytes(16), dtype=np.uint8)
    out = quants.dequantize(raw, GGMLType.Q5_0, 32)
    expected = [-16.0] * 32
    expected[0] = 0.0
    expected[17] = 0.0
    assert out.tolist() == expected


# ---------------------------------------------------------------------------------------------
# Dequantize: errors.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [GGMLType.IQ2_XXS, GGMLType.TQ1_0, GGMLType.MXFP4, GGMLType.Q8_K, GGMLType.I32])
def test_unsupported_type_names_type_and_tensor(kind: GGMLType) -> None:
    block_elements, block_bytes = quants.block_layout(kind)
    with pytest.raises(UnsupportedQuantType) as err:
        quants.dequantize(np.zeros(block_bytes, np.uint8), kind, block_elements, tensor_name="blk.3.ffn_up.weight")
    assert kind.name in str(err.value) and "blk.3.ffn_up.weight" in str(err.value)


def test_unknown_type_id() -> None:
    with pytest.raises(UnsupportedQuantType, match="99"):
        quants.dequantize(np.zeros(4, np.uint8), 99, 1, tensor_name="t")
    with pytest.raises(UnsupportedQuantType):
        quants.block_layout(4)  # Q4_2, removed from ggml


def test_size_mismatch() -> None:
    with pytest.raises(GGUFError, match="34"):
        quants.dequantize(np.zeros(33, np.uint8), GGMLType.Q8_0, 32)
    with pytest.raises(GGUFError, match="multiple"):
        quants.dequantize(np.zeros(34, np.uint8), GGMLType.Q8_0, 31)


# ---------------------------------------------------------------------------------------------
# Quantize: bit-exact vs gguf-py on finite inputs; hand-derived bytes where they differ.
# ---------------------------------------------------------------------------------------------


def oracle_quantize(values: npt.NDArray[np.float32], kind: GGMLType) -> npt.NDArray[np.uint8]:
    with np.errstate(all="ignore"):
        out = gguf.quants.quantize(values.reshape(-1, 32), gguf.GGMLQuantizationType(int(kind)))
    return np.asarray(out, dtype=np.uint8).reshape(-1)


# Finite float32 values; magnitudes below 1e-30 become 0 so that 1/d cannot overflow (there ggml's
# float -> int8 cast is undefined behaviour). Ties, repeats and exact block extremes come from the
# small-integer branch.
_element = st.one_of(
    st.floats(-1e6, 1e6, width=32, allow_subnormal=False).map(lambda x: x if abs(x) >= 1e-30 else 0.0),
    st.integers(-16, 16).map(float),
    st.integers(-64, 64).map(lambda k: k / 4),
)


@st.composite
def float_blocks(draw: st.DrawFn) -> npt.NDArray[np.float32]:
    n_blocks = draw(st.integers(1, 5))
    values = draw(st.lists(_element, min_size=32 * n_blocks, max_size=32 * n_blocks))
    array = np.array(values, dtype=np.float32)
    # Signed zeros: gguf-py picks the block extreme differently from ggml when the extreme is a
    # zero (see test_signed_zero_blocks_follow_ggml), so the comparison uses +0.0 only.
    return np.where(array == 0, np.float32(0.0), array)


@pytest.mark.parametrize("kind", QUANT_TYPES, ids=lambda k: k.name)
@settings(max_examples=examples(120))
@given(values=float_blocks())
def test_quantize_bit_exact_vs_gguf_py(kind: GGMLType, values: npt.NDArray[np.float32]) -> None:
    ours = quants.quantize(values, kind)
    assert ours.tobytes() == oracle_quantize(values, kind).tobytes()


@pytest.mark.parametrize("kind", QUANT_TYPES, ids=lambda k: k.name)
@settings(max_examples=examples(60))
@given(values=float_blocks())
def test_quantize_round_trip_error_is_at_most_one_step(kind: GGMLType, values: npt.NDArray[np.float32]) -> None:
    raw = quants.quantize(values, kind)
    with np.errstate(all="ignore"):
        back = quants.dequantize(raw, kind, values.size).reshape(-1, 32)
    blocks = values.reshape(-1, 32).astype(np.float64)
    d = np.abs(raw.reshape(blocks.shape[0], -1)[:, 0:2].copy().view("<f2").astype(np.float64))  # [n, 1]
    finite = np.isfinite(d[:, 0])  # d (or m) overflowed fp16 for huge blocks: nothing to bound
    if kind in (GGMLType.Q4_1, GGMLType.Q5_1):
        m = raw.reshape(blocks.shape[0], -1)[:, 2:4].copy().view("<f2").astype(np.float64)
        finite &= np.isfinite(m[:, 0])
    spread = np.max(np.abs(blocks), axis=1, keepdims=True)
    # One quantization step, plus what fp16 rounding of d (and of m) can shift by (2^-11 relative).
    bound = d * 1.0001 + spread * 2.0**-10 + 1e-30
    err = np.abs(back.astype(np.float64) - blocks)
    assert np.all((err <= bound)[finite])


def test_q8_0_hand_worked() -> None:
    # amax = 127 -> d = 1 (fp16 0x3C00), id = 1; roundf rounds halves away from zero.
    x = np.zeros(32, np.float32)
    x[:6] = [127, -127, 63.5, 0.5, -0.5, -2.5]
    raw = quants.quantize(x, GGMLType.Q8_0)
    assert raw[:2].tobytes() == b"\x00\x3c"
    assert raw[2:8].view(np.int8).tolist() == [127, -127, 64, 1, -1, -3]


def test_q4_0_hand_worked() -> None:
    # max = -8 (first value of largest |x|), d = -8 / -8 = 1, q = min(15, trunc(x + 8.5)).
    x = np.zeros(32, np.float32)
    x[0], x[1], x[16] = -8.0, 7.0, 8.0
    raw = quants.quantize(x, GGMLType.Q4_0)
    assert raw[:2].tobytes() == b"\x00\x3c"
    # byte j: low nibble = q[j], high nibble = q[j + 16]. q[0] = 0, q[16] = trunc(16.5) -> 15.
    assert raw[2] == 0x0 | (15 << 4)
    assert raw[3] == 15 | (8 << 4)  # q[1] = trunc(15.5) = 15, q[17] = 8


def test_signed_zero_blocks_follow_ggml() -> None:
    # ggml's quantize_row_q4_0_ref starts from max = +0.0 and only replaces it on a strictly larger
    # |x|, so an all-zero block has d = +0.0 / -8 = -0.0 (fp16 0x8000) whatever the zeros' signs.
    # gguf-py takes x[argmax|x|] = x[0]; with x[0] = -0.0 it stores d = +0.0 (0x0000): a real
    # (harmless: both decode to zeros) difference between gguf-py and ggml.
    x = np.zeros(32, np.float32)
    x[0] = -0.0
    ours = quants.quantize(x, GGMLType.Q4_0)
    assert ours[:2].tobytes() == b"\x00\x80" and set(ours[2:].tolist()) == {0x88}
    assert oracle_quantize(x, GGMLType.Q4_0)[:2].tobytes() == b"\x00\x00"
    # Q4_1: min is the first value v with v < min so far (from FLT_MAX): [-0.0, +0.0] -> -0.0.
    y = np.zeros(32, np.float32)
    y[0] = -0.0
    assert quants.quantize(y, GGMLType.Q4_1)[2:4].tobytes() == b"\x00\x80"
    y[0], y[1] = 0.0, -0.0
    assert quants.quantize(y, GGMLType.Q4_1)[2:4].tobytes() == b"\x00\x00"


def test_quantize_when_the_reciprocal_scale_overflows() -> None:
    # Block extreme x[0] = -1e-39 (an fp32 subnormal): d = -1e-39 / -8 = 1.25e-40 but 1/d = inf in
    # float32, where ggml's float -> int8 cast is undefined. We take the limit: zeros get the level
    # of 0.0 (8), -1e-39 * inf = -inf the lowest level (0), +1e-39 the highest (15). d rounds to
    # fp16 +0.0, so the block decodes to zeros whatever the levels.
    x = np.zeros(32, np.float32)
    x[0], x[1] = -1e-39, 1e-39
    raw = quants.quantize(x, GGMLType.Q4_0)
    assert raw[:2].tobytes() == b"\x00\x00"
    assert raw[2] == 0 | (8 << 4) and raw[3] == 15 | (8 << 4) and set(raw[4:].tolist()) == {0x88}
    q8 = quants.quantize(x, GGMLType.Q8_0)
    assert q8[2:4].view(np.int8).tolist() == [-127, 127] and set(q8[4:].tolist()) == {0}
    with np.errstate(all="ignore"):
        assert not np.any(quants.dequantize(raw, GGMLType.Q4_0, 32))


def test_quantize_rejects_bad_input() -> None:
    with pytest.raises(UnsupportedQuantType, match="Q4_K"):
        quants.quantize(np.zeros(256, np.float32), GGMLType.Q4_K)
    with pytest.raises(GGUFError, match="multiple"):
        quants.quantize(np.zeros(33, np.float32), GGMLType.Q8_0)
    bad = np.zeros(32, np.float32)
    bad[3] = np.nan
    with pytest.raises(quants.NonFiniteQuantInput, match="nan at index 3"):
        quants.quantize(bad, GGMLType.Q8_0)
