"""The reference forward pass of a quantized GGUF decoder (llama, phi3, gemma3, gemma4), readable first.

Weights are dequantized to float32 once, at load, and every projection is one matmul. A forward
takes a span of tokens at given positions, reads and extends a :class:`~reference.kvcache.KVCache`,
and returns logits for every position of the span (``[T, V]``), optionally with the hidden state
after every layer (the early exit and layer-skip drafts need them).

One decoder layer (every architecture; the gemma extras marked)::

    h = x + [post_attn_norm] attn(rms_norm(x))      attn: q,k,v proj; [q/k rms_norm]; [v norm];
    x = h + [post_ffn_norm]  ffn(rms_norm(h))             RoPE; GQA softmax (causal, [sliding])
    x = x * [out_scale]                                   out proj

phi3 is llama with NEOX RoPE whose fused ``attn_qkv`` and gate/up ``ffn_up`` are split at load.
gemma4 adds per-layer head dims (the cache is sized for the largest; smaller heads are
zero-padded in it), proportional RoPE on global layers, an unweighted V norm and a per-layer
output scale (see reference/config.py ``_gemma4``).

llama.cpp is the oracle: src/models/{llama,phi3,gemma3,gemma4}.cpp. It quantizes activations
to 8 bits inside its quantized matmuls and keeps an F16 KV cache, so logits agree closely but not
bit for bit (see tests/data/golden/README.md). transformers' float32 forward agrees to ~1e-5
(tests/test_oracle_*.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np
import numpy.typing as npt

from verispec.reference import layers, tree_attention
from verispec.reference.config import Config
from verispec.reference.errors import ContextOverflow, ModelError
from verispec.reference.kvcache import KVCache

if TYPE_CHECKING:
    from verispec.reference.gguf import GGUFFile

F32 = npt.NDArray[np.float32]
Mask = npt.NDArray[np.bool_]
TokenIds = Union[Sequence[int], npt.NDArray[np.integer]]  # one span of token ids [T]


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's weights, float32, GGUF layout ``[out, in]``."""

    attn_norm: F32  # [n_embd]
    wq: F32  # [n_head * d, n_embd]
    wk: F32  # [n_kv * d, n_embd]
    wv: F32  # [n_kv * d, n_embd]
    wo: F32  # [n_embd, n_head * d]
    ffn_norm: F32  # [n_embd]
    ffn_gate: F32  # [n_ff, n_embd]
    ffn_up: F32  # [n_ff, n_embd]
    ffn_down: F32  # [n_embd, n_ff]
    bq: F32 | None = None  # [n_head * d]   optional biases (llama-arch variants)
    bk: F32 | None = None  # [n_kv * d]
    bv: F32 | None = None  # [n_kv * d]
    bo: F32 | None = None  # [n_embd]
    q_norm: F32 | None = None  # [d]  gemma3: per-head RMSNorm on Q
    k_norm: F32 | None = None  # [d]  gemma3: per-head RMSNorm on K
    post_attn_norm: F32 | None = None  # [n_embd]  gemma3
    post_ffn_norm: F32 | None = None  # [n_embd]  gemma3
    out_scale: F32 | None = None  # [1]  gemma4: the layer's output is multiplied by it


@dataclass(frozen=True)
class Weights:
    token_embd: F32  # [V, n_embd]
    output_norm: F32  # [n_embd]
    output: F32  # [V, n_embd]  (token_embd itself when the output is tied)
    rope_freqs: F32 | None  # [rope_dim / 2]  llama3 frequency factors
    layers: tuple[LayerWeights, ...]


@dataclass(frozen=True)
class ForwardResult:
    logits: F32  # [T, V]
    hidden: F32 | None = None  # [n_layer + 1, T, n_embd]: [0] embeddings, [l + 1] after layer l


