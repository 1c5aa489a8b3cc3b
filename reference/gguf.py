"""The GGUF container: header, metadata, tensor table and zero-copy tensor views.

A GGUF file (versions 2 and 3, little-endian) is laid out as::

    magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
    kv_count x   ( key: string | value_type u32 | value )
    tensor_count x ( name: string | n_dims u32 | dims u64[n_dims] | ggml_type u32 | offset u64 )
    padding to `general.alignment` (default 32)
    data section: tensor bytes, each at data_start + offset (offset a multiple of the alignment)

    string = length u64 | UTF-8 bytes (no terminator)
    value  = scalar (u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64) | string
           | array: item_type u32 | count u64 | count x value-of-item_type (arrays may nest)

Dims are in ggml order (``ne0``, the contiguous one, first); the numpy shape is the reverse.

The file is mapped with ``np.memmap`` and never copied: :meth:`GGUFFile.raw` is a view into the
mapping. Parsing follows llama.cpp's ``gguf_init_from_file_impl`` and checks every length and count
against the bytes that remain *before* it allocates anything, so a hostile or corrupt file costs at
most a small multiple of its own size and ends in a typed :class:`~reference.errors.GGUFError`
whose message names the byte offset and the field. Two deliberate departures from llama.cpp:

* nested arrays (an array of arrays) are accepted, as gguf-py does (llama.cpp rejects them);
* tensor data need only be aligned and inside the file; llama.cpp also insists that tensors are
  packed back to back in table order, which every writer does but nothing here relies on.
"""

from __future__ import annotations

import enum
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Union

import numpy as np
import numpy.typing as npt

from verispec.reference import quants
from verispec.reference.errors import (  # the classes live in reference/errors.py; re-exported here
    GGUFBadAlignment,
    GGUFBadKey,
    GGUFBadMagic,
    GGUFBadMetadataType,
    GGUFBadShape,
    GGUFBadString,
    GGUFBadTensorType,
    GGUFBigEndian,
    GGUFClosed,
    GGUFDuplicateKey,
    GGUFDuplicateTensor,
    GGUFError,
    GGUFLimitExceeded,
    GGUFMissingKey,
    GGUFSizeExceedsFile,
    GGUFTensorMisaligned,
    GGUFTensorOutOfBounds,
    GGUFTruncated,
    GGUFUnreadable,
    GGUFUnsupportedVersion,
    UnsupportedQuantType,
)
from verispec.reference.quants import GGMLType

__all__ = [
    "GGMLType",
    "GGUFValueType",
    "MetadataValue",
    "TensorInfo",
    "GGUFFile",
    "GGUFError",
    "GGUFTruncated",
    "GGUFBadMagic",
    "GGUFUnsupportedVersion",
    "GGUFBigEndian",
    "GGUFBadAlignment",
    "GGUFLimitExceeded",
    "GGUFSizeExceedsFile",
    "GGUFBadString",
    "GGUFBadKey",
    "GGUFDuplicateKey",
    "GGUFBadMetadataType",
    "GGUFMissingKey",
    "GGUFDuplicateTensor",
    "GGUFBadTensorType",
    "GGUFBadShape",
    "GGUFTensorOutOfBounds",
    "GGUFTensorMisaligned",
    "GGUFClosed",
    "GGUFUnreadable",
    "UnsupportedQuantType",
]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the terminating NUL
MAX_ARRAY_DEPTH = 64  # arrays of arrays: real files nest at most once; this bounds the recursion

# A Python list, not a numpy array: metadata is small, except the tokenizer's arrays, which the
# tokenizer wants as Python objects anyway.
MetadataValue = Union[str, int, float, bool, list["MetadataValue"]]


# ---------------------------------------------------------------------------------------------
# Metadata value types.
# ---------------------------------------------------------------------------------------------


class GGUFValueType(enum.IntEnum):
    """The type tag in front of every metadata value (gguf.h ``enum gguf_type``)."""

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


# Little-endian numpy dtype of each fixed-size scalar type.
_SCALAR_DTYPES: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}

# Fewest bytes one value of each type can occupy: what an array count is checked against.
_MIN_VALUE_BYTES: dict[GGUFValueType, int] = {
    **{t: np.dtype(d).itemsize for t, d in _SCALAR_DTYPES.items()},
    GGUFValueType.STRING: 8,  # length, empty string
    GGUFValueType.ARRAY: 4 + 8,  # item type, count zero
}

