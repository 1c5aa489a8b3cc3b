"""Weights in the layouts the fast forward wants, float32 or kept quantized.

Three modes, one interface (:class:`WeightStore`); every matrix is a :class:`engine.matmul.Matmul`:

- ``"f32"``: every weight dequantized once at load into fused float32 matrices (:class:`FusedLayer`)
  on an exact float32 backend (``numpy`` or ``ort``, :mod:`engine.matmul`); the memory of the float32
  model (~4 bytes a weight). The reference's function up to float32 summation order.
- ``"quantized"``: the GGUF blocks are kept as bytes (what the file holds, ~0.5-1 byte a weight);
  a layer is dequantized (by :func:`reference.quants.dequantize`, bit-identical to ggml) into a
  :class:`FusedLayer` when the forward reaches it and dropped after; the embedding dequantizes only
  the rows it looks up and the output head streams its rows in chunks. Same numbers, much slower.
- ``"int8"``: the GGUF blocks repacked losslessly (:mod:`engine.blocks`) into onnxruntime's
  ``MatMulNBits`` with int8 activations (backend ``ort-q``): llama.cpp-class numerics, its own law.
  A matrix whose type has no block form (float, IQ types) stays float32 on ``ort`` and is listed in
  :attr:`WeightStore.float_matrices` (never requantized).

:func:`estimate_bytes` predicts the resident size of a mode from the tensor table alone, and
:func:`load_weights` refuses (:class:`InsufficientMemory`) before reading any weight when that
exceeds the available memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from verispec.engine import matmul
from verispec.engine.blocks import (
    LOSSLESS_TYPES,
    KernelBlocks,
    NotBlockQuantized,
    concat,
    kernel_nbytes,
    prepacked_nbytes,
    repack,
)
from verispec.engine.fused import (
    LayerChain,
    LayerMatrices,
    LayerSource,
    Projection,
    build_chain,
    chain_splits,
    fused_default,
)
from verispec.engine.matmul import Matmul, NumpyMatmul
from verispec.engine.pages import batched_drops, drop_mapping, drop_pages
from verispec.engine.tile_head import TILE_BLOCK_BYTES as TILE_HEAD_BLOCK_BYTES
from verispec.engine.tile_head import TileHead, default_kernel
from verispec.engine.tile_layers import TILE_ROWS, TileAttention, build_tile_chain, tile_form
from verispec.engine.tile_layers import default_kernel as default_layer_kernel
from verispec.reference import quants
from verispec.reference.config import Config
from verispec.reference.errors import InsufficientMemory as InsufficientMemory
from verispec.reference.errors import ModelError, UnsupportedArchitecture

if TYPE_CHECKING:
    from verispec.reference.gguf import GGUFFile

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

WEIGHT_MODES: tuple[str, ...] = ("f32", "quantized", "int8")
BACKEND_CHOICES: tuple[str, ...] = ("auto", *matmul.EXACT_BACKENDS)  # the f32 mode's kernel
HEAD_CHUNK_ROWS = 8192  # quantized mode: head rows dequantized at a time (8192 x n_embd float32)
INT8_HEAD_CHUNK_ROWS = 8192  # ort / int8: head rows per kernel session (bounds the load's transient copies)
# The int8 mode's head kernels: ``mlas`` (onnxruntime's MatMulNBits, row chunks) or ``tile`` (the Q8
# block-dot law on the file's Q8_0 head repacked, engine/tile_head.py). Two laws: the tokens may differ.
# ``auto``: tile where the head is Q8_0 and a vector kernel (AVX-512 VNNI, AVX2) builds here, else mlas
# (never the plain C kernel or the NumPy fallback, which only an explicit ``tile`` runs: the same bits, slower).
HEAD_KERNELS: tuple[str, ...] = ("auto", "mlas", "tile")
HEAD_KERNEL_BY_DEFAULT = "auto"  # measured: docs/int8-step.md, the tile head kernel
HEAD_KERNEL_ENV = "VERISPEC_INT8_HEAD_KERNEL"
# The int8 mode's layer kernels: ``mlas`` (the fused onnxruntime graphs, engine/fused.py) or ``tile`` (the
# int8 layer law on tiles, one C call a layer half, engine/tile_layers.py). Two laws: the tokens may differ.
# ``auto``: tile where every layer matrix has a block form and the AVX-512 VNNI kernel builds here, else mlas
# (the plain C kernel and the NumPy fallback run only for an explicit ``tile``: the same bits, slower).
LAYER_KERNELS: tuple[str, ...] = ("auto", "mlas", "tile")
LAYER_KERNEL_BY_DEFAULT = "auto"  # measured: docs/int8-step.md, the tile layer kernel
LAYER_KERNEL_ENV = "VERISPEC_INT8_LAYER_KERNEL"
MEMORY_HEADROOM = 1.25  # activations, KV cache, Python: ask for 25% more than the weights


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer: fused matrices (GGUF ``[out, in]``) behind the matmul seam."""

    attn_norm: F32  # [n_embd]
    qkv: Matmul  # [n_head*d + 2*n_kv*d, n_embd]  rows: q, then k, then v
    o: Matmul  # [n_embd, n_head*d]
    ffn_norm: F32  # [n_embd]
    gu: Matmul  # [2*n_ff, n_embd]  rows: gate, then up
    down: Matmul  # [n_embd, n_ff]
    bqkv: F32 | None = None  # [n_head*d + 2*n_kv*d]
    bo: F32 | None = None  # [n_embd]
    qk_norm: F32 | None = None  # [n_head + n_kv, d]: q_norm for query heads, k_norm for key heads
    post_attn_norm: F32 | None = None  # [n_embd]
    post_ffn_norm: F32 | None = None  # [n_embd]


