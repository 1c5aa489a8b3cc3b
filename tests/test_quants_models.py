"""Every tensor of both real models decodes bit-identically to gguf-py, and fast enough.

Large tensors are compared in slices of whole rows (the decoders see each block independently, so a
slice decodes exactly as the same rows of the whole tensor; test_quants checks chunking separately)
to keep the memory of two float32 copies small.
"""

from __future__ import annotations

import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.support import gguf_oracle
from verispec.reference import quants
from verispec.reference.gguf import GGUFFile

pytestmark = [pytest.mark.model, pytest.mark.oracle]

ROWS_PER_SLICE = 4096


def test_every_tensor_bit_exact_vs_gguf_py(model_name: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue("smollm2_path" if model_name == "smollm2-135m" else "gemma3_path")
    reader = gguf_oracle.reader(path)
    seen_types: set[str] = set()
    with GGUFFile.open(path) as ours:
        assert len(ours.tensors) == len(reader.tensors)
        for tensor in reader.tensors:
            info = ours.tensors[tensor.name]
            assert info.ggml_type == int(tensor.tensor_type)
            seen_types.add(info.type_name)
            theirs_raw = np.asarray(tensor.data).view(np.uint8).reshape(-1)
            ours_raw = ours.raw(tensor.name)
            assert np.array_equal(ours_raw, theirs_raw), tensor.name
            block_elements, block_bytes = quants.block_layout(info.ggml_type)
            row_elements = info.dims[0]
            row_bytes = row_elements // block_elements * block_bytes
            n_rows = info.n_elements // row_elements
            for first in range(0, n_rows, ROWS_PER_SLICE):
                last = min(n_rows, first + ROWS_PER_SLICE)
                piece = ours_raw[first * row_bytes : last * row_bytes]
                mine = quants.dequantize(piece, info.ggml_type, (last - first) * row_elements, tensor_name=info.name)
                oracle = gguf.quants.dequantize(piece.reshape(last - first, row_bytes), tensor.tensor_type)
                oracle = np.asarray(oracle, dtype=np.float32).reshape(-1)
                assert np.array_equal(mine.view(np.uint32), oracle.view(np.uint32)), (tensor.name, first)
    expected = {"smollm2-135m": {"F32", "Q4_1", "Q8_0"}, "gemma3-270m": {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}}
    assert seen_types == expected[model_name]


def test_whole_model_dequantizes_in_seconds(gemma3_path: Path) -> None:
    # All 236 tensors of gemma3-270m (268M weights, 1.07 GB as float32), one at a time. CPU time of
    # this process (xdist workers and other jobs share the cores; the wall clock would count them).
    with GGUFFile.open(gemma3_path) as model:
        start = time.process_time()
        for name, info in model.tensors.items():
            weights = model.dequantize(name)
            assert weights.shape == info.shape and weights.dtype == np.float32
        elapsed = time.process_time() - start
    print(f"gemma3-270m: dequantized {len(model.tensors)} tensors in {elapsed:.2f} s")
    assert elapsed < 60.0