_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, one key byte, type, smallest value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_INT64_MAX = 2**63 - 1
_F32_BYTES = 4  # a tensor decodes to float32: its shape must be addressable at 4 bytes an element


# ---------------------------------------------------------------------------------------------
# The tensor table.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One row of the tensor table. ``dims`` in ggml order (ne0 first); ``shape`` = reversed dims."""

    name: str
    ggml_type: int
    dims: tuple[int, ...]  # ggml order: dims[0] is the contiguous one
    shape: tuple[int, ...]  # numpy order: reversed(dims)
    offset: int  # absolute byte offset of the data in the file
    nbytes: int
    n_elements: int

    @property
    def type_name(self) -> str:
        """ggml's name for the type (``"Q4_K"``)."""
        return quants.type_name(self.ggml_type)


# ---------------------------------------------------------------------------------------------
# The parser: a cursor over the mapped bytes that checks before it reads.
# ---------------------------------------------------------------------------------------------


_U64 = struct.Struct("<Q")


class _Cursor:
    """Reads little-endian fields from ``buf`` at ``pos``; every read is bounds-checked first."""

    def __init__(self, buf: npt.NDArray[np.uint8]) -> None:
        self.buf = buf
        self.view = memoryview(buf)  # type: ignore[arg-type]  # 1-D uint8, C-contiguous
        self.size = int(buf.size)
        self.pos = 0

    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, n: int, field: str) -> None:
        """Raise GGUFTruncated unless ``n`` more bytes exist at the cursor."""
        if n > self.remaining():
            raise GGUFTruncated(
                f"offset {self.pos}: {field} needs {n} bytes but the file ends after {self.remaining()}"
            )

    def scalar(self, fmt: str, field: str) -> int | float:
        size = struct.calcsize(fmt)
        self.need(size, field)
        (value,) = struct.unpack_from(fmt, self.view, self.pos)
        self.pos += size
        result: int | float = value
        return result

    def u32(self, field: str) -> int:
        return int(self.scalar("<I", field))

    def u64(self, field: str) -> int:
        return int(self.scalar("<Q", field))

    def i64(self, field: str) -> int:
        return int(self.scalar("<q", field))

    def string(self, field: str) -> str:
        start = self.pos
        length = self.u64(f"{field} length")
        if length > self.remaining():
            raise GGUFSizeExceedsFile(
                f"offset {start}: {field} length {length} exceeds the {self.remaining()} bytes left in the file"
            )
        raw = self.view[self.pos : self.pos + length]
        try:
            text = str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFBadString(f"offset {self.pos + exc.start}: {field} is not valid UTF-8 ({exc.reason})") from None
        self.pos += length
        return text

    def strings(self, field: str, count: int) -> list[str]:
        """``count`` strings in a row, each read as :meth:`string` reads ``field[i]``, in one tight
        loop (a tokenizer's vocabulary and merges are hundreds of thousands of strings). The loop
        checks the same bounds; a string it would not read (a length past the end, bad UTF-8) is
        read by :meth:`string` itself, so the error, its type, offset and message are the same."""
        out: list[str] = []
        view, size, unpack = self.view, self.size, _U64.unpack_from
        pos = self.pos
        for i in range(count):
            start = pos + 8
            if start <= size:
                (length,) = unpack(view, pos)
                stop = start + length
                if stop <= size:
                    try:
                        out.append(str(view[start:stop], "utf-8"))
                        pos = stop
                        continue
                    except UnicodeDecodeError:
                        pass
            self.pos = pos
            out.append(self.string(f"{field}[{i}]"))  # raises the typed error
            pos = self.pos
        self.pos = pos
        return out

    def value_type(self, field: str) -> GGUFValueType:
        start = self.pos
        tag = self.u32(f"{field} type")
        try:
            return GGUFValueType(tag)
        except ValueError:
            raise GGUFBadMetadataType(f"offset {start}: {field} has unknown value type {tag}") from None

    def value(self, kind: GGUFValueType, field: str) -> MetadataValue:
        if kind == GGUFValueType.STRING:
            return self.string(field)
        if kind == GGUFValueType.ARRAY:
            return self.array(field, depth=1)
        dtype = np.dtype(_SCALAR_DTYPES[kind])
        self.need(dtype.itemsize, field)
        item = np.frombuffer(self.buf, dtype=dtype, count=1, offset=self.pos)[0]
        self.pos += dtype.itemsize
        if kind == GGUFValueType.BOOL:
            return bool(item != 0)
        result: int | float = item.item()
        return result

    def array(self, field: str, depth: int) -> list[MetadataValue]:
        if depth > MAX_ARRAY_DEPTH:
            raise GGUFLimitExceeded(f"offset {self.pos}: {field} nests arrays deeper than {MAX_ARRAY_DEPTH}")
        item_kind = self.value_type(f"{field} item")
        start = self.pos
        count = self.u64(f"{field} count")
        least = count * _MIN_VALUE_BYTES[item_kind]
        if least > self.remaining():
            raise GGUFSizeExceedsFile(
                f"offset {start}: {field} count {count} of {item_kind.name} needs at least {least} bytes, "
                f"only {self.remaining()} left in the file"
            )
        if item_kind in _SCALAR_DTYPES:
            dtype = np.dtype(_SCALAR_DTYPES[item_kind])
            items = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += count * dtype.itemsize
            if item_kind == GGUFValueType.BOOL:
                flags: list[MetadataValue] = (items != 0).tolist()
                return flags
            values: list[MetadataValue] = items.tolist()
            return values
        if item_kind == GGUFValueType.STRING:
            strings: list[MetadataValue] = list(self.strings(field, count))
            return strings
        return [self.array(f"{field}[{i}]", depth + 1) for i in range(count)]