class _Tensors:
    """Raw tensors by name with shape checks whose errors name the tensor."""

    def __init__(self, f: "GGUFFile") -> None:
        self.f = f

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def check(self, name: str, shape: tuple[int, ...]) -> None:
        if name not in self.f.tensors:
            raise ModelError(f"tensor {name!r} is missing")
        found = tuple(int(n) for n in self.f.tensors[name].shape)
        if found != shape:
            raise ModelError(f"tensor {name!r} has shape {list(found)}, expected {list(shape)}")

    def f32(self, name: str, shape: tuple[int, ...]) -> F32:
        self.check(name, shape)
        out = np.ascontiguousarray(self.f.dequantize(name), dtype=np.float32).reshape(shape)
        drop_pages(self.f.raw(name))  # read once: its file pages need not stay resident
        return out

    def optional(self, name: str, shape: tuple[int, ...]) -> F32 | None:
        return self.f32(name, shape) if self.has(name) else None

    def f32_or_none(self, name: str, shape: tuple[int, ...], required: bool) -> F32 | None:
        """:meth:`f32` for a required tensor, :meth:`optional` for another."""
        return self.f32(name, shape) if required else self.optional(name, shape)

    def keep(self, name: str, shape: tuple[int, ...]) -> "_QuantTensor":
        """The tensor's GGUF bytes as a private copy (the quantized mode's matrices)."""
        self.check(name, shape)
        return _QuantTensor(name, np.array(self.f.raw(name), dtype=np.uint8), self.f.tensors[name].ggml_type, shape)

    def rows_in_file(self, name: str, shape: tuple[int, ...]) -> "_QuantTensor":
        """A table read by rows (the embedding) left in the file mapping: only the pages of
        looked-up rows become resident (a view keeps the mapping alive past ``f.close()``)."""
        self.check(name, shape)
        return _QuantTensor(name, self.f.raw(name), self.f.tensors[name].ggml_type, shape)


@dataclass(frozen=True)
class _QuantTensor:
    """A tensor's GGUF bytes (a private copy, or a view of the file mapping, which the view keeps
    alive past ``close()``) and what decodes them."""

    name: str
    raw: U8
    ggml_type: int
    shape: tuple[int, ...]

    def dequantize(self) -> F32:
        n = int(np.prod(self.shape))
        flat = quants.dequantize(self.raw, self.ggml_type, n, tensor_name=self.name)
        return flat.reshape(self.shape)

    def rows(self, ids: npt.NDArray[np.int64]) -> F32:
        """Rows ``ids`` of a 2-D tensor ``[R, C]`` -> ``[len(ids), C]`` (each row is whole blocks)."""
        n_rows, n_cols = self.shape
        row_bytes = self.raw.shape[0] // n_rows
        picked = self.raw.reshape(n_rows, row_bytes)[ids].reshape(-1)
        flat = quants.dequantize(picked, self.ggml_type, len(ids) * n_cols, tensor_name=self.name)
        return flat.reshape(len(ids), n_cols)


