"""RoPE's partner of each dimension, shared by the engine's forward (engine/model.py) and its fused
int8 graphs (engine/fused.py): a leaf module, so neither imports the other."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from verispec.reference.config import ROPE_NEOX, ROPE_NORM
from verispec.reference.errors import ModelError

F32 = npt.NDArray[np.float32]


def rotation(head_dim: int, rope_dim: int, rope_type: str) -> tuple[npt.NDArray[np.intp], F32]:
    """Index and sign with ``rotate(x) = sign * x[index]``: the partner of each rotated dim.

    NORM: (x0, x1) -> (-x1, x0) on adjacent pairs; NEOX: (a, b) -> (-b, a) on split halves; dims
    past rope_dim map to themselves with sign 0 (their sin is 0 anyway).
    """
    index = np.arange(head_dim, dtype=np.intp)
    sign = np.zeros(head_dim, dtype=np.float32)
    half = rope_dim // 2
    if rope_type == ROPE_NORM:
        index[0:rope_dim:2] = np.arange(1, rope_dim, 2)
        index[1:rope_dim:2] = np.arange(0, rope_dim, 2)
        sign[0:rope_dim:2] = -1.0
        sign[1:rope_dim:2] = 1.0
    elif rope_type == ROPE_NEOX:
        index[:half] = np.arange(half, rope_dim)
        index[half:rope_dim] = np.arange(0, half)
        sign[:half] = -1.0
        sign[half:rope_dim] = 1.0
    else:
        raise ModelError(f"unknown rope type {rope_type!r}")
    return index, sign