def _align(offset: int, alignment: int) -> int:
    return (offset + alignment - 1) // alignment * alignment


def _read_header(cur: _Cursor) -> tuple[int, int, int]:
    """Magic, version and the two counts; returns ``(version, tensor_count, kv_count)``."""
    cur.need(4, "header magic")
    magic = bytes(cur.view[0:4])
    if magic != GGUF_MAGIC:
        raise GGUFBadMagic(f"offset 0: header magic is {magic!r}, expected {GGUF_MAGIC!r}")
    cur.pos = 4
    version = cur.u32("header version")
    if version & 0xFFFF == 0 and version != 0:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        raise GGUFBigEndian(
            f"offset 4: header version reads {version:#010x} (version {swapped} byte-swapped): "
            "a big-endian GGUF file; only little-endian files are supported"
        )
    if version not in SUPPORTED_VERSIONS:
        raise GGUFUnsupportedVersion(
            f"offset 4: header version is {version}; supported versions are "
            + " and ".join(str(v) for v in SUPPORTED_VERSIONS)
        )
    counts_at = cur.pos
    tensor_count = cur.i64("header tensor_count")
    kv_count = cur.i64("header kv_count")
    if tensor_count < 0 or kv_count < 0:
        raise GGUFLimitExceeded(
            f"offset {counts_at}: header tensor_count {tensor_count} / kv_count {kv_count} is negative"
        )
    least = kv_count * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_INFO_BYTES
    if least > cur.remaining():
        raise GGUFSizeExceedsFile(
            f"offset {counts_at}: header tensor_count {tensor_count} and kv_count {kv_count} need at least "
            f"{least} bytes, only {cur.remaining()} left in the file"
        )
    return version, tensor_count, kv_count


@dataclass
class _Metadata:
    values: dict[str, MetadataValue]
    types: dict[str, int]  # key -> GGUFValueType tag of the value
    offsets: dict[str, int]  # key -> file offset of the value's type tag


def _read_metadata(cur: _Cursor, kv_count: int) -> _Metadata:
    meta = _Metadata({}, {}, {})
    for i in range(kv_count):
        start = cur.pos
        key = cur.string(f"kv[{i}] key")
        if not key:
            raise GGUFBadKey(f"offset {start}: kv[{i}] key is empty")
        if key in meta.values:
            raise GGUFDuplicateKey(f"offset {start}: kv[{i}] key {key!r} appears twice")
        meta.offsets[key] = cur.pos
        kind = cur.value_type(f"kv {key!r} value")
        meta.types[key] = int(kind)
        meta.values[key] = cur.value(kind, f"kv {key!r} value")
    return meta