class WeightStore:
    """Where the forward gets its weights: :meth:`layer`, :meth:`embed_rows`, :meth:`head_matmul`."""

    def __init__(
        self,
        mode: str,
        output_norm: F32,
        rope_freqs: F32 | None,
        layers: list[FusedLayer] | None = None,
        token_embd: F32 | None = None,
        output: Matmul | None = None,
        quantized_layers: list[dict[str, _QuantTensor | F32 | None]] | None = None,
        token_embd_q: _QuantTensor | None = None,
        output_q: _QuantTensor | None = None,
        backend: str = "numpy",
        float_matrices: tuple[str, ...] = (),
        fused_layers: LayerChain | None = None,
    ) -> None:
        self.mode = mode
        self.backend = backend  # numpy | ort | ort-q: the kernel every Matmul runs on
        self.float_matrices = float_matrices  # int8 mode: matrices kept float32 (no block form)
        self.output_norm = output_norm  # [n_embd]
        self.rope_freqs = rope_freqs  # [rope_dim / 2] or None
        self._layers = layers
        self._token_embd = token_embd  # [V, n_embd] float32, or None (rows from token_embd_q)
        self._output = output  # [V, n_embd] behind the seam
        self._quantized_layers = quantized_layers
        self._token_embd_q = token_embd_q
        self._output_q = output_q
        self.fused_layers = fused_layers  # int8, fused: one graph between attentions (engine/fused.py)
        self.huge_page_bytes = 0  # of the load's memory, on 2 MiB pages (engine/huge_pages.py; set by the loader)
        self.head_kernel = "mlas" if mode == "int8" else "none"  # int8: the head's kernel (set by the loader)
        self.layer_kernel = "mlas" if mode == "int8" else "none"  # int8: the layers' kernel (set by the loader)
        self.tile_attention: TileAttention | None = None  # the tile layer law's attention (with tile layers)

    def layer(self, index: int) -> FusedLayer:
        """Layer ``index`` (in quantized mode dequantized now, on NumPy); ModelError for fused
        int8 layers (no matrix of theirs stands alone: load with ``fused=False``)."""
        if self._layers is not None:
            return self._layers[index]
        if self.fused_layers is not None:
            raise ModelError("the fused int8 layers have no per-matrix seam (load with fused=False)")
        assert self._quantized_layers is not None
        return _fuse(
            {
                k: (v.dequantize() if isinstance(v, _QuantTensor) else v)
                for k, v in self._quantized_layers[index].items()
            },
            "numpy",
        )

    def embed_rows(self, ids: npt.NDArray[np.int64]) -> F32:
        """Rows ``ids`` of the token embedding ``[T, n_embd]`` (bit-identical in every mode)."""
        if self._token_embd is not None:
            return np.asarray(self._token_embd[ids], dtype=np.float32)
        assert self._token_embd_q is not None
        return self._token_embd_q.rows(ids)

    @property
    def head_output(self) -> Matmul | None:
        """The head behind the seam (row chunks of the int8 kernel in that mode); None in the
        quantized mode, whose head is dequantized a chunk at a time (engine/sparse_head.py)."""
        return self._output

    def head_matmul(self, x: F32) -> F32:
        """``x @ output.T``: normed hidden ``[T, n_embd]`` -> logits ``[T, V]``."""
        if self._output is not None:
            return self._output(x)
        assert self._output_q is not None
        n_rows = self._output_q.shape[0]
        out = np.empty((x.shape[0], n_rows), dtype=np.float32)
        for first in range(0, n_rows, HEAD_CHUNK_ROWS):
            ids = np.arange(first, min(first + HEAD_CHUNK_ROWS, n_rows), dtype=np.int64)
            out[:, first : first + len(ids)] = x @ self._output_q.rows(ids).T
        return out

    def matmul_shapes(self, config: Config) -> list[tuple[int, int]]:
        """The ``[out, in]`` shape of every matrix one decode step streams, in order (head last)."""
        c = config
        qkv = (c.n_head + 2 * c.n_head_kv) * c.head_dim
        per_layer = [(qkv, c.n_embd), (c.n_embd, c.n_head * c.head_dim), (2 * c.n_ff, c.n_embd), (c.n_embd, c.n_ff)]
        return per_layer * c.n_layer + [(c.n_vocab, c.n_embd)]


# -- memory -----------------------------------------------------------------------------------------


INT8_RESIDENT_FACTOR = 2  # int8 mode: resident bytes per kernel byte, an upper bound (estimate_bytes)


def estimate_bytes(f: "GGUFFile", mode: str) -> int:
    """Resident bytes the weights of ``mode`` will take, from the tensor table alone.

    f32: 4 bytes per element of every tensor (a tied head shares the embedding). quantized: the
    file's bytes of every tensor, plus the largest layer dequantized (the working set) and one head
    chunk. int8: :data:`INT8_RESIDENT_FACTOR` x the kernel's bytes of every matrix
    (:func:`engine.blocks.kernel_nbytes`), 4 bytes an element of the rest; the embedding's rows are
    read from the file mapping, not copied. The factor 2 bounds what onnxruntime holds per kernel
    byte: its prepacked copy (MLAS adds a float32 block sum per block: at most 4 / 13 = 31% more, for
    4-bit levels in blocks of 16), while a matrix is built its transient copies (the levels one byte
    a weight, the file onnxruntime reads, bounded by one head chunk, INT8_HEAD_CHUNK_ROWS rows), and
    allocator slack (SmolLM2 measured 1.5x the kernel bytes steady, 1.65x at its peak, Gemma 3 1.3x /
    1.45x, without the interpreter; tests/test_engine_memory.py checks the bound).
    """
    _check_mode(mode)
    infos = list(f.tensors.values())
    if mode == "f32":
        return sum(4 * t.n_elements for t in infos)
    if mode == "int8":
        return sum(
            INT8_RESIDENT_FACTOR * kernel_nbytes(t.ggml_type, t.n_elements) if len(t.shape) == 2 else 4 * t.n_elements
            for t in infos
        )
    per_layer: dict[str, int] = {}
    for t in infos:
        if t.name.startswith("blk."):
            key = t.name.split(".")[1]
            per_layer[key] = per_layer.get(key, 0) + 4 * t.n_elements
    largest = max(per_layer.values(), default=0)
    embd = f.tensors.get("token_embd.weight")
    chunk = 4 * HEAD_CHUNK_ROWS * (int(embd.shape[1]) if embd is not None else 0)
    return sum(t.nbytes for t in infos) + largest + chunk


