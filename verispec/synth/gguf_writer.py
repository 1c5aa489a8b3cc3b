"""A tiny, independent GGUF writer: the synthetic models' files, and the tests' files broken on purpose.

It writes the container byte by byte from the GGUF spec (it does not use reference/gguf.py, so a
mistake there cannot hide here), and records the offset where every field starts, so that tests can
truncate or corrupt a file at a named place ("kv[2].value", "tensor[1].offset", ...).

Values are typed explicitly: ``Value(VT.UINT32, 7)``, ``Value(VT.STRING, "x")``,
``Array(VT.INT8, [1, 2])``, ``Array(VT.ARRAY, [Array(VT.STRING, ["a"])])``. A ``str`` key or
string value may be given as ``bytes`` to write invalid UTF-8.

:class:`GGUFRecorder` takes the calls of gguf-py's ``GGUFWriter`` that llama.cpp's converter makes
for the synthetic models (:mod:`verispec.synth.models`), with the same keys and value types, and
writes them through :func:`build` in the same layout: the same bytes as gguf-py (tested), with
NumPy alone.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import numpy as np
import numpy.typing as npt


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
BLOCKS = {
    F32: (1, 4),
    F16: (1, 2),
    Q4_0: (32, 18),
    Q4_1: (32, 20),
    Q5_0: (32, 22),
    Q8_0: (32, 34),
    Q4_K: (256, 144),
    Q6_K: (256, 210),
    IQ2_XXS: (256, 66),
}

Q5_1, BF16 = 7, 30
# ggml type -> (elements, bytes) per block, for the types the synthetic models write
QUANT_BLOCKS = {
    F32: (1, 4),
    F16: (1, 2),
    BF16: (1, 2),
    Q4_0: (32, 18),
    Q4_1: (32, 20),
    Q5_0: (32, 22),
    Q5_1: (32, 24),
    Q8_0: (32, 34),
}


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


# -- gguf-py's writer calls ------------------------------------------------------------------------


def _array_item_type(items: Sequence[object]) -> int:
    """gguf-py's ``GGUFValueType.get_type`` of the first item (bool is tested before int)."""
    first = items[0]
    if isinstance(first, (str, bytes)):
        return VT.STRING
    if isinstance(first, float):
        return VT.FLOAT32
    if isinstance(first, bool):
        return VT.BOOL
    if isinstance(first, int):
        return VT.INT32
    raise TypeError(f"no GGUF array type for {type(first).__name__}")


def _ggml_dims(shape: Sequence[int], ggml_type: int, from_bytes: bool) -> list[int]:
    """ggml's dimension order (innermost first) of a NumPy shape; a quantized tensor's uint8 byte
    shape counts bytes in its last axis, converted to elements (gguf-py's quant_shape_from_byte_shape)."""
    dims = [int(d) for d in shape]
    if from_bytes:
        per_block, block_bytes = QUANT_BLOCKS[ggml_type]
        if dims[-1] % block_bytes:
            raise ValueError(f"a row of {dims[-1]} bytes is not a whole number of {block_bytes}-byte blocks")
        dims[-1] = dims[-1] // block_bytes * per_block
    return dims[::-1]