def _read_alignment(meta: _Metadata) -> int:
    key = "general.alignment"
    if key not in meta.values:
        return DEFAULT_ALIGNMENT
    value, at = meta.values[key], meta.offsets[key]
    if meta.types[key] != GGUFValueType.UINT32 or not isinstance(value, int):
        name = GGUFValueType(meta.types[key]).name
        raise GGUFBadAlignment(f"offset {at}: kv {key!r} value must be a u32, got {name} {value!r}")
    if value <= 0 or value & (value - 1):
        raise GGUFBadAlignment(f"offset {at}: kv {key!r} value {value} is not a power of two")
    return value


def _read_tensor_info(cur: _Cursor, index: int) -> tuple[str, int, tuple[int, ...], int, int]:
    """One table row: ``(name, ggml_type, dims, relative offset, offset of the row)``."""
    row_at = cur.pos
    name = cur.string(f"tensor[{index}] name")
    label = f"tensor[{index}] {name!r}"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise GGUFLimitExceeded(f"offset {row_at}: {label} name is longer than {MAX_NAME_BYTES} bytes")
    dims_at = cur.pos
    n_dims = cur.u32(f"{label} n_dims")
    if n_dims > MAX_DIMS:
        raise GGUFBadShape(f"offset {dims_at}: {label} has {n_dims} dims, at most {MAX_DIMS} allowed")
    dims = tuple(cur.i64(f"{label} dims[{j}]") for j in range(n_dims))
    if any(d < 0 for d in dims):
        raise GGUFBadShape(f"offset {dims_at}: {label} has a negative dim in {dims}")
    # The extent ignores empty dims: a [0, 2^62] tensor holds no element, yet no array of that
    # shape can be made (numpy sizes a shape by its non-zero dims), so it is refused here too.
    extent = 1
    for d in dims:
        extent *= max(d, 1)
    if extent > _INT64_MAX // _F32_BYTES:
        raise GGUFLimitExceeded(f"offset {dims_at}: {label} dims {dims} overflow int64 bytes once decoded to float32")
    type_at = cur.pos
    ggml_type = cur.u32(f"{label} type")
    try:
        kind = GGMLType(ggml_type)
    except ValueError:
        raise GGUFBadTensorType(f"offset {type_at}: {label} has unknown ggml type {ggml_type}") from None
    block_elements, _ = quants.block_layout(kind)
    row = dims[0] if dims else 1
    if row % block_elements:
        raise GGUFBadShape(
            f"offset {dims_at}: {label} row of {row} elements is not a multiple of the "
            f"{kind.name} block of {block_elements}"
        )
    offset = cur.u64(f"{label} offset")
    return name, ggml_type, dims, offset, row_at


