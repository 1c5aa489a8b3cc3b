"""Weights in the layouts the fast forward wants, float32 or kept quantized.

Two modes, one interface (:class:`WeightStore`):

- ``"f32"``: every weight dequantized once at load into fused float32 matrices (:class:`FusedLayer`);
  the fastest mode, and the memory of the float32 model (~4 bytes a weight).
- ``"quantized"``: the GGUF blocks are kept as bytes (what the file holds, ~0.5-1 byte a weight);
  a layer is dequantized (by :func:`reference.quants.dequantize`, bit-identical to ggml) into a
  :class:`FusedLayer` when the forward reaches it and dropped after; the embedding dequantizes only
  the rows it looks up and the output head streams its rows in chunks. Same numbers, much slower.

:func:`estimate_bytes` predicts the resident size of a mode from the tensor table alone, and
:func:`load_weights` refuses (:class:`InsufficientMemory`) before reading any weight when that
exceeds the available memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from reference import quants
from reference.config import Config
from reference.errors import ModelError, UnsupportedArchitecture

if TYPE_CHECKING:
    from reference.gguf import GGUFFile

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]

WEIGHT_MODES: tuple[str, ...] = ("f32", "quantized")
HEAD_CHUNK_ROWS = 8192  # quantized mode: head rows dequantized at a time (8192 x n_embd float32)
MEMORY_HEADROOM = 1.25  # activations, KV cache, Python: ask for 25% more than the weights


class InsufficientMemory(ModelError):
    """The chosen weights mode needs more memory than is available (raised before loading)."""


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer in matmul-friendly float32 layouts (GGUF ``[out, in]``, fused)."""

    attn_norm: F32                 # [n_embd]
    wqkv: F32                      # [n_head*d + 2*n_kv*d, n_embd]  rows: q, then k, then v
    wo: F32                        # [n_embd, n_head*d]
    ffn_norm: F32                  # [n_embd]
    wgu: F32                       # [2*n_ff, n_embd]  rows: gate, then up
    wdown: F32                     # [n_embd, n_ff]
    bqkv: F32 | None = None        # [n_head*d + 2*n_kv*d]
    bo: F32 | None = None          # [n_embd]
    qk_norm: F32 | None = None     # [n_head + n_kv, d]: q_norm for query heads, k_norm for key heads
    post_attn_norm: F32 | None = None  # [n_embd]
    post_ffn_norm: F32 | None = None   # [n_embd]


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
        return np.ascontiguousarray(self.f.dequantize(name), dtype=np.float32).reshape(shape)

    def optional(self, name: str, shape: tuple[int, ...]) -> F32 | None:
        return self.f32(name, shape) if self.has(name) else None


@dataclass(frozen=True)
class _QuantTensor:
    """A tensor's GGUF bytes (a private copy: the file may close) and what decodes them."""

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
        output: F32 | None = None,
        quantized_layers: list[dict[str, _QuantTensor | F32 | None]] | None = None,
        token_embd_q: _QuantTensor | None = None,
        output_q: _QuantTensor | None = None,
    ) -> None:
        self.mode = mode
        self.output_norm = output_norm  # [n_embd]
        self.rope_freqs = rope_freqs    # [rope_dim / 2] or None
        self._layers = layers
        self._token_embd = token_embd   # [V, n_embd]
        self._output = output           # [V, n_embd]
        self._quantized_layers = quantized_layers
        self._token_embd_q = token_embd_q
        self._output_q = output_q

    def layer(self, index: int) -> FusedLayer:
        """Layer ``index`` in fused float32 layouts (dequantized now in quantized mode)."""
        if self._layers is not None:
            return self._layers[index]
        assert self._quantized_layers is not None
        return _fuse({k: (v.dequantize() if isinstance(v, _QuantTensor) else v)
                      for k, v in self._quantized_layers[index].items()})

    def embed_rows(self, ids: npt.NDArray[np.int64]) -> F32:
        """Rows ``ids`` of the token embedding ``[T, n_embd]``."""
        if self._token_embd is not None:
            return np.asarray(self._token_embd[ids], dtype=np.float32)
        assert self._token_embd_q is not None
        return self._token_embd_q.rows(ids)

    def head_matmul(self, x: F32) -> F32:
        """``x @ output.T``: normed hidden ``[T, n_embd]`` -> logits ``[T, V]``."""
        if self._output is not None:
            return np.asarray(x @ self._output.T, dtype=np.float32)
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


def estimate_bytes(f: "GGUFFile", mode: str) -> int:
    """Resident bytes the weights of ``mode`` will take, from the tensor table alone.

    f32: 4 bytes per element of every tensor (a tied head shares the embedding). quantized: the
    file's bytes of every tensor, plus the largest layer dequantized (the working set) and one head
    chunk.
    """
    _check_mode(mode)
    infos = list(f.tensors.values())
    if mode == "f32":
        return sum(4 * t.n_elements for t in infos)
    per_layer: dict[str, int] = {}
    for t in infos:
        if t.name.startswith("blk."):
            key = t.name.split(".")[1]
            per_layer[key] = per_layer.get(key, 0) + 4 * t.n_elements
    largest = max(per_layer.values(), default=0)
    embd = f.tensors.get("token_embd.weight")
    chunk = 4 * HEAD_CHUNK_ROWS * (int(embd.shape[1]) if embd is not None else 0)
    return sum(t.nbytes for t in infos) + largest + chunk


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


