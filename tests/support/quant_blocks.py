"""Random block-quantized GGUF bytes for the engine's kernel tests (tests/test_engine_backends.py,
tests/test_engine_fused.py): :func:`random_blocks`, with finite fp16 scales unless asked not to; :func:`q8_0_bytes`, Q8_0 rows from
levels and scales (tests/test_sparse_head*.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference import quants

# byte offsets of the fp16 scale fields of each block type (set to finite values in random_blocks)
F16_FIELDS = {
    quants.GGMLType.Q4_0: (0,),
    quants.GGMLType.Q4_1: (0, 2),
    quants.GGMLType.Q5_0: (0,),
    quants.GGMLType.Q5_1: (0, 2),
    quants.GGMLType.Q8_0: (0,),
    quants.GGMLType.Q2_K: (80, 82),
    quants.GGMLType.Q3_K: (108,),
    quants.GGMLType.Q4_K: (0, 2),
    quants.GGMLType.Q5_K: (0, 2),
    quants.GGMLType.Q6_K: (208,),
}


def random_blocks(ggml_type: int, shape: tuple[int, int], seed: int, finite: bool = True) -> np.ndarray[Any, Any]:
    """Random GGUF bytes for a matrix ``shape``; with ``finite`` every fp16 scale is in [0.005, 0.02]."""
    rng = np.random.default_rng(seed)
    elements, nbytes = quants.block_layout(ggml_type)
    n_blocks = shape[0] * shape[1] // elements
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    if finite:
        for offset in F16_FIELDS[quants.GGMLType(ggml_type)]:
            scale = rng.uniform(0.005, 0.02, size=n_blocks).astype(np.float16)
            raw[:, offset : offset + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def q8_0_bytes(levels: npt.NDArray[np.int8], scales: npt.NDArray[np.float16]) -> npt.NDArray[np.uint8]:
    """Q8_0 rows: per block of 32, a float16 scale then 32 int8 levels."""
    rows, n_in = levels.shape
    nb = n_in // 32
    out = np.empty((rows, nb, 34), dtype=np.uint8)
    out[:, :, :2] = scales.reshape(rows, nb, 1).view(np.uint8).reshape(rows, nb, 2)
    out[:, :, 2:] = levels.reshape(rows, nb, 32).view(np.uint8)
    return out.reshape(rows, nb * 34)
