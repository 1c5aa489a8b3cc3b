"""The int8 mode's ``tile`` layer kernel: the int8 layer law on tiles, one C call a layer half.

The law is reference/int8_layer_law.py's (its glossary defines every term used here). This module
packs a layer's four matrices from their lossless block form (engine/blocks.py) into the tile
layout its C kernel reads (engine/kernels/layer_tile.c: 16 weight rows a tile, per weight block
the rows' scales, their mins where the matrix has them, their zero points where one is not 0, then
the levels in 4-, 5- or 8-bit vectors), and runs a layer's halves as :class:`engine.fused.LayerChain` graphs: the
same inputs and outputs as the onnxruntime graphs (``pre``: x, cos, sin -> qk, v; ``post``: attn,
x -> y; a ``link``: attn, x, cos, sin, enter -> y, qk, v), one C call each instead of one
onnxruntime run, so the engine's attention, KV cache, early exit and verify passes run unchanged
between them.

Every instruction set the kernel has (``avx512-vnni``, ``portable`` C) gives the law's bits, and so
does the fallback where no kernel can be built: the reference's NumPy law, slow and exact.
``VERISPEC_TILE_ISA`` pins one (or ``numpy``); ``avx2``, which the head kernel has, runs the
portable layer kernel here. Threads: the matrices' tiles are shared by a pool of workers that lives
across calls (a decode step makes three matmuls a layer, tens of microseconds apart).

Why: onnxruntime's ``MatMulNBits`` computes a k-row pass row by row and each run costs tens of
microseconds beyond its nodes; here one tile read serves up to 8 activation rows and a layer half
is one call. Its sums are not MLAS's: a model whose layers run here is another int8 law, with the
mode's contract (a k-row pass gives every row the bits of a 1-row pass).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from verispec.engine import native
from verispec.engine.blocks import (
    HALF_SCALE_TYPES,
    LEVEL_BITS,
    KernelBlocks,
    stacked_form,
    stacked_has_zero,
    stacked_level_bits,
)
from verispec.engine.fused import (
    LayerChain,
    LayerMatrices,
    LayerSource,
    check_matrices,
    layer_vector,
    required_vector,
    rotation_matrix,
)
from verispec.engine.tile_head import ISA_ENV
from verispec.reference import int8_layer_law as law
from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, Config
from verispec.reference.errors import ModelError, NativeKernelUnavailable

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

TILE_ROWS = 16
KERNEL_SOURCE = "layer_tile"
ABI_VERSION = 3
ISAS = {"avx512-vnni": 2, "portable": 0}  # the C kernel's ids, best first
ACTIVATIONS = {ACT_SILU: (0, law.ACT_SILU), ACT_GELU_TANH: (1, law.ACT_GELU_TANH)}  # config -> (C id, law name)


@dataclass(frozen=True)
class TileForm:
    """How a matrix's tiles hold a weight block (engine/kernels/layer_tile.c draws the layout)."""

    bits: int  # 4, 5 or 8: the levels' storage width (5: a 4-bit form and a plane of fifth bits)
    block: int  # weights a block: 16 or 32
    has_min: bool  # the block has a min term
    half: bool  # scales and mins stored as float16 (the file's own; exact)
    has_zero: bool  # some zero point is not 0: the zeros are stored

    def block_bytes(self) -> int:
        """Bytes a tile holds per weight block: scales, mins, zeros, levels."""
        scales = TILE_ROWS * (2 if self.half else 4)
        zeros = TILE_ROWS if self.has_zero else 0
        return scales * (2 if self.has_min else 1) + zeros + self.block * TILE_ROWS * self.bits // 8


def storage_bits(form_bits: int, level_bits: int) -> int:
    """The tiles' level width for a block form of ``form_bits`` whose levels need ``level_bits``:
    5-bit levels (Q5_0, Q5_1, Q5_K), which the block form keeps in bytes, in 5 bits."""
    return 5 if form_bits == 8 and level_bits == 5 else form_bits


def tile_form(ggml_types: tuple[int, ...]) -> TileForm | None:
    """The tile form of the matrices of ``ggml_types`` stacked (engine.blocks.concat), from the
    types alone (the load's size formula); None where a part has no block form."""
    form = stacked_form(ggml_types)
    if form is None:
        return None
    bits, block, has_min = form
    half = all(int(t) in HALF_SCALE_TYPES for t in ggml_types)
    bits = storage_bits(bits, stacked_level_bits(ggml_types))
    return TileForm(bits, block, has_min, half, stacked_has_zero(ggml_types))