class GGUFFile:
    """A parsed GGUF file, memory-mapped read-only. Use as a context manager or call :meth:`close`.

    ``metadata`` maps keys to Python values (arrays become lists); ``tensors`` maps names to
    :class:`TensorInfo` in file order. Tensor bytes are read lazily through the mapping.
    """

    path: Path
    version: int
    alignment: int
    data_offset: int
    file_size: int
    metadata: dict[str, MetadataValue]
    metadata_types: dict[str, int]  # key -> GGUFValueType of its value (ARRAY for arrays)
    tensors: dict[str, TensorInfo]

    def __init__(self, buf: npt.NDArray[np.uint8], path: Path) -> None:
        """Parse ``buf`` (a 1-D uint8 array holding a whole file). Prefer :meth:`open`."""
        self.path = path
        self._buf: npt.NDArray[np.uint8] | None = buf
        self._sha256: str | None = None
        self.file_size = int(buf.size)
        cur = _Cursor(buf)
        self.version, tensor_count, kv_count = _read_header(cur)
        meta = _read_metadata(cur, kv_count)
        self.metadata, self.metadata_types = meta.values, meta.types
        self.alignment = _read_alignment(meta)
        rows = [_read_tensor_info(cur, i) for i in range(tensor_count)]
        self.data_offset = _align(cur.pos, self.alignment) if tensor_count else cur.pos
        self.tensors = self._build_table(rows)

    def _build_table(self, rows: list[tuple[str, int, tuple[int, ...], int, int]]) -> dict[str, TensorInfo]:
        tensors: dict[str, TensorInfo] = {}
        for index, (name, ggml_type, dims, relative, row_at) in enumerate(rows):
            label = f"tensor[{index}] {name!r}"
            if name in tensors:
                raise GGUFDuplicateTensor(f"offset {row_at}: {label} name appears twice in the tensor table")
            if relative % self.alignment:
                raise GGUFTensorMisaligned(
                    f"offset {row_at}: {label} data offset {relative} is not a multiple of the "
                    f"alignment {self.alignment}"
                )
            n_elements = 1
            for d in dims:
                n_elements *= d
            nbytes = quants.tensor_nbytes(ggml_type, n_elements)
            start = self.data_offset + relative
            if start + nbytes > self.file_size:
                raise GGUFTensorOutOfBounds(
                    f"offset {row_at}: {label} data [{start}, {start + nbytes}) lies past the end of "
                    f"the file ({self.file_size} bytes)"
                )
            tensors[name] = TensorInfo(
                name=name,
                ggml_type=ggml_type,
                dims=dims,
                shape=tuple(reversed(dims)),
                offset=start,
                nbytes=nbytes,
                n_elements=n_elements,
            )
        return tensors

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GGUFFile:
        """Map ``path`` read-only and parse it. Raises a GGUFError subclass on a malformed file."""
        file_path = Path(path)
        try:
            size = file_path.stat().st_size
            if size == 0:  # np.memmap cannot map an empty file
                raise GGUFTruncated(f"offset 0: header magic needs 4 bytes but {file_path} is empty")
            buf: npt.NDArray[np.uint8] = np.memmap(file_path, dtype=np.uint8, mode="r")
        except OSError as exc:
            raise GGUFUnreadable(f"cannot read {file_path}: {exc.strerror or exc}") from exc
        return cls(buf, file_path)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "<bytes>") -> GGUFFile:
        """Parse an in-memory GGUF image (no copy: the array views ``data``)."""
        return cls(np.frombuffer(data, dtype=np.uint8), Path(name))

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop this object's reference to the mapping. Views from :meth:`raw` stay valid (they keep
        the mapping alive until they are garbage); further calls here raise :class:`GGUFClosed`."""
        self._buf = None

    def _data(self) -> npt.NDArray[np.uint8]:
        if self._buf is None:
            raise GGUFClosed(f"{self.path} is closed")
        return self._buf

    # -- access -----------------------------------------------------------------------------

    def info(self, name: str) -> TensorInfo:
        """The table row of tensor ``name``; GGUFError naming it when absent."""
        try:
            return self.tensors[name]
        except KeyError:
            raise GGUFMissingKey(f"{self.path}: no tensor named {name!r}") from None

    def raw(self, name: str) -> npt.NDArray[np.uint8]:
        """Zero-copy, read-only ``uint8[nbytes]`` view of tensor ``name``'s bytes in the file."""
        info = self.info(name)
        view = self._data()[info.offset : info.offset + info.nbytes]
        result: npt.NDArray[np.uint8] = np.asarray(view).view(np.ndarray)
        return result

    def dequantize(self, name: str) -> npt.NDArray[np.float32]:
        """Tensor ``name`` decoded to float32 with numpy shape ``tensors[name].shape``.

        Raises ``UnsupportedQuantType`` (naming type and tensor) for types without a decoder.
        """
        info = self.info(name)
        flat = quants.dequantize(self.raw(name), info.ggml_type, info.n_elements, tensor_name=name)
        return flat.reshape(info.shape)

    @property
    def architecture(self) -> str:
        """``general.architecture``; GGUFMissingKey if absent, GGUFBadMetadataType if not a string."""
        value = self.metadata.get("general.architecture")
        if value is None:
            raise GGUFMissingKey(f"{self.path}: metadata has no general.architecture")
        if not isinstance(value, str):
            raise GGUFBadMetadataType(f"{self.path}: general.architecture is {value!r}, not a string")
        return value

    def get(self, key: str, default: MetadataValue | None = None) -> MetadataValue | None:
        """``metadata[key]``, or ``default`` when the key is absent."""
        return self.metadata.get(key, default)

    def sha256(self) -> str:
        """Hex sha256 of the whole file's bytes (computed once, then cached)."""
        if self._sha256 is None:
            digest = hashlib.sha256()
            data = self._data()
            step = 1 << 24
            for start in range(0, data.size, step):
                digest.update(memoryview(np.ascontiguousarray(data[start : start + step])))  # type: ignore[arg-type]
            self._sha256 = digest.hexdigest()
        return self._sha256

    def __repr__(self) -> str:
        return (
            f"GGUFFile({str(self.path)!r}, version={self.version}, tensors={len(self.tensors)}, "
            f"metadata={len(self.metadata)})"
        )