class Model:
    """A loaded model: its :class:`Config` and its dequantized float32 weights."""

    def __init__(self, config: Config, weights: Weights, *, load_time_s: float = 0.0) -> None:
        self.config = config
        self.weights = weights
        self.load_time_s = load_time_s

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, path_or_file: str | Path | "GGUFFile") -> "Model":
        """Read the config and dequantize every weight of a GGUF model (a path or an open file).

        Raises :class:`~reference.errors.UnsupportedArchitecture` for an unknown architecture and
        :class:`ModelError` naming a missing or misshapen tensor.
        """
        started = time.perf_counter()
        if isinstance(path_or_file, (str, Path)):
            from verispec.reference.gguf import GGUFFile

            with GGUFFile.open(path_or_file) as f:
                config, weights = _load(f)
        else:
            config, weights = _load(path_or_file)
        return cls(config, weights, load_time_s=time.perf_counter() - started)

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty KV cache for ``capacity`` positions (default and maximum: the context length)."""
        capacity = self.config.context_length if capacity is None else capacity
        if capacity > self.config.context_length:
            raise ContextOverflow(
                f"KV cache capacity {capacity} exceeds the context length {self.config.context_length}"
            )
        return KVCache(self.config, capacity)

    # -- the forward pass ------------------------------------------------------------------------

    def forward(
        self,
        tokens: TokenIds,
        cache: KVCache,
        *,
        positions: Sequence[int] | None = None,
        return_hidden: bool = False,
        tree_parents: Sequence[int] | None = None,
    ) -> ForwardResult:
        """Run a span of ``T`` tokens through every layer; commit its K,V; logits ``[T, V]``.

        ``positions`` default to ``cache.length + arange(T)``. Raises ContextOverflow before any
        work when the span does not fit the cache, and ModelError for a bad token id or
        non-finite activations (naming the layer); on error the cache length is unchanged.

        ``tree_parents`` (``[T]``, ``-1 <= parents[i] < i``) makes the span a token tree
        (:mod:`reference.tree_attention`): row i attends to the prefix and to its own ancestors
        only, at position ``cache.length + depth(i)`` (the default positions then), so its logits
        are those of a plain forward over the prefix plus its path. All T rows are written to the
        cache and committed; the decode loop keeps the accepted path (:meth:`KVCache.keep`).
        """
        ids = check_tokens(tokens, self.config.n_vocab)
        visible, positions = tree_span(tree_parents, positions, cache.length, len(ids))
        pos = span_positions(positions, cache.length, len(ids), self.config.context_length)
        start = cache.reserve(len(ids))
        x = self.embed(ids)  # [T, n_embd]
        _check_finite(x, "the token embeddings")
        collected: list[F32] | None = [x] if return_hidden else None
        x = self._run_layers(x, cache, 0, self.config.n_layer - 1, pos, start, collected, visible)
        logits = self.head(x)
        cache.advance(len(ids))
        hidden = None if collected is None else np.stack(collected)
        return ForwardResult(logits=logits, hidden=hidden)

    def forward_layers(
        self,
        hidden: F32,  # [T, n_embd]
        cache: KVCache,
        first_layer: int,
        last_layer: int,
        positions: Sequence[int],
        *,
        start: int | None = None,
    ) -> F32:
        """Run layers ``first_layer .. last_layer`` (both inclusive) on a span -> ``[T, n_embd]``.

        The span's K,V for those layers go to slots ``[start, start + T)`` (default
        ``cache.length``); nothing is committed (``cache.advance(T)`` does that, once every layer
        the caller wants has run). ``forward_layers(h, c, k + 1, k, ...)`` is the empty range.
        """
        if not (0 <= first_layer <= last_layer + 1 <= self.config.n_layer):
            raise ModelError(f"layer range {first_layer}..{last_layer} is outside 0..{self.config.n_layer - 1}")
        x = np.asarray(hidden, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.config.n_embd:
            raise ModelError(f"hidden state shape {x.shape} is not [T, {self.config.n_embd}]")
        pos = span_positions(positions, cache.length, x.shape[0], self.config.context_length)
        begin = cache.reserve(x.shape[0], start)
        return self._run_layers(x, cache, first_layer, last_layer, pos, begin, None)

    def embed(self, tokens: TokenIds) -> F32:
        """Token embeddings ``[T, n_embd]`` (times sqrt(n_embd) for gemma)."""
        ids = check_tokens(tokens, self.config.n_vocab)
        x = self.weights.token_embd[ids]
        if self.config.embed_scale != 1.0:
            x = x * np.float32(self.config.embed_scale)
        return np.asarray(x, dtype=np.float32)

    def head(self, hidden: F32) -> F32:
        """The exit head at any layer: final RMSNorm, lm_head, softcap -> logits ``[T, V]``."""
        cfg = self.config
        x = layers.rms_norm(np.asarray(hidden, dtype=np.float32), self.weights.output_norm, cfg.norm_eps)
        logits = layers.linear(x, self.weights.output)  # [T, V]
        if cfg.final_softcap is not None:
            logits = layers.softcap(logits, cfg.final_softcap)
        _check_finite(logits, "the output head")
        return logits

    # -- one layer -------------------------------------------------------------------------------

    def _run_layers(
        self,
        x: F32,  # [T, n_embd]
        cache: KVCache,
        first_layer: int,
        last_layer: int,
        positions: npt.NDArray[np.int64],  # [T]
        start: int,
        collected: list[F32] | None,
        span_visible: Mask | None = None,  # [T, T] tree attention, None for a causal span
    ) -> F32:
        for layer in range(first_layer, last_layer + 1):
            x = self._layer(x, layer, cache, positions, start, span_visible)
            _check_finite(x, f"layer {layer}")
            if collected is not None:
                collected.append(x)
        return x

    def _layer(
        self,
        x: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        start: int,
        span_visible: Mask | None = None,
    ) -> F32:
        """One decoder layer: pre-norm attention block, then pre-norm FFN block, both residual."""
        cfg, w = self.config, self.weights.layers[layer]
        h = layers.rms_norm(x, w.attn_norm, cfg.norm_eps)
        a = self._attention(h, layer, cache, positions, start, span_visible)  # [T, n_embd]
        if w.post_attn_norm is not None:
            a = layers.rms_norm(a, w.post_attn_norm, cfg.norm_eps)
        x = x + a
        h = layers.rms_norm(x, w.ffn_norm, cfg.norm_eps)
        f = layers.gated_ffn(h, w.ffn_gate, w.ffn_up, w.ffn_down, cfg.ffn_activation)
        if w.post_ffn_norm is not None:
            f = layers.rms_norm(f, w.post_ffn_norm, cfg.norm_eps)
        out = x + f
        if w.out_scale is not None:  # gemma4: scales the whole residual stream, not the branch
            out = out * w.out_scale
        return np.asarray(out, dtype=np.float32)

    def _attention(
        self,
        h: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        start: int,
        span_visible: Mask | None = None,
    ) -> F32:
        """Self-attention of the span over every cached slot up to its end -> ``[T, n_embd]``."""
        cfg, w = self.config, self.weights.layers[layer]
        n_tokens = h.shape[0]
        d = cfg.layer_head_dim(layer)  # gemma4: sliding layers have their own head dim
        n_kv = cfg.layer_n_head_kv(layer)  # gemma4: and global layers may have fewer KV heads
        q = layers.linear(h, w.wq, w.bq).reshape(n_tokens, cfg.n_head, d)
        k = layers.linear(h, w.wk, w.bk).reshape(n_tokens, n_kv, d)
        v = layers.linear(h, w.wv, w.bv).reshape(n_tokens, n_kv, d)
        if w.q_norm is not None and w.k_norm is not None:
            q = layers.rms_norm(q, w.q_norm, cfg.norm_eps)
            k = layers.rms_norm(k, w.k_norm, cfg.norm_eps)
        if cfg.value_norm:  # gemma4: RMSNorm without a weight
            v = layers.rms_norm(v, np.ones(d, dtype=np.float32), cfg.norm_eps)
        q = self._rope(q, layer, positions)
        k = self._rope(k, layer, positions)
        if d < cfg.head_dim or n_kv < cfg.n_head_kv:
            # the cache is sized for the largest head dim and KV-head count: zero-pad, slice back
            pad = ((0, 0), (0, cfg.n_head_kv - n_kv), (0, cfg.head_dim - d))
            k, v = np.pad(k, pad), np.pad(v, pad)
        cache.store(layer, start, k.transpose(1, 0, 2), v.transpose(1, 0, 2), positions)
        end = start + n_tokens
        window = cfg.sliding_window if cfg.is_sliding(layer) else 0
        keys, values = cache.keys(layer, end)[:n_kv, :, :d], cache.values(layer, end)[:n_kv, :, :d]
        out = layers.blocked_attention(
            q, keys, values, positions, cache.positions[:end], window, cfg.attn_scale, span_visible
        )
        return layers.linear(out, w.wo, w.bo)

    def _rope(self, x: F32, layer: int, positions: npt.NDArray[np.int64]) -> F32:
        """RoPE with this layer's base and scale (gemma3: local base on sliding layers)."""
        cfg = self.config
        factors = self.weights.rope_freqs
        if cfg.rope_freqs_global_only and cfg.is_sliding(layer):
            factors = None  # gemma4: the proportional-RoPE factors belong to global layers
        return layers.rope(
            x,
            positions,
            rope_dim=cfg.layer_rope_dim(layer),
            base=cfg.layer_rope_base(layer),
            freq_scale=cfg.layer_rope_freq_scale(layer),
            rope_type=cfg.rope_type,
            freq_factors=factors,
        )


