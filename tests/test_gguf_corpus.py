"""A corpus of malformed GGUF files, each made here, each giving its own typed error.

Every message must name the byte offset (``offset N``) and the field; where the offset is known
exactly from the builder's field map, the test checks the number too.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.support.gguf_builder import (
    F32,
    Q4_0,
    Q8_0,
    VT,
    Array,
    Built,
    Meta,
    Tensor,
    Value,
    build,
    small_model,
    tensor_bytes,
)
from verispec.reference.errors import GGUFError
from verispec.reference.gguf import (
    GGUFBadAlignment,
    GGUFBadKey,
    GGUFBadMagic,
    GGUFBadMetadataType,
    GGUFBadShape,
    GGUFBadString,
    GGUFBadTensorType,
    GGUFBigEndian,
    GGUFDuplicateKey,
    GGUFDuplicateTensor,
    GGUFFile,
    GGUFLimitExceeded,
    GGUFTensorMisaligned,
    GGUFTensorOutOfBounds,
    GGUFTruncated,
    GGUFUnsupportedVersion,
)

ARCH: tuple[str, Meta] = ("general.architecture", Value(VT.STRING, "toy"))


def parse(data: bytes) -> GGUFFile:
    return GGUFFile.from_bytes(data)


def patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def expect(data: bytes, error: type[GGUFError], *, offset: int | None = None, field: str = "") -> str:
    with pytest.raises(error) as caught:
        parse(data)
    message = str(caught.value)
    assert "offset " in message, message
    if offset is not None:
        assert f"offset {offset}:" in message, message
    assert field in message, message
    return message


# ---------------------------------------------------------------------------------------------
# Truncation: at every field boundary, and at every byte.
# ---------------------------------------------------------------------------------------------

SEED = small_model()
HEADER_END = SEED.at["padding"]  # end of the tensor table


def _truncation_error(cut: int) -> type[GGUFError]:
    # Cut inside the header, metadata or tensor table: the file ends before a field it announces.
    # Cut in the padding or data: the table is whole but a tensor's bytes are missing.
    return GGUFTruncated if cut < HEADER_END else GGUFTensorOutOfBounds


@pytest.mark.parametrize(("name", "cut"), SEED.boundaries(), ids=[n for n, _ in SEED.boundaries()])
def test_truncated_at_every_section_boundary(name: str, cut: int) -> None:
    expect(SEED.data[:cut], _truncation_error(cut))


def test_truncated_at_every_byte() -> None:
    for cut in range(len(SEED.data)):
        if cut >= SEED.at["tensor[3].data"] + 144:  # only the final padding is gone: still valid
            parse(SEED.data[:cut])
            continue
        with pytest.raises(_truncation_error(cut)):
            parse(SEED.data[:cut])
    parse(SEED.data)


def test_truncated_file_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(SEED.data[:10])
    with pytest.raises(GGUFTruncated, match="offset 8: header tensor_count"):
        GGUFFile.open(path)


# ---------------------------------------------------------------------------------------------
# Header.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [b"GGML", b"gguf", b"FUGG", b"\0\0\0\0", b"GGUg"])
def test_wrong_magic(magic: bytes) -> None:
    message = expect(build([ARCH], magic=magic).data, GGUFBadMagic, offset=0, field="magic")
    assert repr(magic) in message


@pytest.mark.parametrize("version", [0, 1, 4, 7, 0xFFFFFFFF])
def test_unsupported_version(version: int) -> None:
    message = expect(build([ARCH], version=version).data, GGUFUnsupportedVersion, offset=4, field="version")
    assert str(version) in message


def test_big_endian_file() -> None:
    data = patch(build([ARCH]).data, 4, struct.pack(">I", 3))
    message = expect(data, GGUFBigEndian, offset=4, field="version")
    assert "big-endian" in message


@pytest.mark.parametrize(
    ("tensor_count", "kv_count"),
    [(0, 2**62), (2**63 - 1, 0), (2**40, 2**40), (2**64 - 1, 0), (0, 2**63)],
)
def test_absurd_counts(tensor_count: int, kv_count: int) -> None:
    data = build([ARCH], tensor_count=tensor_count, kv_count=kv_count).data
    expect(data, GGUFLimitExceeded, offset=8, field="count")


def test_counts_one_too_many() -> None:
    # Plausible counts that the file does not contain: the reader runs off the end.
    built = build([ARCH, ("b", Value(VT.UINT32, 1))], kv_count=3)
    data = built.data + struct.pack("<Q", 3) + b"abc"  # a third key, then the file ends
    expect(data, GGUFTruncated, offset=len(data), field="kv 'abc' value type")


# ---------------------------------------------------------------------------------------------
# Metadata.
# ---------------------------------------------------------------------------------------------


def test_absurd_string_length() -> None:
    built = build([ARCH, ("general.name", Value(VT.STRING, "abc"))])
    at = built.at["kv[1].value"]
    expect(patch(built.data, at, struct.pack("<Q", 2**63)), GGUFLimitExceeded, offset=at, field="general.name")


def test_absurd_key_length() -> None:
    built = build([ARCH, ("general.name", Value(VT.STRING, "abc"))])
    at = built.at["kv[1]"]
    expect(patch(built.data, at, struct.pack("<Q", 2**64 - 1)), GGUFLimitExceeded, offset=at, field="kv[1] key")


def _nested(depth: int) -> Array:
    array = Array(VT.INT8, [1])
    for _ in range(depth - 1):
        array = Array(VT.ARRAY, [array])
    return array


def test_nesting_depth_is_bounded() -> None:
    # 64 levels read fine; 65 is refused before Python's recursion limit could be reached (a file of
    # a few hundred kilobytes could otherwise nest 10^4 levels deep).
    value = GGUFFile.from_bytes(build([ARCH, ("deep", _nested(64))]).data).metadata["deep"]
    for _ in range(63):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == [1]
    built = build([ARCH, ("deep", _nested(65))])
    expect(built.data, GGUFLimitExceeded, field="deeper than 64")
    # 10,000 levels, spelled out by hand (the builder itself recurses)
    levels = 10_000
    payload = struct.pack("<IQ", VT.ARRAY, 1) * (levels - 1) + struct.pack("<IQ", VT.INT8, 1) + b"\x01"
    kv = struct.pack("<Q", 4) + b"deep" + struct.pack("<I", VT.ARRAY) + payload
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    expect(header + kv, GGUFLimitExceeded, offset=len(header) + 16 + 64 * 12, field="deeper than 64")


@pytest.mark.parametrize("item_type", [VT.UINT8, VT.FLOAT64, VT.STRING, VT.ARRAY, VT.BOOL])
def test_absurd_array_count(item_type: int) -> None:
    built = build([ARCH, ("arr", Array(item_type, []))])
    at = built.at["kv[1].value.count"]
    expect(patch(built.data, at, struct.pack("<Q", 2**61)), GGUFLimitExceeded, offset=at, field="'arr'")


def test_absurd_nested_array_count() -> None:
    built = build([ARCH, ("arr", Array(VT.ARRAY, [Array(VT.INT32, [1, 2])]))])
    at = built.at["kv[1].value[0].count"]
    expect(patch(built.data, at, struct.pack("<Q", 2**50)), GGUFLimitExceeded, offset=at, field="'arr' value[0]")


@pytest.mark.parametrize("where", ["key", "value", "array item", "tensor name"])
def test_invalid_utf8(where: str) -> None:
    bad = b"ok\xff\xfe"
    meta: list[tuple[str | bytes, Meta]] = [ARCH]
    tensors: list[Tensor] = []
    if where == "key":
        meta.append((b"general." + bad, Value(VT.UINT8, 1)))
    elif where == "value":
        meta.append(("general.name", Value(VT.STRING, bad)))
    elif where == "array item":
        meta.append(("tokenizer.ggml.tokens", Array(VT.STRING, ["a", bad])))
    else:
        tensors.append(Tensor(b"blk." + bad, F32, [1], b"\0" * 4))
    built = build(meta, tensors)
    start = built.at[
        {"key": "kv[1]", "value": "kv[1].value", "array item": "kv[1].value[1]", "tensor name": "tensor[0]"}[where]
    ]
    prefix = {"key": 10, "value": 2, "array item": 2, "tensor name": 6}[where]  # valid bytes first
    offset = start + 8 + prefix  # after the u64 length and the valid prefix: the first bad byte
    message = expect(built.data, GGUFBadString, offset=offset, field="UTF-8")
    assert {"key": "kv[1] key", "value": "general.name", "array item": "[1]", "tensor name": "tensor[0]"}[
        where
    ] in message


def test_duplicate_key() -> None:
    built = build([ARCH, ("a", Value(VT.UINT8, 1)), ("a", Value(VT.UINT8, 2))])
    expect(built.data, GGUFDuplicateKey, offset=built.at["kv[2]"], field="'a'")


def test_empty_key() -> None:
    built = build([ARCH, ("", Value(VT.UINT8, 1))])
    expect(built.data, GGUFBadKey, offset=built.at["kv[1]"], field="kv[1] key")


@pytest.mark.parametrize("tag", [13, 255, 0xFFFFFFFF])
def test_unknown_value_type(tag: int) -> None:
    built = build([ARCH, ("x", Value(VT.UINT8, 1))])
    at = built.at["kv[1].type"]
    expect(patch(built.data, at, struct.pack("<I", tag)), GGUFBadMetadataType, offset=at, field=str(tag))


def test_unknown_array_item_type() -> None:
    built = build([ARCH, ("x", Array(VT.UINT8, [1]))])
    at = built.at["kv[1].value.item_type"]
    expect(patch(built.data, at, struct.pack("<I", 99)), GGUFBadMetadataType, offset=at, field="'x' value item")


@pytest.mark.parametrize("alignment", [0, 3, 48, 2**32 - 1])
def test_bad_alignment(alignment: int) -> None:
    built = build([ARCH, ("general.alignment", Value(VT.UINT32, alignment))])
    message = expect(built.data, GGUFBadAlignment, offset=built.at["kv[1].type"], field="general.alignment")
    assert str(alignment) in message


@pytest.mark.parametrize("value", [Value(VT.UINT64, 32), Value(VT.STRING, "32"), Value(VT.BOOL, True)])
def test_alignment_of_wrong_type(value: Value) -> None:
    built = build([ARCH, ("general.alignment", value)])
    expect(built.data, GGUFBadAlignment, offset=built.at["kv[1].type"], field="must be a u32")


# ---------------------------------------------------------------------------------------------
# Tensor table.
# ---------------------------------------------------------------------------------------------


def _one_tensor(tensor: Tensor) -> Built:
    return build([ARCH], [tensor])


def test_tensor_past_eof() -> None:
    built = _one_tensor(Tensor("w", F32, [8], b"\0" * 32))
    at = built.at["tensor[0].offset"]
    for offset in (64, 2**40, 2**64 - 32):
        expect(
            patch(built.data, at, struct.pack("<Q", offset)),
            GGUFTensorOutOfBounds,
            offset=built.at["tensor[0]"],
            field="'w'",
        )


def test_tensor_overhanging_eof() -> None:
    built = _one_tensor(Tensor("w", F32, [8], b"\0" * 32))
    expect(built.data[: built.data_start + 31], GGUFTensorOutOfBounds, field="past the end")


def test_tensor_misaligned() -> None:
    built = _one_tensor(Tensor("w", F32, [8], b"\0" * 32))
    at = built.at["tensor[0].offset"]
    expect(patch(built.data, at, struct.pack("<Q", 4)), GGUFTensorMisaligned, field="alignment 32")


def test_duplicate_tensor_names() -> None:
    built = build([ARCH], [Tensor("w", F32, [8], b"\0" * 32), Tensor("w", F32, [8], b"\0" * 32)])
    expect(built.data, GGUFDuplicateTensor, offset=built.at["tensor[1]"], field="tensor[1] 'w'")


def test_too_many_dims() -> None:
    built = _one_tensor(Tensor("w", F32, [1, 1, 1, 1, 1], b"\0" * 4))
    expect(built.data, GGUFBadShape, offset=built.at["tensor[0].n_dims"], field="5 dims")


def test_negative_dim() -> None:
    built = _one_tensor(Tensor("w", F32, [4, -2], b""))
    expect(built.data, GGUFBadShape, offset=built.at["tensor[0].n_dims"], field="negative")


def test_dims_overflow() -> None:
    built = _one_tensor(Tensor("w", F32, [2**32, 2**32], b""))
    expect(built.data, GGUFLimitExceeded, offset=built.at["tensor[0].n_dims"], field="overflow")


def test_huge_but_representable_tensor_is_out_of_bounds() -> None:
    built = _one_tensor(Tensor("w", Q8_0, [2**31, 2**20], b""))
    expect(built.data, GGUFTensorOutOfBounds, field="'w'")


@pytest.mark.parametrize("ggml_type", [4, 5, 31, 36, 42, 2**31])
def test_unknown_tensor_type(ggml_type: int) -> None:
    built = _one_tensor(Tensor("w", F32, [8], b"\0" * 32))
    at = built.at["tensor[0].type"]
    expect(patch(built.data, at, struct.pack("<I", ggml_type)), GGUFBadTensorType, offset=at, field=str(ggml_type))


def test_row_not_whole_blocks() -> None:
    built = _one_tensor(Tensor("w", Q4_0, [33, 2], tensor_bytes(Q4_0, [32, 2])))
    expect(built.data, GGUFBadShape, field="block of 32")


def test_tensor_name_too_long() -> None:
    built = _one_tensor(Tensor("n" * 64, F32, [1], b"\0" * 4))
    expect(built.data, GGUFLimitExceeded, offset=built.at["tensor[0]"], field="longer than 63")


def test_absurd_tensor_name_length() -> None:
    built = _one_tensor(Tensor("w", F32, [1], b"\0" * 4))
    at = built.at["tensor[0]"]
    expect(patch(built.data, at, struct.pack("<Q", 2**62)), GGUFLimitExceeded, offset=at, field="tensor[0] name")