def _exactly_half(a: npt.NDArray[np.float32]) -> bool:
    """Every element of ``a`` is a float16 value (the same bits back through float16)."""
    with np.errstate(over="ignore"):
        back = a.astype(np.float16).astype(np.float32)
    return bool(np.array_equal(back.view(np.uint32), a.view(np.uint32)))


def form_of(kb: KernelBlocks) -> TileForm:
    """The tile form of ``kb``: float16 scales where every source type stores them so (and, checked,
    every scale and min is one), zeros where one is not 0, 5-bit levels where every source type's
    levels are 5-bit (checked: every level < 32)."""
    types = tuple(int(t) for t in kb.source_types)
    half = bool(types) and all(t in HALF_SCALE_TYPES for t in types)
    if half and not (_exactly_half(kb.scales) and (kb.mins is None or _exactly_half(kb.mins))):
        raise ModelError(f"block scales of types {kb.source_types} are not all float16 values")
    known = bool(types) and all(t in LEVEL_BITS for t in types)
    bits = storage_bits(kb.bits, stacked_level_bits(types)) if known else kb.bits
    if bits == 5 and int(kb.levels.max(initial=0)) >= 32:
        raise ModelError(f"levels of types {kb.source_types} pass 5 bits")
    return TileForm(bits, kb.block, kb.mins is not None, half, bool(kb.zeros.any()))


