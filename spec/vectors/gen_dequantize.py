"""Generator of the dequantization cases: raw GGUF blocks -> float32 bits."""

from __future__ import annotations

import numpy as np

from verispec.reference.quants import SUPPORTED_DEQUANT, block_layout, dequantize, type_name
from verispec.spec.vectors.draws import Item
from verispec.spec.vectors.kinds import VectorError
from verispec.spec.vectors.wire import Json

# dequantization: random blocks (resampled until every value is finite: NaN payloads are not
# portable) and blocks with deliberate scales; the d field's byte offset per quantized type
_SCALE_OFFSET = {
    "Q4_0": 0,
    "Q4_1": 0,
    "Q5_0": 0,
    "Q5_1": 0,
    "Q8_0": 0,
    "Q2_K": 80,
    "Q3_K": 108,
    "Q4_K": 0,
    "Q5_K": 0,
    "Q6_K": 208,
}
_SPECIAL_HALVES = {
    "zero": 0x0000,
    "negative_zero": 0x8000,
    "smallest_subnormal": 0x0001,
    "largest_subnormal": 0x03FF,
    "max": 0x7BFF,
    "negative_max": 0xFBFF,
    "one": 0x3C00,
}


def _finite_block(rng: np.random.Generator, ggml_type: int, blocks: int) -> bytes:
    elements, nbytes = block_layout(ggml_type)
    out = bytearray()
    for _ in range(blocks):
        for _attempt in range(1000):
            raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
            if np.all(np.isfinite(dequantize(raw, ggml_type, elements))):
                out += raw.tobytes()
                break
        else:  # pragma: no cover - every supported type has finite blocks with high probability
            raise VectorError(f"no finite random block found for {type_name(ggml_type)}")
    return bytes(out)


def _dequant(ggml_type: int, raw: bytes) -> Json:
    elements, nbytes = block_layout(ggml_type)
    return {
        "ggml_type": int(ggml_type),
        "type_name": type_name(ggml_type),
        "n_elements": len(raw) // nbytes * elements,
        "raw_hex": raw.hex(),
    }


def dequantize_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Raw blocks per quant type (hex) -> float32 values (as IEEE bit patterns), bit-exact."""
    types = sorted(SUPPORTED_DEQUANT)
    items: list[Item] = []
    for index in range(max(count, len(types))):
        ggml_type = types[index % len(types)]
        blocks = int(rng.integers(1, 3))
        if block_layout(ggml_type)[0] == 1:  # plain floats: 1..40 values
            blocks = int(rng.integers(1, 41))
        items.append((_dequant(ggml_type, _finite_block(rng, ggml_type, blocks)), ["random", type_name(ggml_type)]))
    for ggml_type in types:
        name = type_name(ggml_type)
        elements, nbytes = block_layout(ggml_type)
        if name in _SCALE_OFFSET:
            items.append((_dequant(ggml_type, bytes(nbytes)), ["all_zero_block", name]))
            for label, half in _SPECIAL_HALVES.items():
                raw = bytearray(_finite_block(rng, ggml_type, 1))
                raw[_SCALE_OFFSET[name] : _SCALE_OFFSET[name] + 2] = half.to_bytes(2, "little")
                if np.all(np.isfinite(dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), ggml_type, elements))):
                    items.append((_dequant(ggml_type, bytes(raw)), [f"scale_{label}", name]))
    specials_f32 = np.array(
        [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, 0.1],
        dtype=np.float32,
    )
    halves = np.array(list(_SPECIAL_HALVES.values()) + [0x7C00, 0xFC00, 0x3555], dtype=np.uint16)
    items.append((_dequant(0, specials_f32.tobytes()), ["special_values", "F32"]))
    items.append((_dequant(1, halves.astype("<u2").tobytes()), ["special_values", "F16", "infinity"]))
    bf16 = (specials_f32.view(np.uint32) >> np.uint32(16)).astype("<u2")
    items.append((_dequant(30, bf16.tobytes()), ["special_values", "BF16", "infinity"]))
    return items