class GGUFRecorder:
    """The subset of gguf-py's ``GGUFWriter`` the synthetic models call, then :meth:`write`.

    ``general.architecture`` comes first, as gguf-py's constructor adds it; keys then follow in
    call order, tensors too, each padded to the 32-byte default alignment."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.metadata: list[tuple[str | bytes, Meta]] = [("general.architecture", Value(VT.STRING, arch))]
        self.tensors: list[Tensor] = []

    # typed values
    def add_string(self, key: str, value: str) -> None:
        self.metadata.append((key, Value(VT.STRING, value)))

    def add_uint32(self, key: str, value: int) -> None:
        self.metadata.append((key, Value(VT.UINT32, int(value))))

    def add_float32(self, key: str, value: float) -> None:
        self.metadata.append((key, Value(VT.FLOAT32, float(value))))

    def add_bool(self, key: str, value: bool) -> None:
        self.metadata.append((key, Value(VT.BOOL, bool(value))))

    def add_array(self, key: str, items: Sequence[object]) -> None:
        if items:  # gguf-py writes no key for an empty array
            self.metadata.append((key, Array(_array_item_type(items), list(items))))

    def _arch_uint32(self, suffix: str, value: int) -> None:
        self.add_uint32(f"{self.arch}.{suffix}", value)

    def _arch_float32(self, suffix: str, value: float) -> None:
        self.add_float32(f"{self.arch}.{suffix}", value)

    # general
    def add_name(self, name: str) -> None:
        self.add_string("general.name", name)

    def add_file_type(self, file_type: int) -> None:
        self.add_uint32("general.file_type", file_type)

    def add_quantization_version(self, version: int) -> None:
        self.add_uint32("general.quantization_version", version)

    # hyperparameters
    def add_vocab_size(self, n: int) -> None:
        self._arch_uint32("vocab_size", n)

    def add_context_length(self, n: int) -> None:
        self._arch_uint32("context_length", n)

    def add_embedding_length(self, n: int) -> None:
        self._arch_uint32("embedding_length", n)

    def add_block_count(self, n: int) -> None:
        self._arch_uint32("block_count", n)

    def add_feed_forward_length(self, n: int) -> None:
        self._arch_uint32("feed_forward_length", n)

    def add_head_count(self, n: int) -> None:
        self._arch_uint32("attention.head_count", n)

    def add_head_count_kv(self, n: int | Sequence[int]) -> None:
        if isinstance(n, int):
            self._arch_uint32("attention.head_count_kv", n)
        else:
            self.add_array(f"{self.arch}.attention.head_count_kv", list(n))

    def add_layer_norm_rms_eps(self, eps: float) -> None:
        self._arch_float32("attention.layer_norm_rms_epsilon", eps)

    def add_rope_freq_base(self, base: float) -> None:
        self._arch_float32("rope.freq_base", base)

    def add_rope_freq_base_swa(self, base: float) -> None:
        self._arch_float32("rope.freq_base_swa", base)

    def add_rope_dimension_count(self, n: int) -> None:
        self._arch_uint32("rope.dimension_count", n)

    def add_rope_dimension_count_swa(self, n: int) -> None:
        self._arch_uint32("rope.dimension_count_swa", n)

    def add_sliding_window(self, n: int) -> None:
        self._arch_uint32("attention.sliding_window", n)

    def add_sliding_window_pattern(self, pattern: Sequence[bool]) -> None:
        self.add_array(f"{self.arch}.attention.sliding_window_pattern", list(pattern))

    def add_final_logit_softcapping(self, cap: float) -> None:
        self._arch_float32("final_logit_softcapping", cap)

    def add_shared_kv_layers(self, n: int) -> None:
        self._arch_uint32("attention.shared_kv_layers", n)

    def add_embedding_length_per_layer_input(self, n: int) -> None:
        self._arch_uint32("embedding_length_per_layer_input", n)

    def add_key_length(self, n: int) -> None:
        self._arch_uint32("attention.key_length", n)

    def add_value_length(self, n: int) -> None:
        self._arch_uint32("attention.value_length", n)

    def add_key_length_swa(self, n: int) -> None:
        self._arch_uint32("attention.key_length_swa", n)

    def add_value_length_swa(self, n: int) -> None:
        self._arch_uint32("attention.value_length_swa", n)

    # tokenizer
    def add_tokenizer_model(self, model: str) -> None:
        self.add_string("tokenizer.ggml.model", model)

    def add_tokenizer_pre(self, pre: str) -> None:
        self.add_string("tokenizer.ggml.pre", pre)

    def add_token_list(self, tokens: Sequence[str]) -> None:
        self.add_array("tokenizer.ggml.tokens", list(tokens))

    def add_token_types(self, types: Sequence[int]) -> None:
        self.add_array("tokenizer.ggml.token_type", list(types))

    def add_token_scores(self, scores: Sequence[float]) -> None:
        self.add_array("tokenizer.ggml.scores", list(scores))

    def add_token_merges(self, merges: Sequence[str]) -> None:
        self.add_array("tokenizer.ggml.merges", list(merges))

    def add_bos_token_id(self, token: int) -> None:
        self.add_uint32("tokenizer.ggml.bos_token_id", token)

    def add_eos_token_id(self, token: int) -> None:
        self.add_uint32("tokenizer.ggml.eos_token_id", token)

    def add_unk_token_id(self, token: int) -> None:
        self.add_uint32("tokenizer.ggml.unknown_token_id", token)

    def add_pad_token_id(self, token: int) -> None:
        self.add_uint32("tokenizer.ggml.padding_token_id", token)

    def add_add_bos_token(self, value: bool) -> None:
        self.add_bool("tokenizer.ggml.add_bos_token", value)

    def add_add_eos_token(self, value: bool) -> None:
        self.add_bool("tokenizer.ggml.add_eos_token", value)

    # tensors
    def add_tensor(
        self, name: str, array: npt.NDArray[Any], raw_shape: Sequence[int] | None = None, raw_dtype: int | None = None
    ) -> None:
        """A float32 or float16 array, or (``raw_dtype``) a quantized tensor's uint8 byte array."""
        if raw_shape is not None:
            raise ValueError("raw_shape is not supported: the byte shape gives the element shape")
        if raw_dtype is None:
            kinds = {np.dtype(np.float32): F32, np.dtype(np.float16): F16}
            if array.dtype not in kinds:
                raise ValueError(
                    f"tensor {name!r}: only float32 and float16 arrays are written as is, got {array.dtype}"
                )
            ggml_type, dims = kinds[array.dtype], [int(d) for d in array.shape][::-1]
        else:
            ggml_type, dims = int(raw_dtype), _ggml_dims(array.shape, int(raw_dtype), array.dtype == np.uint8)
        self.tensors.append(
            Tensor(name, ggml_type, dims, np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes())
        )

    def to_bytes(self) -> bytes:
        return build(self.metadata, self.tensors).data

    def write(self, path: Path) -> None:
        """Write the file atomically: ``path`` holds its old bytes or the new ones, never a part."""
        from verispec.reference.atomic import replace_file

        data = self.to_bytes()
        with replace_file(Path(path)) as fh:
            fh.write(data)
