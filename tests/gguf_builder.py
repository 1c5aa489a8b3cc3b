"""A tiny, independent GGUF writer for tests: valid files, and files broken on purpose.

It writes the container byte by byte from the GGUF spec (it does not use reference/gguf.py, so a
mistake there cannot hide here), and records the offset where every field starts, so that tests can
truncate or corrupt a file at a named place ("kv[2].value", "tensor[1].offset", ...).

Values are typed explicitly: ``Value(VT.UINT32, 7)``, ``Value(VT.STRING, "x")``,
``Array(VT.INT8, [1, 2])``, ``Array(VT.ARRAY, [Array(VT.STRING, ["a"])])``. A ``str`` key or
string value may be given as ``bytes`` to write invalid UTF-8.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Union


class VT:
    """GGUF metadata value type tags (gguf.h ``enum gguf_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_FORMATS = {
    VT.UINT8: "<B",
    VT.INT8: "<b",
    VT.UINT16: "<H",
    VT.INT16: "<h",
    VT.UINT32: "<I",
    VT.INT32: "<i",
    VT.FLOAT32: "<f",
    VT.BOOL: "<B",
    VT.UINT64: "<Q",
    VT.INT64: "<q",
    VT.FLOAT64: "<d",
}

# ggml type ids used in tests and their (elements, bytes) per block.
F32, F16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, IQ2_XXS = 0, 1, 2, 3, 6, 8, 12, 14, 16
BLOCKS = {F32: (1, 4), F16: (1, 2), Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q8_0: (32, 34),
          Q4_K: (256, 144), Q6_K: (256, 210), IQ2_XXS: (256, 66)}


@dataclass(frozen=True)
class Value:
    type: int
    value: object  # int | float | bool | str | bytes


@dataclass(frozen=True)
class Array:
    item_type: int
    items: list[object]  # plain values, or Array for item_type ARRAY


Meta = Union[Value, Array]


@dataclass
class Tensor:
    name: str | bytes
    ggml_type: int
    dims: list[int]  # ggml order
    data: bytes = b""  # written at the tensor's offset in the data section
    offset: int | None = None  # relative offset override (default: packed and aligned)


@dataclass
class Built:
    data: bytes
    at: dict[str, int] = field(default_factory=dict)  # field name -> offset where it starts
    data_start: int = 0

    def boundaries(self) -> list[tuple[str, int]]:
        """Every recorded field start, in file order."""
        return sorted(self.at.items(), key=lambda item: item[1])


def _string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _payload(item_type: int, value: object, out: bytearray, at: dict[str, int], label: str) -> None:
    at[label] = len(out)
    if item_type == VT.STRING:
        assert isinstance(value, (str, bytes))
        out += _string(value)
    elif item_type == VT.ARRAY:
        assert isinstance(value, Array)
        _array(value, out, at, label)
    else:
        out += struct.pack(_FORMATS[item_type], value)


def _array(array: Array, out: bytearray, at: dict[str, int], label: str) -> None:
    at[f"{label}.item_type"] = len(out)
    out += struct.pack("<I", array.item_type)
    at[f"{label}.count"] = len(out)
    out += struct.pack("<Q", len(array.items))
    for i, item in enumerate(array.items):
        _payload(array.item_type, item, out, at, f"{label}[{i}]")


def build(
    metadata: list[tuple[str | bytes, Meta]],
    tensors: list[Tensor] | None = None,
    *,
    version: int = 3,
    magic: bytes = b"GGUF",
    alignment: int = 32,
    tensor_count: int | None = None,
    kv_count: int | None = None,
) -> Built:
    """Serialize a GGUF file. ``alignment`` is only used for layout: put ``general.alignment`` in
    ``metadata`` yourself to announce it. Counts may be overridden to lie."""
    tensors = tensors or []
    out = bytearray()
    at: dict[str, int] = {}
    at["magic"] = 0
    out += magic
    at["version"] = len(out)
    out += struct.pack("<I", version)
    at["tensor_count"] = len(out)
    out += struct.pack("<Q", len(tensors) if tensor_count is None else tensor_count)
    at["kv_count"] = len(out)
    out += struct.pack("<Q", len(metadata) if kv_count is None else kv_count)
    for i, (key, meta) in enumerate(metadata):
        at[f"kv[{i}]"] = len(out)
        out += _string(key)
        at[f"kv[{i}].type"] = len(out)
        if isinstance(meta, Array):
            out += struct.pack("<I", VT.ARRAY)
            _payload(VT.ARRAY, meta, out, at, f"kv[{i}].value")
        else:
            out += struct.pack("<I", meta.type)
            _payload(meta.type, meta.value, out, at, f"kv[{i}].value")
    offsets: list[int] = []
    next_offset = 0
    for t in tensors:
        offset = next_offset if t.offset is None else t.offset
        offsets.append(offset)
        next_offset = _pad(max(next_offset, offset + len(t.data)), alignment)
    for i, (t, offset) in enumerate(zip(tensors, offsets)):
        at[f"tensor[{i}]"] = len(out)
        out += _string(t.name)
        at[f"tensor[{i}].n_dims"] = len(out)
        out += struct.pack("<I", len(t.dims))
        at[f"tensor[{i}].dims"] = len(out)
        out += b"".join(struct.pack("<q", d) for d in t.dims)
        at[f"tensor[{i}].type"] = len(out)
        out += struct.pack("<I", t.ggml_type)
        at[f"tensor[{i}].offset"] = len(out)
        out += struct.pack("<Q", offset)
    data_start = _pad(len(out), alignment) if tensors else len(out)
    if tensors:
        at["padding"] = len(out)
        out += b"\0" * (data_start - len(out))
        at["data"] = data_start
    for i, (t, offset) in enumerate(zip(tensors, offsets)):
        if not t.data:
            continue
        start = data_start + offset
        if len(out) < start:
            out += b"\0" * (start - len(out))
        at[f"tensor[{i}].data"] = start
        out[start : start + len(t.data)] = t.data
    if tensors:
        end = _pad(len(out), alignment)
        out += b"\0" * (end - len(out))
    return Built(bytes(out), at, data_start)


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def tensor_bytes(ggml_type: int, dims: list[int], fill: int = 0x11) -> bytes:
    """Bytes of a tensor of ``dims`` (ggml order) and ``ggml_type``, every byte ``fill``."""
    n = 1
    for d in dims:
        n *= d
    per_block, block_bytes = BLOCKS[ggml_type]
    return bytes([fill]) * (n // per_block * block_bytes)


def small_model() -> Built:
    """A small valid file with every kind of metadata and a few tensors (the fuzz seed)."""
    meta: list[tuple[str | bytes, Meta]] = [
        ("general.architecture", Value(VT.STRING, "toy")),
        ("general.alignment", Value(VT.UINT32, 32)),
        ("toy.block_count", Value(VT.UINT32, 2)),
        ("toy.rope.freq_base", Value(VT.FLOAT32, 10000.0)),
        ("toy.flags", Array(VT.BOOL, [True, False, True])),
        ("toy.i8", Value(VT.INT8, -5)),
        ("toy.u64", Value(VT.UINT64, 2**64 - 1)),
        ("toy.f64", Value(VT.FLOAT64, -0.25)),
        ("tokenizer.ggml.model", Value(VT.STRING, "gpt2")),
        ("tokenizer.ggml.tokens", Array(VT.STRING, ["a", "b", "é", "<s>"])),
        ("tokenizer.ggml.scores", Array(VT.FLOAT32, [0.0, -1.0, -2.5, 3.0])),
        ("toy.nested", Array(VT.ARRAY, [Array(VT.INT32, [1, -2]), Array(VT.STRING, ["x"])])),
    ]
    tensors = [
        Tensor("norm.weight", F32, [8], struct.pack("<8f", *range(8))),
        Tensor("embd.weight", Q4_0, [32, 2], tensor_bytes(Q4_0, [32, 2], 0x3C)),
        Tensor("out.weight", Q8_0, [32, 1], tensor_bytes(Q8_0, [32, 1], 0x21)),
        Tensor("k.weight", Q4_K, [256], tensor_bytes(Q4_K, [256], 0x05)),
    ]
    return build(meta, tensors)
