"""reference/gguf.py on valid files: real models against gguf-py, and files written by tests.

Malformed files are in test_gguf_corpus.py, the fuzz test in test_gguf_fuzz.py.
"""

from __future__ import annotations

import hashlib
import math
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import gguf_oracle
from tests.support.gguf_builder import F32, IQ2_XXS, Q4_0, Q8_0, VT, Array, Meta, Tensor, Value, build, small_model
from tests.support.profiles import examples
from verispec import registry
from verispec.reference.errors import UnsupportedQuantType
from verispec.reference.gguf import (
    GGMLType,
    GGUFBadMetadataType,
    GGUFClosed,
    GGUFFile,
    GGUFMissingKey,
    GGUFTruncated,
    GGUFUnreadable,
    GGUFValueType,
    TensorInfo,
)


def _path(model_name: str, request: pytest.FixtureRequest) -> Path:
    fixture = "smollm2_path" if model_name == "smollm2-135m" else "gemma3_path"
    path: Path = request.getfixturevalue(fixture)
    return path


# ---------------------------------------------------------------------------------------------
# Real models against gguf-py.
# ---------------------------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.oracle
def test_real_model_matches_gguf_py(model_name: str, request: pytest.FixtureRequest) -> None:
    path = _path(model_name, request)
    reader = gguf_oracle.reader(path)
    with GGUFFile.open(path) as ours:
        assert ours.version == reader.fields["GGUF.version"].contents()
        assert ours.alignment == reader.alignment
        assert ours.data_offset == reader.data_offset
        assert ours.data_offset % ours.alignment == 0
        # metadata: same keys in the same order, same values and value types
        oracle_keys = [k for k in reader.fields if not k.startswith("GGUF.")]
        assert list(ours.metadata) == oracle_keys
        for key in oracle_keys:
            field = reader.fields[key]
            assert ours.metadata_types[key] == int(field.types[0]), key
            theirs = field.contents()
            mine = ours.metadata[key]
            if field.types[-1] == gguf.GGUFValueType.FLOAT32:
                # gguf-py returns float32 numbers; ours are the same values as Python floats
                assert np.array_equal(np.asarray(mine, np.float32), np.asarray(theirs, np.float32)), key
            else:
                assert mine == theirs, key
        # tensor table: same order, names, types, dims, offsets, sizes
        assert list(ours.tensors) == [t.name for t in reader.tensors]
        for t in reader.tensors:
            info = ours.tensors[t.name]
            assert info.ggml_type == int(t.tensor_type)
            assert info.dims == tuple(int(d) for d in t.shape)  # gguf-py's shape is ggml order
            assert info.shape == tuple(reversed(info.dims))
            assert info.offset == t.data_offset
            assert info.nbytes == t.n_bytes
            assert info.n_elements == t.n_elements


@pytest.mark.model
def test_real_model_identity(model_name: str, request: pytest.FixtureRequest) -> None:
    path = _path(model_name, request)
    with GGUFFile.open(path) as model:
        assert model.sha256() == registry.REGISTRY[model_name].sha256
        assert model.architecture == {"smollm2-135m": "llama", "gemma3-270m": "gemma3"}[model_name]
        embd = model.tensors["token_embd.weight"]
        vocab = model.get("tokenizer.ggml.tokens")
        assert isinstance(vocab, list) and embd.shape[0] == len(vocab)
        raw = model.raw("token_embd.weight")
        assert raw.dtype == np.uint8 and raw.shape == (embd.nbytes,)
        assert not raw.flags.owndata and not raw.flags.writeable  # a view into the read-only mapping


