"""tests/support/gguf_oracle.PlainArrayReader reads exactly what gguf.GGUFReader reads: every field
(name, types, parts, data indices) and every tensor (name, type, shape, offsets, data bytes).
On the real models, tests/test_gguf.py compares our own reader with it field by field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tests.support.gguf_oracle import PlainArrayReader


def assert_same_reading(path: Path) -> None:
    want, got = gguf.GGUFReader(path), PlainArrayReader(path)
    assert type(got.data) is np.ndarray and isinstance(want.data, np.memmap)
    assert list(got.fields) == list(want.fields) and want.fields
    for name, field in want.fields.items():
        other = got.fields[name]
        assert (other.offset, other.name, other.types, other.data) == (
            field.offset,
            field.name,
            field.types,
            field.data,
        )
        assert len(other.parts) == len(field.parts)
        assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(other.parts, field.parts)), name
    assert [t.name for t in got.tensors] == [t.name for t in want.tensors] and want.tensors
    for a, b in zip(got.tensors, want.tensors):
        assert (a.tensor_type, a.n_elements, a.n_bytes, a.data_offset) == (
            b.tensor_type,
            b.n_elements,
            b.n_bytes,
            b.data_offset,
        )
        assert np.array_equal(a.shape, b.shape) and a.data.dtype == b.data.dtype and np.array_equal(a.data, b.data)
    assert got.data_offset == want.data_offset and got.alignment == want.alignment


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_plain_array_reader_reads_a_tiny_model_like_gguf_py(tiny_gguf: Any, arch: str) -> None:
    assert_same_reading(tiny_gguf(arch))