def int8_prepacked_bytes(f: "GGUFFile", cfg: Config, layer_kernel: str = "mlas", head_kernel: str = "mlas") -> int:
    """The bytes the int8 mode's kernels hold for every matrix once loaded (no load-time copy, no
    per-session cost): each layer's four projections as they are stacked (q, k, v; gate, up) and
    the head, on the kernels named (``mlas``: :func:`engine.blocks.prepacked_nbytes`, the head in
    chunks of :data:`INT8_HEAD_CHUNK_ROWS` rows; ``tile``: the tiles' bytes,
    engine/tile_layers.py and engine/tile_head.py). The floor of the int8 mode's resident weights:
    the file's pages are handed back after packing, so nothing else need hold a weight."""
    e, d, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff
    q, kv = cfg.n_head * d, cfg.n_head_kv * d

    def types(names: list[str]) -> tuple[int, ...]:
        return tuple(int(f.tensors[name].ggml_type) for name in names)

    def layer_bytes(ggml_types: tuple[int, ...], n_out: int, n_in: int) -> int:
        form = tile_form(ggml_types)
        if layer_kernel != "tile" or form is None:
            return prepacked_nbytes(ggml_types, n_out, n_in)
        return -(-n_out // TILE_ROWS) * (n_in // form.block) * form.block_bytes()

    total = 0
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        total += layer_bytes(types([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]), q + 2 * kv, e)
        total += layer_bytes(types([p + "attn_output.weight"]), e, q)
        total += layer_bytes(types([p + "ffn_gate.weight", p + "ffn_up.weight"]), 2 * ff, e)
        total += layer_bytes(types([p + "ffn_down.weight"]), e, ff)
    head = types(["output.weight" if "output.weight" in f.tensors else "token_embd.weight"])
    if head_kernel == "tile" and head == (int(quants.GGMLType.Q8_0),):
        return total + -(-cfg.n_vocab // TILE_ROWS) * (e // 32) * TILE_HEAD_BLOCK_BYTES
    for first in range(0, cfg.n_vocab, INT8_HEAD_CHUNK_ROWS):
        total += prepacked_nbytes(head, min(INT8_HEAD_CHUNK_ROWS, cfg.n_vocab - first), e)
    return total


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (bytes); a large number where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


def check_fits(f: "GGUFFile", mode: str, available: int | None = None) -> int:
    """Raise :class:`InsufficientMemory` naming both numbers when ``mode`` will not fit; return
    the estimate in bytes otherwise."""
    need = estimate_bytes(f, mode)
    have = available_bytes() if available is None else available
    if need * MEMORY_HEADROOM > have:
        hint = " (try --weights quantized)" if mode == "f32" else ""
        raise InsufficientMemory(
            f"weights mode {mode!r} needs about {need * MEMORY_HEADROOM / 2**20:.0f} MiB "
            f"({need / 2**20:.0f} MiB of weights + {100 * (MEMORY_HEADROOM - 1):.0f}% headroom) "
            f"but {have / 2**20:.0f} MiB is available{hint}"
        )
    return need


def _check_mode(mode: str) -> None:
    if mode not in WEIGHT_MODES:
        raise ModelError(f"weights mode {mode!r} is not one of {', '.join(WEIGHT_MODES)}")


# -- loading ----------------------------------------------------------------------------------------


def _layer_shapes(cfg: Config) -> dict[str, tuple[str, tuple[int, ...], bool]]:
    """key -> (GGUF tensor suffix, shape, required)."""
    d, e, ff = cfg.head_dim, cfg.n_embd, cfg.n_ff
    q, kv = cfg.n_head * d, cfg.n_head_kv * d
    shapes: dict[str, tuple[str, tuple[int, ...], bool]] = {
        "attn_norm": ("attn_norm.weight", (e,), True),
        "wq": ("attn_q.weight", (q, e), True),
        "wk": ("attn_k.weight", (kv, e), True),
        "wv": ("attn_v.weight", (kv, e), True),
        "wo": ("attn_output.weight", (e, q), True),
        "ffn_norm": ("ffn_norm.weight", (e,), True),
        "gate": ("ffn_gate.weight", (ff, e), True),
        "up": ("ffn_up.weight", (ff, e), True),
        "down": ("ffn_down.weight", (e, ff), True),
        "bq": ("attn_q.bias", (q,), False),
        "bk": ("attn_k.bias", (kv,), False),
        "bv": ("attn_v.bias", (kv,), False),
        "bo": ("attn_output.bias", (e,), False),
    }
    if cfg.qk_norm:
        shapes["q_norm"] = ("attn_q_norm.weight", (d,), True)
        shapes["k_norm"] = ("attn_k_norm.weight", (d,), True)
    if cfg.post_norms:
        shapes["post_attn_norm"] = ("post_attention_norm.weight", (e,), True)
        shapes["post_ffn_norm"] = ("post_ffw_norm.weight", (e,), True)
    return shapes


def _fuse(w: dict[str, F32 | None], backend: str) -> FusedLayer:
    """Reference-layout float32 tensors of one layer -> :class:`FusedLayer` on an exact backend."""

    def need(key: str) -> F32:
        value = w[key]
        assert value is not None
        return value

    mats = (
        matmul.exact(np.concatenate([need("wq"), need("wk"), need("wv")]), backend),
        matmul.exact(need("wo"), backend),
        matmul.exact(np.concatenate([need("gate"), need("up")]), backend),
        matmul.exact(need("down"), backend),
    )
    rows = (need("wq").shape[0], need("wk").shape[0], need("wv").shape[0])
    return _assemble(w, mats, rows)


def _assemble(
    w: dict[str, F32 | None], mats: tuple[Matmul, Matmul, Matmul, Matmul], rows: tuple[int, int, int]
) -> FusedLayer:
    """A layer's vectors (norms, biases) and its four matmuls -> :class:`FusedLayer`.

    ``rows``: the output sizes of q, k, v (the fused bias and per-head norms follow them).
    """

    def need(key: str) -> F32:
        value = w[key]
        assert value is not None
        return value

    biases = [w.get("bq"), w.get("bk"), w.get("bv")]
    bqkv = None
    if any(b is not None for b in biases):
        bqkv = np.concatenate([np.zeros(n, np.float32) if b is None else b for b, n in zip(biases, rows)])
    qk_norm = None
    q_norm, k_norm = w.get("q_norm"), w.get("k_norm")
    if q_norm is not None and k_norm is not None:
        d = q_norm.shape[0]
        n_head, n_kv = rows[0] // d, rows[1] // d
        qk_norm = np.concatenate([np.tile(q_norm, (n_head, 1)), np.tile(k_norm, (n_kv, 1))])
    qkv, o, gu, down = mats
    return FusedLayer(
        attn_norm=need("attn_norm"),
        qkv=qkv,
        o=o,
        ffn_norm=need("ffn_norm"),
        gu=gu,
        down=down,
        bqkv=bqkv,
        bo=w.get("bo"),
        qk_norm=qk_norm,
        post_attn_norm=w.get("post_attn_norm"),
        post_ffn_norm=w.get("post_ffn_norm"),
    )


def resolve_backend(mode: str, backend: str = "auto") -> str:
    """The kernel a mode runs on: f32 -> ``backend`` ("auto": ort when importable, else numpy;
    measured: ort's k-row passes cost ~1.3x a 1-row pass against NumPy's ~3x, bench), quantized ->
    numpy (it dequantizes per call), int8 -> ort-q."""
    if backend not in BACKEND_CHOICES:
        raise ModelError(f"backend {backend!r} is not one of {', '.join(BACKEND_CHOICES)}")
    if mode == "quantized":
        if backend == "ort":
            raise ModelError(
                "weights mode 'quantized' dequantizes per call and runs on numpy; use --weights f32 --backend ort"
            )
        return "numpy"
    if mode == "int8":
        if backend == "numpy":
            raise ModelError("weights mode 'int8' runs on onnxruntime (ort-q); --backend numpy needs --weights f32")
        matmul.require_ort()
        return "ort-q"
    if backend == "auto":
        return "ort" if matmul.ort_available() else "numpy"
    return backend


def load_weights(
    f: "GGUFFile",
    cfg: Config,
    mode: str = "f32",
    backend: str = "auto",
    fused: bool | None = None,
    pass_boundaries: Iterable[int] = (),
    head_kernel: str | None = None,
    layer_kernel: str | None = None,
) -> WeightStore:
    """Read the weights of ``f`` in ``mode`` (see :data:`WEIGHT_MODES`) on ``backend``
    (see :func:`resolve_backend`). ``fused``: the int8 mode's layers as onnxruntime graphs, one between two attentions
    (:mod:`engine.fused`; None: ``VERISPEC_INT8_FUSED`` or the default), ModelError for another mode.
    ``pass_boundaries``: depths ``1..L-1`` where passes will start and stop (early exit's candidate
    depths, a layer-skip draft's exit layer); the fused layers' chain is cut there
    (:func:`engine.fused.chain_splits`; the same bits, no link half computed and dropped). The
    other layouts have nothing to cut; the depths are checked in every mode (ModelError outside).
    ``head_kernel``: the int8 mode's head kernel (:data:`HEAD_KERNELS`; None:
    ``VERISPEC_INT8_HEAD_KERNEL`` or :data:`HEAD_KERNEL_BY_DEFAULT`), ModelError for another mode;
    ``layer_kernel`` likewise (:data:`LAYER_KERNELS`, ``VERISPEC_INT8_LAYER_KERNEL``).

    Checks that the mode fits in memory first (:class:`InsufficientMemory`), then every tensor's
    presence and shape (ModelError naming it), as :meth:`reference.model.Model.load` does.
    """
    kernel, fused_layers = _check_loadable(f, cfg, mode, backend, fused)
    head = resolve_head_kernel(mode, head_kernel)
    layers = resolve_layer_kernel(mode, layer_kernel, fused_layers)
    splits = chain_splits(cfg.n_layer, pass_boundaries)  # checked before a weight is read
    common = _read_common(f, cfg)
    with batched_drops():  # the graphs' mapped scales handed back a batch of folders at a time
        if mode == "f32":
            store = _load_f32(cfg, common, kernel)
        elif mode == "int8":
            store = Int8Loader(cfg, common).load(kernel, fused_layers, splits, head, layers)
        else:
            store = _load_quantized(cfg, common, kernel)
    drop_mapping(f.raw(common.head_name))  # every weight is read: no file page need stay resident
    return store


def _kernel_choice(mode: str, given: str | None, what: str, env: str, default: str, choices: tuple[str, ...]) -> str:
    """``given``, else ``$env``, else ``default``: ModelError for a name outside ``choices``, or one
    given for a mode other than int8 (``what``: "head" or "layer")."""
    if given is not None and mode != "int8":
        raise ModelError(f"{what} kernels are the int8 mode's (weights mode {mode!r} has none)")
    name = given or os.environ.get(env) or default
    if name not in choices:
        source = f"{what}_kernel" if given else env
        raise ModelError(f"{source}={name!r} is not one of {', '.join(choices)}")
    return name


def resolve_head_kernel(mode: str, head_kernel: str | None) -> str:
    """The int8 mode's head kernel: ``head_kernel``, else ``VERISPEC_INT8_HEAD_KERNEL``, else
    :data:`HEAD_KERNEL_BY_DEFAULT`. ModelError for another name, or one named for another mode."""
    return _kernel_choice(mode, head_kernel, "head", HEAD_KERNEL_ENV, HEAD_KERNEL_BY_DEFAULT, HEAD_KERNELS)


def resolve_layer_kernel(mode: str, layer_kernel: str | None, fused: bool = True) -> str:
    """The int8 mode's layer kernel: ``layer_kernel``, else ``VERISPEC_INT8_LAYER_KERNEL``, else
    :data:`LAYER_KERNEL_BY_DEFAULT`. ModelError for another name, one named for another mode, or
    ``tile`` for unfused layers (the tile kernel computes whole layer halves); ``auto`` is ``mlas``
    there."""
    name = _kernel_choice(mode, layer_kernel, "layer", LAYER_KERNEL_ENV, LAYER_KERNEL_BY_DEFAULT, LAYER_KERNELS)
    if not fused and mode == "int8":
        if name == "tile":
            source = "layer_kernel" if layer_kernel else LAYER_KERNEL_ENV
            raise ModelError(f"{source}=tile computes fused layers; it cannot run with fused=False")
        return "mlas"
    return name


def _check_loadable(f: "GGUFFile", cfg: Config, mode: str, backend: str, fused: bool | None) -> tuple[str, bool]:
    """Everything refused before a weight is read: the mode, the backend, the fused flag, the
    architecture, mixture-of-experts layers, the memory. Returns (kernel, fused layers)."""
    _check_mode(mode)
    kernel = resolve_backend(mode, backend)
    if fused and mode != "int8":
        raise ModelError(f"fused layers are the int8 mode's (weights mode {mode!r} has none)")
    fused_layers = mode == "int8" and (fused_default() if fused is None else fused)
    from verispec.engine.architectures import FAST_ARCHITECTURES

    if cfg.arch not in FAST_ARCHITECTURES:
        raise UnsupportedArchitecture(
            f"the fast engine does not implement architecture {cfg.arch!r} "
            f"(it does: {', '.join(FAST_ARCHITECTURES)}; use --engine reference)"
        )
    if "blk.0.ffn_gate_inp.weight" in f.tensors:
        raise ModelError("mixture-of-experts layers (ffn_gate_inp) are not supported")
    check_fits(f, mode)
    return kernel, fused_layers


@dataclass(frozen=True)
class _Common:
    """What every mode reads first: the checked tables, the layer shapes and the small vectors."""

    t: _Tensors
    shapes: dict[str, tuple[str, tuple[int, ...], bool]]  # key -> (suffix, shape, required)
    tied: bool  # no output.weight: the head is the token embedding
    head_name: str  # the tensor the output head reads
    output_norm: F32  # [n_embd]
    rope_freqs: F32 | None  # [rope_dim / 2]

    def vectors(self, prefix: str) -> dict[str, F32 | None]:
        """A layer's norms and biases (the 1-D tensors), float32; optional ones None when absent."""
        return {
            key: self.t.f32_or_none(prefix + suffix, shape, required)
            for key, (suffix, shape, required) in self.shapes.items()
            if len(shape) == 1
        }


def _read_common(f: "GGUFFile", cfg: Config) -> _Common:
    t = _Tensors(f)
    e = cfg.n_embd
    t.check("token_embd.weight", (cfg.n_vocab, e))
    tied = not t.has("output.weight")
    if not tied:
        t.check("output.weight", (cfg.n_vocab, e))
    output_norm = t.f32("output_norm.weight", (e,))
    rope_freqs = t.optional("rope_freqs.weight", (cfg.rope_dim // 2,))
    head_name = "token_embd.weight" if tied else "output.weight"
    return _Common(t, _layer_shapes(cfg), tied, head_name, output_norm, rope_freqs)


def _load_f32(cfg: Config, c: _Common, kernel: str) -> WeightStore:
    """Every layer dequantized and fused on ``kernel``; the head whole on numpy, in row chunks otherwise."""
    t, e = c.t, cfg.n_embd
    layers: list[FusedLayer] = []
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        raw = {key: t.f32_or_none(p + suffix, shape, required) for key, (suffix, shape, required) in c.shapes.items()}
        layers.append(_fuse(raw, kernel))
        if kernel != "numpy":
            matmul.release_freed_memory()  # each session's freed copies, before the next layer
    if kernel == "numpy":  # the head shares the embedding's float32 matrix when tied
        token_embd = t.f32("token_embd.weight", (cfg.n_vocab, e))
        head = token_embd if c.tied else t.f32("output.weight", (cfg.n_vocab, e))
        return WeightStore(
            "f32",
            c.output_norm,
            c.rope_freqs,
            layers=layers,
            token_embd=token_embd,
            output=NumpyMatmul(head),
            backend=kernel,
        )
    head_q = t.rows_in_file(c.head_name, (cfg.n_vocab, e))
    chunks: list[Matmul] = []
    for first in range(0, cfg.n_vocab, INT8_HEAD_CHUNK_ROWS):  # the kernel keeps its own copy:
        ids = np.arange(first, min(first + INT8_HEAD_CHUNK_ROWS, cfg.n_vocab), dtype=np.int64)
        chunks.append(matmul.exact(head_q.rows(ids), kernel))  # built a chunk at a time
        matmul.release_freed_memory()
    drop_pages(head_q.raw)
    output: Matmul = chunks[0] if len(chunks) == 1 else matmul.RowChunks(chunks)
    embd_rows = t.rows_in_file("token_embd.weight", (cfg.n_vocab, e))
    return WeightStore(
        "f32", c.output_norm, c.rope_freqs, layers=layers, output=output, token_embd_q=embd_rows, backend=kernel
    )


def _load_quantized(cfg: Config, c: _Common, kernel: str) -> WeightStore:
    """The GGUF bytes kept per matrix (dequantized per use); norms and biases float32."""
    quantized: list[dict[str, _QuantTensor | F32 | None]] = []
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        entry: dict[str, _QuantTensor | F32 | None] = {}
        for key, (suffix, shape, required) in c.shapes.items():
            if len(shape) == 1:  # norms and biases: tiny, kept as float32
                entry[key] = c.t.f32_or_none(p + suffix, shape, required)
            else:
                entry[key] = c.t.keep(p + suffix, shape)
        quantized.append(entry)
    embd_q = c.t.keep("token_embd.weight", (cfg.n_vocab, cfg.n_embd))
    output_q = embd_q if c.tied else c.t.keep("output.weight", (cfg.n_vocab, cfg.n_embd))
    return WeightStore(
        "quantized",
        c.output_norm,
        c.rope_freqs,
        quantized_layers=quantized,
        token_embd_q=embd_q,
        output_q=output_q,
        backend=kernel,
    )


class Int8Loader:
    """The int8 mode: every matrix repacked losslessly into kernel blocks (float32 where its type
    has no block form, listed in :attr:`floats`), layer by layer, then the head in row chunks."""

    def __init__(self, cfg: Config, common: _Common) -> None:
        self.cfg, self.c, self.t = cfg, common, common.t
        self.floats: list[str] = []  # matrices kept float32, for the load report

    def load(
        self,
        kernel: str,
        fused: bool,
        splits: Iterable[int] = (),
        head_kernel: str = "mlas",
        layer_kernel: str = "mlas",
    ) -> WeightStore:
        """The store; ``splits``: the layers to cut the fused chain after (engine.fused.build_chain);
        ``head_kernel``: one of :data:`HEAD_KERNELS`; ``layer_kernel``: one of :data:`LAYER_KERNELS`
        (``tile`` and ``auto`` need ``fused``)."""
        cfg, c = self.cfg, self.c
        layers: list[FusedLayer] = []
        chain = None
        layer_name = "mlas"
        attention = None
        if layer_kernel == "auto":
            layer_kernel = "tile" if fused and self.tile_layers_run_natively() else "mlas"
        if layer_kernel == "tile":
            if not fused:
                raise ModelError("the tile layer kernel computes fused layers (load with fused layers)")
            tile_kernel, layer_name = default_layer_kernel()
            threads = matmul.default_threads()
            chain = build_tile_chain(cfg, self.layer_parts, threads, splits, matmul.release_freed_memory, tile_kernel)
            attention = TileAttention(cfg, tile_kernel)
        elif fused:  # the peak of a load is its freed copies otherwise: handed back after each graph
            chain = build_chain(cfg, self.layer_parts, matmul.default_threads(), splits, matmul.release_freed_memory)
        else:
            for il in range(cfg.n_layer):
                layers.append(self.layer(il))
                matmul.release_freed_memory()
        drop_mapping(self.t.f.raw(c.head_name))  # the layers' boundary pages, before the head's peak
        if head_kernel == "auto":
            head_kernel = "tile" if self.tile_head_runs_natively() else "mlas"
        output = self.tile_head() if head_kernel == "tile" else self.head()
        matmul.release_freed_memory()
        store = WeightStore(
            "int8",
            c.output_norm,
            c.rope_freqs,
            layers=None if fused else layers,
            output=output,
            fused_layers=chain,
            token_embd_q=self.t.rows_in_file("token_embd.weight", (cfg.n_vocab, cfg.n_embd)),
            backend=kernel,
            float_matrices=tuple(self.floats),
        )
        store.head_kernel = output.kernel_name if isinstance(output, TileHead) else "mlas"
        store.layer_kernel = layer_name
        store.tile_attention = attention
        return store

    def matrices(self, il: int) -> LayerMatrices:
        """Layer ``il``'s four projections (q, k, v stacked; gate, up stacked)."""
        cfg, p, e = self.cfg, f"blk.{il}.", self.cfg.n_embd
        q, kv, ff = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim, cfg.n_ff
        return LayerMatrices(
            qkv=self.projection([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"], [q, kv, kv], e),
            o=self.projection([p + "attn_output.weight"], [e], q),
            gu=self.projection([p + "ffn_gate.weight", p + "ffn_up.weight"], [ff, ff], e),
            down=self.projection([p + "ffn_down.weight"], [e], ff),
        )

    def layer_parts(self, il: int) -> tuple[LayerMatrices, dict[str, F32 | None]]:
        """Layer ``il``'s projections and vectors, for the fused graphs (engine/fused.py)."""
        return self.matrices(il), self.c.vectors(f"blk.{il}.")

    def layer(self, il: int) -> FusedLayer:
        """Layer ``il`` with one matmul per projection."""
        cfg = self.cfg
        q, kv = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
        mats = self.matrices(il)
        return _assemble(
            self.c.vectors(f"blk.{il}."),
            (_as_matmul(mats.qkv), _as_matmul(mats.o), _as_matmul(mats.gu), _as_matmul(mats.down)),
            (q, kv, kv),
        )

    def projection(self, names: list[str], shape_rows: list[int], n_in: int) -> Projection:
        """The stacked matrices as lossless kernel blocks, or float32 where a type has no block form."""
        f = self.t.f
        try:
            parts = []
            for name, n_out in zip(names, shape_rows):
                self.t.check(name, (n_out, n_in))
                parts.append(repack(f.raw(name), f.tensors[name].ggml_type, (n_out, n_in), name=name))
            for name in names:
                drop_pages(f.raw(name))  # repacked: the file's pages need not stay resident
            return concat(parts)
        except NotBlockQuantized:  # kept exact, never requantized; listed for the load report
            self.floats.extend(names)
            return np.concatenate([self.t.f32(name, (n_out, n_in)) for name, n_out in zip(names, shape_rows)])

    def head(self) -> Matmul:
        """The output head, built :data:`INT8_HEAD_CHUNK_ROWS` rows at a time (bounded load-time copies)."""
        n_vocab = self.cfg.n_vocab
        parts: list[Matmul] = []
        # no trim between chunks: a chunk's graph hands the freed heap back before packing (OrtGraph)
        for first in range(0, n_vocab, INT8_HEAD_CHUNK_ROWS):
            parts.append(self.head_chunk(first, min(INT8_HEAD_CHUNK_ROWS, n_vocab - first)))
        return parts[0] if len(parts) == 1 else matmul.RowChunks(parts)

    def tile_head_runs_natively(self) -> bool:
        """Whether ``auto`` picks the ``tile`` head: a Q8_0 head and a vector kernel that builds here
        (AVX-512 VNNI or AVX2; the plain C kernel, all another CPU gets, is not measured against MLAS's)."""
        if self.t.f.tensors[self.c.head_name].ggml_type != quants.GGMLType.Q8_0:
            return False
        kernel = default_kernel()[0]
        return kernel is not None and kernel.isa != "portable"

    def tile_layers_run_natively(self) -> bool:
        """Whether ``auto`` picks the ``tile`` layers: every layer matrix has a block form and the
        AVX-512 VNNI kernel builds here (the plain C kernel is not measured against MLAS's)."""
        f = self.t.f
        for name, info in f.tensors.items():
            if name.startswith("blk.") and len(info.shape) == 2 and int(info.ggml_type) not in LOSSLESS_TYPES:
                return False
        kernel = default_layer_kernel()[0]
        return kernel is not None and kernel.isa == "avx512-vnni"

    def tile_head(self) -> TileHead:
        """The head on the ``tile`` kernel (engine/tile_head.py): the file's Q8_0 head repacked at
        its own size, the file's pages handed back. ModelError for a head of another type."""
        f, head_name, cfg = self.t.f, self.c.head_name, self.cfg
        info = f.tensors[head_name]
        if info.ggml_type != quants.GGMLType.Q8_0:
            raise ModelError(
                f"the tile head kernel computes Q8_0 heads; {head_name} is {quants.GGMLType(info.ggml_type).name}"
                " (use the mlas head kernel)"
            )
        raw = np.asarray(f.raw(head_name))
        # each run of the file's pages handed back once repacked: the head and its copy never both resident
        return TileHead.from_q8_0(raw, cfg.n_vocab, cfg.n_embd, matmul.default_threads(), drop_pages)

    def head_chunk(self, first: int, rows: int) -> Matmul:
        f, head_name, n_vocab = self.t.f, self.c.head_name, self.cfg.n_vocab
        info = f.tensors[head_name]
        row_bytes = info.nbytes // n_vocab
        raw = np.asarray(f.raw(head_name)).reshape(n_vocab, row_bytes)[first : first + rows]
        try:
            parts = [repack(raw.reshape(-1), info.ggml_type, (rows, self.cfg.n_embd), name=head_name)]
            drop_pages(raw.reshape(-1))  # repacked: the file's pages go before the kernel's copies exist
            # handed over (no reference left here): its levels are freed before the session copies them
            return matmul.ort_blocks(parts.pop(), matmul.default_threads())
        except NotBlockQuantized:
            if head_name not in self.floats:
                self.floats.append(head_name)
            w = self.t.f32(head_name, (n_vocab, self.cfg.n_embd))[first : first + rows]
            return matmul.exact(np.ascontiguousarray(w), "ort")


def int8_layer_source(f: "GGUFFile", cfg: Config) -> LayerSource:
    """``layer(il) -> (projections, vectors)`` of the int8 mode, read from ``f`` on each call: what
    the fused graphs are built from (engine/fused.py; lab/link_ab.py builds its own layouts)."""
    return Int8Loader(cfg, _read_common(f, cfg)).layer_parts


def _as_matmul(p: Projection) -> Matmul:
    """A projection behind the matmul seam: kernel blocks on ort-q, float32 on ort."""
    if isinstance(p, KernelBlocks):
        return matmul.ort_blocks(p, matmul.default_threads())
    return matmul.exact(p, "ort")