# ---------------------------------------------------------------------------------------------
# Files written by gguf-py's GGUFWriter (an independent writer) read back.
# ---------------------------------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("alignment", [None, 64, 1])
def test_reads_gguf_py_writer_output(tmp_path: Path, alignment: int | None) -> None:
    path = tmp_path / "w.gguf"
    writer = gguf.GGUFWriter(path, "toy")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_block_count(3)
    writer.add_float32("toy.eps", 1e-6)
    writer.add_float64("toy.f64", math.pi)
    writer.add_bool("toy.flag", True)
    writer.add_string("toy.name", "héllo ✓")
    writer.add_array("toy.ints", [1, 2, 3])
    writer.add_array("toy.strs", ["a", "", "ü"])
    writer.add_uint64("toy.big", 2**64 - 1)
    writer.add_int64("toy.neg", -(2**63))
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal((2, 64)).astype(np.float16)
    q8 = rng.standard_normal((4, 64)).astype(np.float32)
    q8_raw = gguf.quants.quantize(q8, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("a", f32)
    writer.add_tensor("b", f16)
    writer.add_tensor("c", q8_raw, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with GGUFFile.open(path) as model:
        assert model.alignment == (alignment or 32)
        assert model.architecture == "toy"
        assert model.metadata["toy.block_count"] == 3
        assert model.metadata["toy.eps"] == float(np.float32(1e-6))
        assert model.metadata["toy.f64"] == math.pi
        assert model.metadata["toy.flag"] is True
        assert model.metadata["toy.name"] == "héllo ✓"
        assert model.metadata["toy.ints"] == [1, 2, 3]
        assert model.metadata["toy.strs"] == ["a", "", "ü"]
        assert model.metadata["toy.big"] == 2**64 - 1
        assert model.metadata["toy.neg"] == -(2**63)
        assert [t.offset % model.alignment for t in model.tensors.values()] == [0, 0, 0]
        assert model.data_offset % model.alignment == 0
        assert model.tensors["a"].shape == (3, 5) and model.tensors["a"].dims == (5, 3)
        assert np.array_equal(model.dequantize("a"), f32)
        assert np.array_equal(model.dequantize("b"), f16.astype(np.float32))
        expected = gguf.quants.dequantize(q8_raw, gguf.GGMLQuantizationType.Q8_0)
        assert np.array_equal(model.dequantize("c"), expected)


# ---------------------------------------------------------------------------------------------
# Files written by the test builder: every value type, nesting, version 2, empty things.
# ---------------------------------------------------------------------------------------------

SCALARS: list[tuple[int, object]] = [
    (VT.UINT8, 255),
    (VT.INT8, -128),
    (VT.UINT16, 65535),
    (VT.INT16, -32768),
    (VT.UINT32, 2**32 - 1),
    (VT.INT32, -(2**31)),
    (VT.FLOAT32, 0.1),
    (VT.BOOL, True),
    (VT.STRING, "naïve ☃ \x00 inside"),
    (VT.UINT64, 2**64 - 1),
    (VT.INT64, -(2**63)),
    (VT.FLOAT64, -1e300),
]


def test_every_scalar_type_round_trips() -> None:
    meta: list[tuple[str | bytes, Meta]] = [(f"k{t}", Value(t, v)) for t, v in SCALARS]
    model = GGUFFile.from_bytes(build(meta).data)
    for t, v in SCALARS:
        got = model.metadata[f"k{t}"]
        if t == VT.FLOAT32:
            assert got == float(np.float32(0.1))
        else:
            assert got == v and type(got) is type(v)
        assert model.metadata_types[f"k{t}"] == t
    assert model.tensors == {}


def test_bool_is_any_nonzero_byte() -> None:
    model = GGUFFile.from_bytes(
        build([("b", Value(VT.UINT8, 7))]).data.replace(
            struct.pack("<I", VT.UINT8) + b"\x07", struct.pack("<I", VT.BOOL) + b"\x07"
        )
    )
    assert model.metadata["b"] is True


def test_arrays_of_every_type_and_nested() -> None:
    meta: list[tuple[str | bytes, Meta]] = [(f"a{t}", Array(t, [v, v])) for t, v in SCALARS]
    meta += [
        ("empty", Array(VT.INT32, [])),
        ("nested", Array(VT.ARRAY, [Array(VT.UINT8, [1, 2]), Array(VT.STRING, ["x", "y"]), Array(VT.ARRAY, [])])),
        ("deep", Array(VT.ARRAY, [Array(VT.ARRAY, [Array(VT.ARRAY, [Array(VT.BOOL, [False])])])])),
    ]
    model = GGUFFile.from_bytes(build(meta).data)
    for t, v in SCALARS:
        expected = float(np.float32(v)) if t == VT.FLOAT32 else v  # type: ignore[arg-type]
        assert model.metadata[f"a{t}"] == [expected, expected]
        assert model.metadata_types[f"a{t}"] == GGUFValueType.ARRAY
    assert model.metadata["empty"] == []
    assert model.metadata["nested"] == [[1, 2], ["x", "y"], []]
    assert model.metadata["deep"] == [[[[False]]]]


def test_version_2_is_read() -> None:
    built = build([("general.architecture", Value(VT.STRING, "x"))], [Tensor("t", F32, [2], b"\0" * 8)], version=2)
    model = GGUFFile.from_bytes(built.data)
    assert model.version == 2 and model.tensors["t"].nbytes == 8


def test_data_section_is_padded_to_alignment() -> None:
    meta: list[tuple[str | bytes, Meta]] = [("general.alignment", Value(VT.UINT32, 256))]
    built = build(meta, [Tensor("t", F32, [4], struct.pack("<4f", 1, 2, 3, 4))], alignment=256)
    model = GGUFFile.from_bytes(built.data)
    assert model.alignment == 256 and model.data_offset == 256 == built.data_start
    assert model.dequantize("t").tolist() == [1.0, 2.0, 3.0, 4.0]


def test_shapes_are_reversed_dims() -> None:
    values = np.arange(2 * 3 * 4, dtype=np.float32)
    built = build([], [Tensor("t", F32, [4, 3, 2], values.tobytes()), Tensor("s", F32, [], b"\0\0\x80\x3f")])
    model = GGUFFile.from_bytes(built.data)
    t = model.tensors["t"]
    assert t == TensorInfo("t", 0, (4, 3, 2), (2, 3, 4), built.data_start, 96, 24)
    assert np.array_equal(model.dequantize("t"), values.reshape(2, 3, 4))  # ne0 is the fastest axis
    assert model.dequantize("s").shape == () and float(model.dequantize("s")) == 1.0


def test_zero_element_tensor() -> None:
    model = GGUFFile.from_bytes(build([], [Tensor("z", Q4_0, [32, 0])]).data)
    assert model.tensors["z"].nbytes == 0 and model.dequantize("z").shape == (0, 32)


def test_accessors_and_errors_on_a_small_model(tmp_path: Path) -> None:
    built = small_model()
    path = tmp_path / "small.gguf"
    path.write_bytes(built.data)
    with GGUFFile.open(path) as model:
        assert model.architecture == "toy"
        assert model.get("toy.block_count") == 2
        assert model.get("missing") is None and model.get("missing", 5) == 5
        assert model.sha256() == hashlib.sha256(built.data).hexdigest()
        assert model.tensors["k.weight"].type_name == "Q4_K"
        view = model.raw("norm.weight")
        with pytest.raises(GGUFMissingKey, match="nope"):
            model.raw("nope")
    with pytest.raises(GGUFClosed):
        model.raw("norm.weight")
    assert view.tolist() == list(struct.pack("<8f", *range(8)))  # views outlive close()


def test_unsupported_tensor_type_is_named() -> None:
    model = GGUFFile.from_bytes(build([], [Tensor("blk.0.weird", IQ2_XXS, [256], b"\0" * 66)]).data)
    assert model.tensors["blk.0.weird"].ggml_type == GGMLType.IQ2_XXS  # the table reads fine
    with pytest.raises(UnsupportedQuantType, match=r"IQ2_XXS.*blk\.0\.weird"):
        model.dequantize("blk.0.weird")


def test_architecture_must_be_a_present_string() -> None:
    with pytest.raises(GGUFMissingKey, match="general.architecture"):
        _ = GGUFFile.from_bytes(build([]).data).architecture
    with pytest.raises(GGUFBadMetadataType, match="general.architecture"):
        _ = GGUFFile.from_bytes(build([("general.architecture", Value(VT.UINT32, 1))]).data).architecture


def test_empty_missing_or_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(GGUFTruncated, match="offset 0"):
        GGUFFile.open(path)
    with pytest.raises(GGUFUnreadable, match="missing.gguf"):
        GGUFFile.open(tmp_path / "missing.gguf")
    with pytest.raises(GGUFUnreadable):
        GGUFFile.open(tmp_path)  # a directory


# ---------------------------------------------------------------------------------------------
# Property: whatever the builder writes (random metadata and tensors), the reader reads back.
# ---------------------------------------------------------------------------------------------

_SCALAR_STRATEGIES: dict[int, st.SearchStrategy[object]] = {
    VT.UINT8: st.integers(0, 2**8 - 1),
    VT.INT8: st.integers(-(2**7), 2**7 - 1),
    VT.UINT16: st.integers(0, 2**16 - 1),
    VT.INT16: st.integers(-(2**15), 2**15 - 1),
    VT.UINT32: st.integers(0, 2**32 - 1),
    VT.INT32: st.integers(-(2**31), 2**31 - 1),
    VT.UINT64: st.integers(0, 2**64 - 1),
    VT.INT64: st.integers(-(2**63), 2**63 - 1),
    VT.FLOAT32: st.floats(width=32, allow_nan=False),
    VT.FLOAT64: st.floats(allow_nan=False),
    VT.BOOL: st.booleans(),
    VT.STRING: st.text(max_size=12),
}


def _typed_value(depth: int) -> st.SearchStrategy[tuple[Meta, object]]:
    scalar = st.sampled_from(sorted(_SCALAR_STRATEGIES)).flatmap(
        lambda t: _SCALAR_STRATEGIES[t].map(lambda v: (Value(t, v), v))
    )
    if depth == 0:
        return scalar

    def array_of(t: int) -> st.SearchStrategy[tuple[Meta, object]]:
        if t == VT.ARRAY:
            inner = st.lists(_typed_value(depth - 1).filter(lambda mv: isinstance(mv[0], Array)), max_size=3)
            return inner.map(lambda items: (Array(VT.ARRAY, [m for m, _ in items]), [v for _, v in items]))
        return st.lists(_SCALAR_STRATEGIES[t], max_size=5).map(lambda vs: (Array(t, vs), vs))

    arrays = st.sampled_from([*sorted(_SCALAR_STRATEGIES), VT.ARRAY]).flatmap(array_of)
    return st.one_of(scalar, arrays)


@settings(max_examples=examples(200))
@given(
    entries=st.dictionaries(st.text(min_size=1, max_size=10), _typed_value(2), max_size=6),
    version=st.sampled_from([2, 3]),
    dims=st.lists(st.lists(st.integers(1, 3), min_size=0, max_size=4), max_size=4),
)
def test_builder_files_read_back(entries: dict[str, tuple[Meta, object]], version: int, dims: list[list[int]]) -> None:
    tensors = []
    for i, d in enumerate(dims):
        kind, row = (Q8_0, 32) if i % 2 else (F32, 1)
        ggml_dims = [row * (d[0] if d else 1), *d[1:]] if d else ([32] if kind == Q8_0 else [])
        n = math.prod(ggml_dims)
        nbytes = n * 4 if kind == F32 else n // 32 * 34
        tensors.append(Tensor(f"t{i}", kind, ggml_dims, bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256)))
    built = build([(k, m) for k, (m, _) in entries.items()], tensors, version=version)
    model = GGUFFile.from_bytes(built.data)
    assert model.version == version
    assert list(model.metadata) == list(entries)
    for key, (meta, value) in entries.items():
        assert _normalise(model.metadata[key]) == _normalise(_as_stored(meta, value)), key
    assert list(model.tensors) == [t.name for t in tensors]
    for t in tensors:
        info = model.tensors[str(t.name)]
        assert info.dims == tuple(t.dims) and info.nbytes == len(t.data)
        assert model.raw(info.name).tobytes() == t.data


def _as_stored(meta: Meta, value: object) -> object:
    """The value as the file stores it: float32 values rounded to float32."""
    if isinstance(meta, Value):
        return float(np.float32(value)) if meta.type == VT.FLOAT32 else value  # type: ignore[arg-type]
    if meta.item_type == VT.FLOAT32:
        return [float(np.float32(v)) for v in meta.items]  # type: ignore[arg-type]
    if meta.item_type == VT.ARRAY:
        return [_as_stored(m, None) for m in meta.items if isinstance(m, Array)]
    return list(meta.items)


def _normalise(value: object) -> object:
    # -0.0 == 0.0 in Python; compare floats by their bits.
    if isinstance(value, float):
        return ("f", struct.pack("<d", value))
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value