def _fuse(w: dict[str, F32 | None]) -> FusedLayer:
    """Reference-layout tensors of one layer -> :class:`FusedLayer`."""

    def need(key: str) -> F32:
        value = w[key]
        assert value is not None
        return value

    biases = [w.get("bq"), w.get("bk"), w.get("bv")]
    bqkv = None
    if any(b is not None for b in biases):
        sizes = [need("wq").shape[0], need("wk").shape[0], need("wv").shape[0]]
        bqkv = np.concatenate([np.zeros(n, np.float32) if b is None else b for b, n in zip(biases, sizes)])
    qk_norm = None
    q_norm, k_norm = w.get("q_norm"), w.get("k_norm")
    if q_norm is not None and k_norm is not None:
        d = q_norm.shape[0]
        n_head, n_kv = need("wq").shape[0] // d, need("wk").shape[0] // d
        qk_norm = np.concatenate([np.tile(q_norm, (n_head, 1)), np.tile(k_norm, (n_kv, 1))])
    return FusedLayer(
        attn_norm=need("attn_norm"),
        wqkv=np.ascontiguousarray(np.concatenate([need("wq"), need("wk"), need("wv")])),
        wo=need("wo"),
        ffn_norm=need("ffn_norm"),
        wgu=np.ascontiguousarray(np.concatenate([need("gate"), need("up")])),
        wdown=need("down"),
        bqkv=bqkv,
        bo=w.get("bo"),
        qk_norm=qk_norm,
        post_attn_norm=w.get("post_attn_norm"),
        post_ffn_norm=w.get("post_ffn_norm"),
    )


def load_weights(f: "GGUFFile", cfg: Config, mode: str = "f32") -> WeightStore:
    """Read the weights of ``f`` in ``mode`` ("f32" or "quantized").

    Checks that the mode fits in memory first (:class:`InsufficientMemory`), then every tensor's
    presence and shape (ModelError naming it), as :meth:`reference.model.Model.load` does.
    """
    _check_mode(mode)
    from engine import FAST_ARCHITECTURES

    if cfg.arch not in FAST_ARCHITECTURES:
        raise UnsupportedArchitecture(
            f"the fast engine does not implement architecture {cfg.arch!r} "
            f"(it does: {', '.join(FAST_ARCHITECTURES)}; use --engine reference)"
        )
    if "blk.0.ffn_gate_inp.weight" in f.tensors:
        raise ModelError("mixture-of-experts layers (ffn_gate_inp) are not supported")
    check_fits(f, mode)
    t = _Tensors(f)
    e = cfg.n_embd
    shapes = _layer_shapes(cfg)
    t.check("token_embd.weight", (cfg.n_vocab, e))
    tied = not t.has("output.weight")
    if not tied:
        t.check("output.weight", (cfg.n_vocab, e))
    output_norm = t.f32("output_norm.weight", (e,))
    rope_freqs = t.optional("rope_freqs.weight", (cfg.rope_dim // 2,))

    if mode == "f32":
        fused: list[FusedLayer] = []
        for il in range(cfg.n_layer):
            p = f"blk.{il}."
            raw: dict[str, F32 | None] = {
                key: (t.f32(p + suffix, shape) if required else t.optional(p + suffix, shape))
                for key, (suffix, shape, required) in shapes.items()
            }
            fused.append(_fuse(raw))
        token_embd = t.f32("token_embd.weight", (cfg.n_vocab, e))
        output = token_embd if tied else t.f32("output.weight", (cfg.n_vocab, e))
        return WeightStore(mode, output_norm, rope_freqs, layers=fused, token_embd=token_embd, output=output)

    def keep(name: str, shape: tuple[int, ...]) -> _QuantTensor:
        t.check(name, shape)
        info = f.tensors[name]
        return _QuantTensor(name, np.array(f.raw(name), dtype=np.uint8), info.ggml_type, shape)

    quantized: list[dict[str, _QuantTensor | F32 | None]] = []
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        entry: dict[str, _QuantTensor | F32 | None] = {}
        for key, (suffix, shape, required) in shapes.items():
            if len(shape) == 1:  # norms and biases: tiny, kept as float32
                entry[key] = t.f32(p + suffix, shape) if required else t.optional(p + suffix, shape)
            else:
                entry[key] = keep(p + suffix, shape)
        quantized.append(entry)
    embd_q = keep("token_embd.weight", (cfg.n_vocab, e))
    output_q = embd_q if tied else keep("output.weight", (cfg.n_vocab, e))
    return WeightStore(
        mode, output_norm, rope_freqs, quantized_layers=quantized, token_embd_q=embd_q, output_q=output_q
    )