# -- argument checks (shared with engine/: speed does not matter here) ---------------------------


def check_tokens(tokens: TokenIds, n_vocab: int) -> npt.NDArray[np.int64]:
    """Token ids as int64 ``[T]``; ModelError for an empty span or an id outside ``[0, n_vocab)``."""
    ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        raise ModelError("a forward pass needs at least one token")
    bad = ids[(ids < 0) | (ids >= n_vocab)]
    if bad.size:
        raise ModelError(f"token id {int(bad[0])} is outside the vocabulary [0, {n_vocab})")
    return ids


def span_positions(
    positions: Sequence[int] | None, cache_length: int, n_tokens: int, context_length: int
) -> npt.NDArray[np.int64]:
    """Positions ``[T]`` of a span: ``cache_length + arange(T)`` by default; ModelError for a count
    mismatch, ContextOverflow for a position outside ``[0, context_length)``."""
    if positions is None:
        return cache_length + np.arange(n_tokens, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if pos.size != n_tokens:
        raise ModelError(f"{pos.size} positions for a span of {n_tokens} tokens")
    if pos.size and (pos.min() < 0 or pos.max() >= context_length):
        raise ContextOverflow(
            f"position {int(pos.max()) if pos.max() >= 0 else int(pos.min())} is outside [0, {context_length})"
        )
    return pos


def tree_span(
    parents: Sequence[int] | None, positions: Sequence[int] | None, cache_length: int, n_tokens: int
) -> tuple[Mask | None, Sequence[int] | None]:
    """(span_visible [T, T] or None, positions) of a span with optional ``tree_parents``.

    None: a causal span, positions as given. A chain is a causal span too (no mask: the positional
    rule is already the ancestor rule). Otherwise the ancestor mask, and positions defaulting to
    ``cache_length + depth``; ModelError for malformed parents (shared with engine/).
    """
    if parents is None:
        return None, positions
    arr = tree_attention.check_parents(parents, n_tokens)
    if positions is None:
        positions = tree_attention.tree_positions(arr, cache_length).tolist()
    if tree_attention.is_chain(arr.tolist()):
        return None, positions
    return tree_attention.ancestor_mask(arr), positions


def _check_finite(x: F32, where: str) -> None:
    if not np.isfinite(x).all():
        raise ModelError(f"non-finite values (NaN or inf) in the activations after {where}")


# -- loading ---------------------------------------------------------------------------------------


class _TensorLoader:
    """Dequantizes tensors by name, checking presence and shape (errors name the tensor)."""

    def __init__(self, f: "GGUFFile") -> None:
        self.f = f

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def get(self, name: str, shape: tuple[int, ...]) -> F32:
        if name not in self.f.tensors:
            raise ModelError(f"tensor {name!r} is missing")
        found = tuple(int(n) for n in self.f.tensors[name].shape)
        if found != shape:
            raise ModelError(f"tensor {name!r} has shape {list(found)}, expected {list(shape)}")
        return np.ascontiguousarray(self.f.dequantize(name), dtype=np.float32).reshape(shape)

    def optional(self, name: str, shape: tuple[int, ...]) -> F32 | None:
        return self.get(name, shape) if self.has(name) else None


def _load(f: "GGUFFile") -> tuple[Config, Weights]:
    cfg = Config.from_gguf(f)
    t = _TensorLoader(f)
    e, ff = cfg.n_embd, cfg.n_ff
    if t.has("blk.0.ffn_gate_inp.weight"):
        raise ModelError("mixture-of-experts layers (ffn_gate_inp) are not supported")
    token_embd = t.get("token_embd.weight", (cfg.n_vocab, e))
    output = t.optional("output.weight", (cfg.n_vocab, e))
    for name in ("rope_factors_long.weight", "rope_factors_short.weight"):
        if t.has(name):
            raise ModelError(f"LongRoPE scaling ({name!r}) is not supported")
    blocks = []
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        d = cfg.layer_head_dim(il)
        q_out, kv_out = cfg.n_head * d, cfg.layer_n_head_kv(il) * d
        wq, wk, wv = _attention_projections(t, p, q_out, kv_out, e, v_may_be_k=cfg.arch == "gemma4")
        ffn_gate, ffn_up = _gate_up_projections(t, p, ff, e, fused=cfg.arch == "phi3")
        blocks.append(
            LayerWeights(
                attn_norm=t.get(p + "attn_norm.weight", (e,)),
                wq=wq,
                wk=wk,
                wv=wv,
                wo=t.get(p + "attn_output.weight", (e, q_out)),
                ffn_norm=t.get(p + "ffn_norm.weight", (e,)),
                ffn_gate=ffn_gate,
                ffn_up=ffn_up,
                ffn_down=t.get(p + "ffn_down.weight", (e, ff)),
                bq=t.optional(p + "attn_q.bias", (q_out,)),
                bk=t.optional(p + "attn_k.bias", (kv_out,)),
                bv=t.optional(p + "attn_v.bias", (kv_out,)),
                bo=t.optional(p + "attn_output.bias", (e,)),
                q_norm=t.get(p + "attn_q_norm.weight", (d,)) if cfg.qk_norm else None,
                k_norm=t.get(p + "attn_k_norm.weight", (d,)) if cfg.qk_norm else None,
                post_attn_norm=t.get(p + "post_attention_norm.weight", (e,)) if cfg.post_norms else None,
                post_ffn_norm=t.get(p + "post_ffw_norm.weight", (e,)) if cfg.post_norms else None,
                out_scale=t.optional(p + "layer_output_scale.weight", (1,)),
            )
        )
    weights = Weights(
        token_embd=token_embd,
        output_norm=t.get("output_norm.weight", (e,)),
        output=token_embd if output is None else output,
        rope_freqs=t.optional("rope_freqs.weight", (cfg.rope_dim // 2,)),
        layers=tuple(blocks),
    )
    return cfg, weights


def _attention_projections(
    t: _TensorLoader, p: str, q_out: int, kv_out: int, e: int, *, v_may_be_k: bool = False
) -> tuple[F32, F32, F32]:
    """(wq, wk, wv): separate tensors, or the rows of a fused ``attn_qkv`` (phi3) split Q|K|V.

    llama.cpp's create_tensor_qkv takes whichever the file has; a fused matmul computes each
    output row as the same dot product as the split one, so splitting changes no number. With
    ``v_may_be_k`` (gemma4's attention_k_eq_v) a missing ``attn_v`` means V is the K projection.
    """
    if t.has(p + "attn_qkv.weight"):
        qkv = t.get(p + "attn_qkv.weight", (q_out + 2 * kv_out, e))
        return qkv[:q_out].copy(), qkv[q_out : q_out + kv_out].copy(), qkv[q_out + kv_out :].copy()
    wq = t.get(p + "attn_q.weight", (q_out, e))
    wk = t.get(p + "attn_k.weight", (kv_out, e))
    wv = wk if v_may_be_k and not t.has(p + "attn_v.weight") else t.get(p + "attn_v.weight", (kv_out, e))
    return wq, wk, wv


def _gate_up_projections(t: _TensorLoader, p: str, ff: int, e: int, *, fused: bool) -> tuple[F32, F32]:
    """(ffn_gate, ffn_up); phi3 stores both in ``ffn_up`` ``[2 * n_ff, n_embd]``, gate rows first
    (llama.cpp: build_ffn with LLM_FFN_SWIGLU and no gate tensor -> ggml_swiglu on the halves)."""
    if fused:
        gate_up = t.get(p + "ffn_up.weight", (2 * ff, e))
        return gate_up[:ff].copy(), gate_up[ff:].copy()
    return t.get(p + "ffn_gate.weight", (ff, e)), t.get(p + "ffn_up.weight", (ff, e))