def pack_tiles(kb: KernelBlocks, form: TileForm) -> U8:
    """A matrix in block form -> its tiles, flat, in ``form`` (:func:`form_of` ``kb``; the C
    kernel's module doc draws the layout). Rows past the last full tile are padding: scale, min,
    zero and levels 0, never stored back."""
    n, k = kb.shape
    size = kb.block
    nbw, n_tiles, padded = k // size, -(-n // TILE_ROWS), -(-n // TILE_ROWS) * TILE_ROWS
    width, lanes = (np.float16, 32) if form.half else (np.float32, 64)

    def rows(a: npt.NDArray[Any]) -> npt.NDArray[Any]:  # [n, ...] -> [tiles, nbw, 16, ...] with padding
        out = np.zeros((padded, *a.shape[1:]), dtype=a.dtype)
        out[:n] = a
        return np.ascontiguousarray(out.reshape(n_tiles, TILE_ROWS, nbw, *a.shape[2:]).swapaxes(1, 2))

    levels = rows(kb.levels.reshape(n, nbw, size))  # [tiles, nbw, 16, B]
    vectors = levels.reshape(n_tiles, nbw, TILE_ROWS, size // 4, 4).transpose(0, 1, 3, 2, 4)  # [.., B/4, 16, 4]
    fifth = None  # 5-bit levels: bit (4 i + u) of mask j = bit 4 of row i's level 4 j + u
    if form.bits == 5:
        fifth = np.packbits((vectors >> np.uint8(4)).reshape(n_tiles, nbw, size // 4, 64), axis=-1, bitorder="little")
        vectors = vectors & np.uint8(0x0F)
    if form.bits in (4, 5):
        half = size // 8
        vectors = vectors[:, :, :half] | (vectors[:, :, half:] << np.uint8(4))
    parts = [rows(kb.scales[:, :, None].astype(width)).view(np.uint8).reshape(n_tiles, nbw, lanes)]
    if kb.mins is not None:
        parts.append(rows(kb.mins[:, :, None].astype(width)).view(np.uint8).reshape(n_tiles, nbw, lanes))
    if form.has_zero:
        parts.append(rows(kb.zeros[:, :, None]).reshape(n_tiles, nbw, TILE_ROWS))
    parts.append(np.ascontiguousarray(vectors, dtype=np.uint8).reshape(n_tiles, nbw, -1))
    if fifth is not None:
        parts.append(fifth.reshape(n_tiles, nbw, -1))
    tiles = np.ascontiguousarray(np.concatenate(parts, axis=2)).reshape(-1)
    assert tiles.size == n_tiles * nbw * form.block_bytes()
    return tiles


# -- the C side ------------------------------------------------------------------------------------


class LtMatrix(ctypes.Structure):
    _fields_ = [
        ("tiles", ctypes.c_void_p),
        ("n_out", ctypes.c_int),
        ("K", ctypes.c_int),
        ("bits", ctypes.c_int),
        ("block", ctypes.c_int),
        ("has_min", ctypes.c_int),
        ("tbb", ctypes.c_int),
        ("has_zero", ctypes.c_int),
        ("half", ctypes.c_int),
    ]


def matrix_struct(kb: KernelBlocks, form: TileForm, tiles_address: int) -> LtMatrix:
    """The C kernel's view of ``kb`` packed in ``form`` by :func:`pack_tiles` at ``tiles_address``."""
    n, k = kb.shape
    return LtMatrix(tiles_address, n, k, form.bits, kb.block, int(form.has_min), form.block_bytes(),
                    int(form.has_zero), int(form.half))  # fmt: skip


class LtLayer(ctypes.Structure):
    _fields_ = [
        ("E", ctypes.c_int),
        ("n_head", ctypes.c_int),
        ("n_kv", ctypes.c_int),
        ("d", ctypes.c_int),
        ("n_ff", ctypes.c_int),
        ("act", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("attn_norm", ctypes.c_void_p),
        ("qkv", LtMatrix),
        ("bqkv", ctypes.c_void_p),
        ("q_norm", ctypes.c_void_p),
        ("k_norm", ctypes.c_void_p),
        ("rot", ctypes.c_void_p),
        ("o", LtMatrix),
        ("bo", ctypes.c_void_p),
        ("post_attn_norm", ctypes.c_void_p),
        ("ffn_norm", ctypes.c_void_p),
        ("gu", LtMatrix),
        ("down", LtMatrix),
        ("post_ffn_norm", ctypes.c_void_p),
    ]


class LtAttention(ctypes.Structure):
    _fields_ = [
        ("n_head", ctypes.c_int),
        ("n_kv", ctypes.c_int),
        ("d", ctypes.c_int),
        ("window", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("head_stride", ctypes.c_long),
        ("key_pos", ctypes.c_void_p),
    ]


Kernel = native.Kernel


def _bind(library: ctypes.CDLL) -> None:
    ptr, c_int = ctypes.c_void_p, ctypes.c_int
    library.lt_abi_version.restype = c_int
    library.lt_isa_supported.argtypes, library.lt_isa_supported.restype = [c_int], c_int
    library.lt_exp.argtypes, library.lt_exp.restype = [ptr, ptr, c_int, c_int], None
    library.lt_activation.argtypes, library.lt_activation.restype = [ptr, ptr, c_int, c_int, c_int], None
    library.lt_matmul.argtypes, library.lt_matmul.restype = [ptr, ptr, c_int, ptr, c_int, c_int], c_int
    library.lt_pre.argtypes = [ptr, c_int, ptr, ptr, ptr, ptr, ptr, c_int, c_int]
    library.lt_post.argtypes = [ptr, c_int, ptr, ptr, ptr, c_int, c_int]
    library.lt_link.argtypes = [ptr, ptr, c_int, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, c_int, c_int]
    library.lt_pre.restype = library.lt_post.restype = library.lt_link.restype = c_int
    library.lt_attend.argtypes = [ptr, c_int, ptr, ptr, ptr, c_int, ptr, ptr, c_int]
    library.lt_attend.restype = c_int


SPEC = native.KernelSpec(KERNEL_SOURCE, ABI_VERSION, ISAS, _bind, "lt_abi_version", "lt_isa_supported")


def load_kernel(isa: str | None = None) -> Kernel:
    """The C kernel on ``isa`` (None: ``VERISPEC_TILE_ISA``, else the best this CPU supports; the
    head's ``avx2`` runs ``portable`` here). NativeKernelUnavailable when it cannot be built or
    loaded, or the CPU lacks ``isa``."""
    wanted = isa if isa is not None else os.environ.get(ISA_ENV) or None
    if wanted == "avx2":
        wanted = "portable"
    if wanted is not None and wanted not in ISAS:
        raise ModelError(f"{ISA_ENV}={wanted!r} is not one of {', '.join([*ISAS, 'avx2', 'numpy'])}")
    return native.load_kernel(SPEC, wanted)


def default_kernel() -> tuple[Kernel | None, str]:
    """The kernel the layers use and its name; (None, "tile (numpy: REASON)") where no C kernel
    can run, or ``VERISPEC_TILE_ISA=numpy``."""
    pinned = f"{ISA_ENV}=numpy" if os.environ.get(ISA_ENV) == "numpy" else None
    return native.kernel_or_reason(load_kernel, pinned)


# -- one layer ---------------------------------------------------------------------------------------


def _blocks(p: KernelBlocks | F32, key: str) -> KernelBlocks:
    if not isinstance(p, KernelBlocks):
        raise ModelError(f"tile layer: matrix {key} has no block form (the mlas layer kernel keeps it float32)")
    return p


def layer_law(cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None]) -> law.LayerLaw:
    """The reference's view of one layer (its weights, as the law reads them); ModelError for a
    matrix without a block form, and as the fused graphs' builder (engine.fused.check_matrices,
    layer_vector) for a matrix or vector of the wrong shape or a missing one."""
    check_matrices(cfg, mats)
    e, d = cfg.n_embd, cfg.head_dim
    q, kv = cfg.n_head * d, cfg.n_head_kv * d
    blocks = {key: _blocks(getattr(mats, key), key) for key in ("qkv", "o", "gu", "down")}
    bias = [layer_vector(vectors, key, n, False) for key, n in (("bq", q), ("bk", kv), ("bv", kv))]
    bqkv = None
    if any(b is not None for b in bias):
        bqkv = np.concatenate([np.zeros(n, np.float32) if b is None else b for b, n in zip(bias, (q, kv, kv))])
    q_norm, k_norm = layer_vector(vectors, "q_norm", d, cfg.qk_norm), layer_vector(vectors, "k_norm", d, cfg.qk_norm)
    index = np.argmax(rotation_matrix(cfg), axis=0).astype(np.int32)  # (x @ P)[j] = x[index[j]]
    return law.LayerLaw(
        n_head=cfg.n_head,
        n_kv=cfg.n_head_kv,
        head_dim=d,
        eps=float(np.float32(cfg.norm_eps)),
        activation=ACTIVATIONS[cfg.ffn_activation][1],
        rot=index,
        attn_norm=required_vector(vectors, "attn_norm", e),
        qkv=blocks["qkv"],
        bqkv=bqkv,
        q_norm=q_norm if cfg.qk_norm else None,
        k_norm=k_norm if cfg.qk_norm else None,
        o=blocks["o"],
        bo=layer_vector(vectors, "bo", e, False),
        post_attn_norm=layer_vector(vectors, "post_attn_norm", e, cfg.post_norms) if cfg.post_norms else None,
        ffn_norm=required_vector(vectors, "ffn_norm", e),
        gu=blocks["gu"],
        down=blocks["down"],
        post_ffn_norm=layer_vector(vectors, "post_ffn_norm", e, cfg.post_norms) if cfg.post_norms else None,
    )


class TileLayer:
    """One layer on the C kernel (its tiles and vectors, and the struct the kernel reads), or on
    the reference's NumPy law where ``kernel`` is None."""

    def __init__(self, cfg: Config, layer: law.LayerLaw, kernel: Kernel | None) -> None:
        self.cfg, self.kernel = cfg, kernel
        self.law: law.LayerLaw | None = layer if kernel is None else None
        self.struct: LtLayer | None = None
        self._keep: list[npt.NDArray[Any]] = []  # every array the struct points into
        if kernel is not None:
            self.struct = self._struct(layer)

    def _ptr(self, a: npt.NDArray[Any] | None) -> int | None:
        if a is None:
            return None
        a = np.ascontiguousarray(a)  # the kernel reads it as a flat C array
        self._keep.append(a)
        return int(a.ctypes.data)

    def _matrix(self, kb: law.BlockForm) -> LtMatrix:
        assert isinstance(kb, KernelBlocks)
        form = form_of(kb)  # checks every scale and level: once a matrix
        tiles = pack_tiles(kb, form)
        self._keep.append(tiles)
        return matrix_struct(kb, form, int(tiles.ctypes.data))

    def _struct(self, layer: law.LayerLaw) -> LtLayer:
        cfg = self.cfg
        return LtLayer(
            cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_ff, ACTIVATIONS[cfg.ffn_activation][0],
            layer.eps, self._ptr(layer.attn_norm), self._matrix(layer.qkv), self._ptr(layer.bqkv),
            self._ptr(layer.q_norm), self._ptr(layer.k_norm), self._ptr(np.ascontiguousarray(layer.rot)),
            self._matrix(layer.o), self._ptr(layer.bo), self._ptr(layer.post_attn_norm), self._ptr(layer.ffn_norm),
            self._matrix(layer.gu), self._matrix(layer.down), self._ptr(layer.post_ffn_norm),
        )  # fmt: skip

    def nbytes(self) -> int:
        """Bytes of the weights this layer holds."""
        if self.law is not None:
            return sum(int(getattr(self.law, key).levels.nbytes) for key in ("qkv", "o", "gu", "down"))
        return sum(int(a.nbytes) for a in self._keep)


# -- the chain's graphs -------------------------------------------------------------------------------

INPUTS = {
    "pre": ("x", "cos", "sin"),
    "post": ("attn", "x"),
    "link": ("attn", "x", "cos", "sin", "enter"),
}


def _rows(a: npt.NDArray[Any], dtype: Any = np.float32) -> npt.NDArray[Any]:
    return np.ascontiguousarray(a, dtype=dtype)


def _address(a: npt.NDArray[Any]) -> int:
    """The address of a C-contiguous array's data: through the buffer protocol where the array is
    writable (0.3 us; ``ndarray.ctypes.data`` costs 1.3 us, and a layer half passes up to 8 arrays)."""
    if a.flags.writeable and a.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(cast(Any, a)))  # an ndarray is a writable buffer
    return int(a.ctypes.data)


class TileGraph:
    """A layer half (``pre`` / ``post``) or a ``link`` on tiles, with an onnxruntime graph's calls:
    :meth:`run` returns new arrays, :meth:`run_bound` writes into buffers it owns and reuses (the
    caller copies what must outlive the next call, as for a bound graph)."""

    calls = 0  # every call, all graphs (the bench counts a step's)

    def __init__(self, kind: str, here: TileLayer, after: TileLayer | None, threads: int) -> None:
        self.kind, self.here, self.after = kind, here, after
        self.threads = max(1, threads)
        self.input_names: tuple[str, ...] = INPUTS[kind]
        self._buffers: dict[int, list[F32]] = {}
        cfg = here.cfg
        self._heads = cfg.n_head + cfg.n_head_kv

    def _outputs(self, rows: int) -> list[F32]:
        cfg = self.here.cfg
        y = np.empty((rows, cfg.n_embd), dtype=np.float32)
        qk = np.empty((rows, self._heads, cfg.head_dim), dtype=np.float32)
        v = np.empty((rows, cfg.n_head_kv * cfg.head_dim), dtype=np.float32)
        if self.kind == "pre":
            return [qk, v]
        return [y] if self.kind == "post" else [y, qk, v]

    def run(self, *arrays: npt.NDArray[Any]) -> list[F32]:
        out = self._outputs(int(arrays[0].shape[0]))
        self._compute(arrays, out)
        return out

    def run_bound(self, *arrays: npt.NDArray[Any]) -> list[F32]:
        rows = int(arrays[0].shape[0])
        out = self._buffers.get(rows)
        if out is None:
            out = self._buffers.setdefault(rows, self._outputs(rows)) if rows <= 64 else self._outputs(rows)
        self._compute(arrays, out)
        return out

    def _compute(self, arrays: tuple[npt.NDArray[Any], ...], out: list[F32]) -> None:
        TileGraph.calls += 1
        feeds = dict(zip(self.input_names, arrays))
        rows = int(arrays[0].shape[0])
        kernel = self.here.kernel
        if kernel is None:
            self._numpy(feeds, out)
            return
        x = _rows(feeds["x"])
        lib, isa, threads = kernel.library, ISAS[kernel.isa], self.threads
        here = ctypes.byref(self.here.struct)  # type: ignore[arg-type]
        if self.kind == "pre":
            cos, sin = _rows(feeds["cos"]), _rows(feeds["sin"])
            qk, v = out
            status = lib.lt_pre(here, rows, _address(x), _address(cos), _address(sin), _address(qk), _address(v),
                                threads, isa)  # fmt: skip
        elif self.kind == "post":
            attn = _rows(feeds["attn"])
            status = lib.lt_post(here, rows, _address(attn), _address(x), _address(out[0]), threads, isa)
        else:
            assert self.after is not None
            attn, cos, sin = _rows(feeds["attn"]), _rows(feeds["cos"]), _rows(feeds["sin"])
            enter = _rows(feeds["enter"], np.uint8)
            y, qk, v = out
            status = lib.lt_link(
                here, ctypes.byref(self.after.struct), rows, _address(attn), _address(x),  # type: ignore[arg-type]
                _address(cos), _address(sin), _address(enter), _address(y), _address(qk), _address(v), threads, isa,
            )  # fmt: skip
        if status == -2:
            raise MemoryError("the tile layer kernel could not allocate its scratch")
        if status != 0:
            raise NativeKernelUnavailable(f"the tile layer kernel refused its arguments ({kernel.name})")

    def _numpy(self, feeds: dict[str, npt.NDArray[Any]], out: list[F32]) -> None:
        """The reference's law: the kernel's bits, slowly."""
        rows = feeds["x"].shape[0]
        if self.kind in ("post", "link"):
            assert self.here.law is not None
            y = law.post_half(self.here.law, _rows(feeds["attn"]), _rows(feeds["x"]))
            if self.kind == "link":
                y = np.where(feeds["enter"].reshape(rows, 1), feeds["x"], y)
            out[0][...] = y
        if self.kind in ("pre", "link"):
            layer = (self.here if self.kind == "pre" else self.after).law  # type: ignore[union-attr]
            assert layer is not None
            x = feeds["x"] if self.kind == "pre" else out[0]
            cos = _rows(feeds["cos"]).reshape(rows, -1)
            sin = _rows(feeds["sin"]).reshape(rows, -1)
            qk, v = law.pre_half(layer, _rows(x), cos, sin)
            out[-2][...] = qk
            out[-1][...] = v


def build_tile_chain(
    cfg: Config,
    layer: LayerSource,
    threads: int,
    split_after: Iterable[int] = (),
    built: Callable[[], None] | None = None,
    kernel: Kernel | None = None,
) -> LayerChain:
    """:func:`engine.fused.build_chain`'s chain on tiles: each layer read and packed once, in order
    (its block form freed once packed; ``built()`` after each), on ``kernel`` (None: the
    reference's NumPy law). ModelError where a matrix has no block form."""
    n = cfg.n_layer
    cuts = frozenset(split_after)
    bad = sorted(il for il in cuts if not 0 <= il < n - 1)
    if bad:
        raise ModelError(f"layer chain: cannot split after layer(s) {bad} (0..{n - 2} for {n} layers)")
    layers: list[TileLayer] = []
    for il in range(n):
        layers.append(TileLayer(cfg, layer_law(cfg, *layer(il)), kernel))
        if built is not None:
            built()
    entry = {0: TileGraph("pre", layers[0], None, threads)}
    exit_: dict[int, TileGraph] = {}
    link: dict[int, TileGraph] = {}
    for il in range(n):
        if il == n - 1 or il in cuts:
            exit_[il] = TileGraph("post", layers[il], None, threads)
            if il + 1 < n:
                entry[il + 1] = TileGraph("pre", layers[il + 1], None, threads)
        else:
            link[il] = TileGraph("link", layers[il], layers[il + 1], threads)
    return LayerChain(n, entry, exit_, link)


class TileAttention:
    """The tile layer law's attention (reference/int8_layer_law.py glossary): query rows, each
    over the cache slots ``[0, end)`` it may see, on the C kernel or the reference's NumPy law
    (``kernel`` None). Each row is computed on its own: a k-row call gives every row the bits of
    a 1-row call. A token tree's rows (``span_seen``) each see the prefix and their own path only,
    in slot order: the bits of the 1-row call with that path laid out after the prefix."""

    def __init__(self, cfg: Config, kernel: Kernel | None) -> None:
        self.cfg, self.kernel = cfg, kernel
        self.scale = np.float32(cfg.attn_scale)
        self._spec = LtAttention(cfg.n_head, cfg.n_head_kv, cfg.head_dim, 0, self.scale, None, None, 0, None)
        self._spec_ref = ctypes.byref(self._spec)

    def rows(
        self,
        q: F32,  # [T, n_head, d]
        k: F32,  # [n_kv, slots, d]: one layer's keys
        v: F32,  # [n_kv, slots, d]
        key_positions: npt.NDArray[np.int64],  # [slots]
        positions: npt.NDArray[np.int64],  # [T]
        ends: npt.NDArray[np.int32],  # [T]: row t sees slots [0, ends[t])
        window: int,
        span_first: int = 0,
        span_seen: npt.NDArray[np.bool_] | None = None,  # [T, T]: row t sees span slot span_first + j iff [t, j]
    ) -> F32:
        """``[T, n_head d]``. ``span_seen``: a token tree in slots ``[span_first, span_first + T)``,
        row t seeing the prefix ``[0, span_first)`` and the span slots its row of flags names (its
        path); every ``ends[t]`` is then at most ``span_first + T``."""
        cfg, count = self.cfg, q.shape[0]
        seen = self._checked_span(count, ends, span_first, span_seen)
        if self.kernel is None:
            return np.stack([self._law_row(q[t], k, v, key_positions, int(positions[t]), int(ends[t]), window,
                                           span_first, None if seen is None else seen[t]) for t in range(count)])  # fmt: skip
        if k.strides[1:] != (cfg.head_dim * 4, 4) or k.strides != v.strides or key_positions.dtype != np.int64:
            raise ModelError("the tile attention reads a cache laid out [n_kv, slots, d], float32, slots contiguous")
        most = int(ends[0]) if count == 1 else int(ends.max())
        if most > k.shape[1] or most > key_positions.shape[0]:
            raise ModelError(f"attention ends {ends.tolist()} pass the cache's {k.shape[1]} slots")
        qc = np.ascontiguousarray(q, dtype=np.float32)
        pos = np.ascontiguousarray(positions, dtype=np.int64)
        ends_c = np.ascontiguousarray(ends, dtype=np.int32)
        keys = np.ascontiguousarray(key_positions)
        spec = self._spec  # one struct, its fields set each call (making one costs more than setting them)
        spec.window, spec.k, spec.v, spec.head_stride, spec.key_pos = (
            window,
            _address(k),
            _address(v),
            k.strides[0] // 4,
            _address(keys),
        )
        out = np.empty((count, cfg.n_head * cfg.head_dim), dtype=np.float32)
        status = self.kernel.library.lt_attend(self._spec_ref, count, _address(qc), _address(pos), _address(ends_c),
                                               span_first, None if seen is None else _address(seen), _address(out),
                                               ISAS[self.kernel.isa])  # fmt: skip
        if status == -2:
            raise MemoryError("the tile attention could not allocate its scores")
        if status != 0:
            raise NativeKernelUnavailable(f"the tile attention refused its arguments ({self.kernel.name})")
        return out

    @staticmethod
    def _checked_span(
        count: int, ends: npt.NDArray[np.int32], span_first: int, span_seen: npt.NDArray[np.bool_] | None
    ) -> npt.NDArray[np.uint8] | None:
        """``span_seen`` as the kernel reads it (``[T, T]`` bytes, C order), checked: ModelError for
        another shape, a negative ``span_first`` or an end past the span."""
        if span_seen is None:
            return None
        if span_seen.shape != (count, count) or span_first < 0:
            raise ModelError(
                f"a tree span's flags are [{count}, {count}] from a slot >= 0, got {span_seen.shape} at {span_first}"
            )
        if count and int(ends.max()) > span_first + count:
            raise ModelError(f"attention ends {ends.tolist()} pass the tree span's last slot {span_first + count - 1}")
        return np.ascontiguousarray(span_seen, dtype=np.uint8)

    def _law_row(
        self,
        q: F32,  # [n_head, d]
        k: F32,
        v: F32,
        key_positions: npt.NDArray[np.int64],
        position: int,
        end: int,
        window: int,
        span_first: int,
        seen: npt.NDArray[np.uint8] | None,  # [T]: this row's flags of the span's slots
    ) -> F32:
        """One row on the reference's NumPy law: its keys gathered in slot order where it has a path."""
        if seen is None:
            return law.attend_row(q, k[:, :end], v[:, :end], key_positions[:end], position, window, self.scale)
        path = span_first + np.flatnonzero(seen[: max(0, end - span_first)])
        slots = np.concatenate([np.arange(min(end, span_first)), path])
        return law.attend_row(q, k[:, slots], v[:, slots], key_positions[slots], position, window, self.scale)
