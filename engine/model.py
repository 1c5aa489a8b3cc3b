"""The fast forward pass: the same function as :mod:`reference.model`, laid out for BLAS.

What changes against the reference (and why it is still the same function):

- Weights are dequantized once (or, with ``weights="quantized"``, kept in their GGUF blocks and
  dequantized one layer at a time, see :mod:`engine.weights`) into fused float32 matrices:
  ``[wq; wk; wv]`` is one ``[q + 2 kv, n_embd]`` matrix and ``[gate; up]`` one ``[2 n_ff, n_embd]``
  matrix, so a layer is 4 matmuls instead of 7. A fused matmul computes the same dot products;
  only the kernel's blocking (hence float32 rounding order) may differ. Every matmul goes through
  the seam :class:`engine.matmul.Matmul` (NumPy or onnxruntime, chosen at load).
- ``weights="int8"`` is a different function: the file's blocks with int8 activations
  (:mod:`engine.matmul`, backend ``ort-q``), the target law of its own decoding. By default its
  layers run fused (:mod:`engine.fused`: one onnxruntime graph between two attentions, around the
  KV store and the attention, :meth:`FastModel._run_chain`); ``fused=False`` / ``VERISPEC_INT8_FUSED=0`` runs the
  per-matrix path (:meth:`FastModel._layer`).
- RoPE turns Q and K of a layer in one pass, as ``x * cos + rotate(x) * sin`` with precomputed
  per-dimension tables: each output element is the reference's ``x0 cos - x1 sin`` (negation and
  commutation are exact in IEEE arithmetic), so RoPE is bit-identical.
- The per-layer finite check is one check on the logits (a NaN or inf anywhere reaches them).
- ``forward(..., last_only=True)`` runs the head on the last row only (decode and prefill need
  one row; the head is the largest matrix of a small model).

The cache is :class:`EngineCache`: the reference cache preallocated for the whole request, so
rollback stays :meth:`~reference.kvcache.KVCache.truncate` (O(1)) and nothing grows while decoding.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from verispec.engine import huge_pages
from verispec.engine.matmul import BIND_MAX_ROWS, io_binding_default
from verispec.engine.pages import zeros_on_small_pages
from verispec.engine.rope import rotation
from verispec.engine.weights import FusedLayer, WeightStore, load_weights
from verispec.reference import layers
from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, ROPE_NORM, Config
from verispec.reference.errors import ContextOverflow, ModelError, UnsupportedArchitecture
from verispec.reference.kvcache import KVCache
from verispec.reference.model import ForwardResult, Mask, TokenIds, check_tokens, span_positions, tree_span

if TYPE_CHECKING:
    from verispec.engine.sparse_head import HeadOptions, SparseHead
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.sampling import SamplingParams

F32 = npt.NDArray[np.float32]

# Preallocate at most this many slots up front; beyond it the cache grows by doubling (the default
# capacity is the whole context, 32768 slots for gemma3: ~1.2 GB that a short request never uses).
PREALLOCATE_SLOTS = 4096


@dataclass(frozen=True)
class SpanRows:
    """One causal span's rows in a layer pass: where its K, V go and what its rows attend to."""

    cache: KVCache
    positions: npt.NDArray[np.int64]  # [T_i]
    start: int  # the cache slot of its first row
    rows: slice  # its rows among the pass's rows
    visible: Mask | None = None  # [T_i, T_i]: a token tree's mask (reference/tree_attention.py)


class EngineCache(KVCache):
    """The reference KV cache, preallocated for ``min(capacity, PREALLOCATE_SLOTS)`` slots, its
    K and V on 4 KiB pages: only the slots written become resident (pages.zeros_on_small_pages)."""

    def _initial_slots(self, capacity: int) -> int:
        return min(capacity, PREALLOCATE_SLOTS)

    def _zeros(self, slots: int) -> F32:
        cfg = self.config
        return zeros_on_small_pages((cfg.n_layer, cfg.n_head_kv, slots, cfg.head_dim), np.float32)


LARGE_METADATA_ITEMS = 4096  # a metadata list this long is a tokenizer table, not a model setting


def drop_large_metadata(f: "GGUFFile") -> None:
    """Drop ``f``'s long metadata lists (the tokenizer's tokens, scores, types, merges: Python
    objects, ~31 MiB for Gemma 3's 262144-entry vocabulary) once the config is read. The weights
    need none of it, and a load's peak is the weights plus whatever else is alive then; the
    tokenizer reads its own copy of the file. Only for a file the loader opened itself."""
    for key in [k for k, v in f.metadata.items() if isinstance(v, list) and len(v) >= LARGE_METADATA_ITEMS]:
        del f.metadata[key]


def _file_bytes(path_or_file: "str | Path | GGUFFile") -> int | None:
    """The size of the file a load reads (None where it cannot be read: the load's own open then
    raises its typed error)."""
    if isinstance(path_or_file, (str, Path)):
        try:
            return Path(path_or_file).stat().st_size
        except OSError:
            return None
    return path_or_file.file_size


class FastModel:
    """A loaded model with the reference :class:`~reference.model.Model` interface, fast."""

    def __init__(
        self, config: Config, store: WeightStore, *, load_time_s: float = 0.0, sparse_head: "SparseHead | None" = None
    ) -> None:
        from verispec.engine.architectures import FAST_ARCHITECTURES

        if config.arch not in FAST_ARCHITECTURES:
            raise UnsupportedArchitecture(
                f"the fast engine does not implement architecture {config.arch!r} "
                f"(it does: {', '.join(FAST_ARCHITECTURES)}; use --engine reference)"
            )
        self.config = config
        self.store = store
        self.load_time_s = load_time_s
        self.weights_mode = store.mode
        self.backend = store.backend  # numpy | ort | ort-q (engine.matmul)
        # int8 rounding turns any float32 difference upstream into a different rounding, so that
        # mode's law must not depend on how many rows a pass has: batch-invariant attention
        self.batch_invariant = store.mode == "int8"
        self.fused = store.fused_layers is not None  # int8: one graph between attentions (engine/fused.py)
        # the fused graphs run through IO binding (engine.matmul.OrtGraph.run_bound); a plain
        # attribute, so one loaded model runs either way (the A/B and the bit-identity tests)
        self.io_binding = self.fused and io_binding_default()
        self._switches: dict[tuple[int, bool], tuple[F32, npt.NDArray[np.bool_]]] = {}
        cfg = config
        self._q = cfg.n_head * cfg.head_dim
        self._kv = cfg.n_head_kv * cfg.head_dim
        self._rot_index, self._rot_sign = rotation(cfg.head_dim, cfg.rope_dim, cfg.rope_type)
        self._attn_scale = np.float32(cfg.attn_scale)
        self._windows = [cfg.sliding_window if cfg.is_sliding(il) else 0 for il in range(cfg.n_layer)]
        # the head mode (engine/sparse_head.py): with a sparse head, a view made by for_law gives
        # decision rows for its law from forward (and, for an exit head, from head)
        self.sparse_head = sparse_head
        self.head_mode = "full" if sparse_head is None else "sparse"
        self._law: "SamplingParams | None" = None
        self._exit_head_decides = False

    @classmethod
    def load(
        cls,
        path_or_file: str | Path | "GGUFFile",
        *,
        weights: str = "f32",
        backend: str = "auto",
        fused: bool | None = None,
        pass_boundaries: Iterable[int] = (),
        head: "str | HeadOptions" = "full",
        head_kernel: str | None = None,
        layer_kernel: str | None = None,
    ) -> "FastModel":
        """Read config and weights of a GGUF model (``weights``: see engine.weights.WEIGHT_MODES;
        ``backend``: the f32 mode's kernel, see engine.weights.resolve_backend; ``fused``: the int8
        mode's fused layers, see engine.fused -- None: ``VERISPEC_INT8_FUSED`` or the default;
        ``pass_boundaries``: depths 1..L-1 where this model's passes will start and stop -- early
        exit's candidate depths, a layer-skip draft's exit layer -- where the fused layers' chain is
        cut, see engine.weights.load_weights: the same bits, no link half computed and dropped;
        ``head``: the int8 mode's head mode, ``full`` or ``sparse`` or an
        :class:`engine.sparse_head.HeadOptions`, see :meth:`with_head`; ``head_kernel``: the int8
        mode's head kernel, ``mlas`` or ``tile``, see engine.weights.HEAD_KERNELS -- None:
        ``VERISPEC_INT8_HEAD_KERNEL`` or the default; ``layer_kernel``: the int8 mode's layer kernel,
        ``mlas`` or ``tile``, see engine.weights.LAYER_KERNELS -- None: ``VERISPEC_INT8_LAYER_KERNEL``
        or the default).

        Raises what :meth:`reference.model.Model.load` raises, and
        :class:`engine.weights.InsufficientMemory` before loading when the mode will not fit.
        """
        from verispec.engine.sparse_head import HeadOptions, SparseHead

        options = head if isinstance(head, HeadOptions) else HeadOptions(mode=head)
        started = time.perf_counter()
        collapse = huge_pages.worth_collapsing(_file_bytes(path_or_file))
        memory_before = huge_pages.snapshot() if collapse else frozenset()  # the host's own memory: never collapsed
        sparse: SparseHead | None = None
        if isinstance(path_or_file, (str, Path)):
            from verispec.reference.gguf import GGUFFile

            with GGUFFile.open(path_or_file) as f:
                config = Config.from_gguf(f)
                drop_large_metadata(f)  # our own handle: its vocabulary lists need not outlive the config
                store = load_weights(f, config, weights, backend, fused, pass_boundaries, head_kernel, layer_kernel)
                if options.mode == "sparse":
                    sparse = SparseHead.from_gguf(f, config, store, options)
        else:
            config = Config.from_gguf(path_or_file)
            store = load_weights(
                path_or_file, config, weights, backend, fused, pass_boundaries, head_kernel, layer_kernel
            )
            if options.mode == "sparse":
                sparse = SparseHead.from_gguf(path_or_file, config, store, options)
        if collapse:
            store.huge_page_bytes = huge_pages.collapse_new_memory(memory_before)  # the same bytes, fewer TLB misses
        return cls(config, store, load_time_s=time.perf_counter() - started, sparse_head=sparse)

    def with_head(self, head: "str | HeadOptions", source: "str | Path | GGUFFile") -> "FastModel":
        """This model, its weights shared, in head mode ``head``: ``full`` (the head computes every
        logit) or ``sparse`` (:class:`engine.sparse_head.SparseHead`, whose sketch reads the head's
        bytes from ``source``, the file this model was loaded from). A sparse head serves the
        decode loops through :meth:`for_law` views and ``engine.generate``'s plain loop; the
        tokens are the full head's, bit for bit. ModelError for a mode or file it cannot serve."""
        from verispec.engine.sparse_head import HeadOptions, SparseHead
        from verispec.reference.gguf import GGUFFile

        options = head if isinstance(head, HeadOptions) else HeadOptions(mode=head)
        sparse = None
        if options.mode == "sparse":
            memory_before = huge_pages.snapshot()
            if isinstance(source, GGUFFile):
                sparse = SparseHead.from_gguf(source, self.config, self.store, options)
            else:
                with GGUFFile.open(source) as f:
                    sparse = SparseHead.from_gguf(f, self.config, self.store, options)
            huge_pages.collapse_new_memory(memory_before)  # the sketch's bytes too, as a load's
        return FastModel(self.config, self.store, load_time_s=self.load_time_s, sparse_head=sparse)

    def for_law(self, params: "SamplingParams", *, exit_head: bool = False) -> "FastModel":
        """A view of this model (everything shared) for a decode loop under the law ``params``:
        with a sparse head, its :meth:`forward` and :meth:`forward_many` logits are decision rows
        (:meth:`engine.sparse_head.SparseHead.decision_rows`, no history known: a repeat penalty
        runs the full head) -- rows the law maps to the full head's probabilities bit for bit,
        the argmax and the runner-up's value (an exit margin) included; with ``exit_head`` its
        :meth:`head` too (the early-exit loop's exit and full heads). Only that law may read the
        rows: a loop whose drafts read the target's head under another law keeps ``exit_head``
        off. Without a sparse head: this model itself."""
        if self.sparse_head is None:
            return self
        view = copy.copy(self)
        view._law, view._exit_head_decides = params, exit_head
        return view

    def new_cache(self, capacity: int | None = None) -> EngineCache:
        """An empty preallocated cache for ``capacity`` positions (default: the context length)."""
        capacity = self.config.context_length if capacity is None else capacity
        if capacity > self.config.context_length:
            raise ContextOverflow(
                f"KV cache capacity {capacity} exceeds the context length {self.config.context_length}"
            )
        return EngineCache(self.config, capacity)

    def verify_cost_curve(self, max_rows: int) -> dict[int, float]:
        """rows -> cost of a ``rows``-row forward relative to one row, measured once per model in
        this process (engine/verify_cost.py); speculative decoding's ``--adaptive`` caps k by it."""
        from verispec.engine.verify_cost import cost_curve

        return cost_curve(self, max_rows)

    # -- the forward pass ------------------------------------------------------------------------

    def forward(
        self,
        tokens: TokenIds,
        cache: KVCache,
        *,
        positions: Sequence[int] | None = None,
        return_hidden: bool = False,
        last_only: bool = False,
        tree_parents: Sequence[int] | None = None,
    ) -> ForwardResult:
        """Same contract as :meth:`reference.model.Model.forward`; ``last_only`` gives ``[1, V]``.

        Non-finite activations raise ModelError (naming the first layer where they appear) and
        leave the cache length unchanged. ``tree_parents``: a token-tree span, as the reference's
        (tree attention mask; in the batch-invariant int8 mode each row along its own path).
        """
        ids = check_tokens(tokens, self.config.n_vocab)
        visible, positions = tree_span(tree_parents, positions, cache.length, len(ids))
        pos = span_positions(positions, cache.length, len(ids), self.config.context_length)
        start = cache.reserve(len(ids))
        x = self.embed(ids)  # [T, n_embd]
        collected: list[F32] | None = [x] if return_hidden else None
        x = self._run_layers(x, cache, 0, self.config.n_layer - 1, pos, start, collected, visible)
        logits = self._pass_logits(x[-1:] if last_only else x)
        if not np.isfinite(logits).all():
            self._raise_non_finite(ids, pos)
        cache.advance(len(ids))
        hidden = None if collected is None else np.stack(collected)
        return ForwardResult(logits=logits, hidden=hidden)

    @property
    def batches_spans(self) -> bool:
        """Whether :meth:`forward_many` stacks its spans into one call of each graph: the fused
        int8 mode only, whose rows are batch-invariant (every graph op is per row, the attention
        is one call per row), so a span's rows cannot depend on what else is in the pass. In the
        f32 mode BLAS blocking depends on the row count and in the unfused int8 path the layer is
        not split around the attention: there ``forward_many`` runs one ``forward`` per span."""
        return self.batch_invariant and self.store.fused_layers is not None

    def forward_many(
        self, spans: Sequence[tuple[TokenIds, KVCache]], *, last_only: bool = False
    ) -> list[ForwardResult]:
        """:meth:`forward` of several causal spans, each on its own cache, in ONE pass.

        Requirement: span i's result equals, bit for bit, ``forward(tokens_i, cache_i,
        last_only=last_only)`` run alone (:attr:`batches_spans`: the rows of all spans go through
        one call of each fused graph per layer, RoPE at each row's own position, K, V stored into
        each span's own cache and attended row by row over it; elsewhere one ``forward`` a span).
        The caches must be distinct (ModelError). A bad span (an empty one, an id outside the
        vocabulary, a cache too short: ModelError / ContextOverflow) or non-finite logits in any
        span raise as ``forward`` raises for that span, and then NO cache is advanced.
        """
        caches = [cache for _, cache in spans]
        if len({id(cache) for cache in caches}) != len(caches):
            raise ModelError("forward_many needs a distinct cache for every span")
        if not self.batches_spans or len(spans) <= 1:
            return self._forward_each(spans, last_only)
        ids = [check_tokens(tokens, self.config.n_vocab) for tokens, _ in spans]
        pos = [span_positions(None, cache.length, len(i), self.config.context_length) for i, cache in zip(ids, caches)]
        starts = [cache.reserve(len(i)) for i, cache in zip(ids, caches)]
        ends = np.cumsum([len(i) for i in ids])
        x = self._run_layers_many(self.embed(np.concatenate(ids)), caches, pos, starts, ends)
        logits = self._pass_logits(x[ends - 1] if last_only else x)
        bounds = np.arange(1, len(ids) + 1) if last_only else ends
        per_span = np.split(logits, bounds[:-1])
        for span_ids, span_pos, span_logits in zip(ids, pos, per_span):
            if not np.isfinite(span_logits).all():
                self._raise_non_finite(span_ids, span_pos)
        for span_ids, cache in zip(ids, caches):
            cache.advance(len(span_ids))
        return [ForwardResult(logits=np.ascontiguousarray(rows)) for rows in per_span]

    def _forward_each(self, spans: Sequence[tuple[TokenIds, KVCache]], last_only: bool) -> list[ForwardResult]:
        """One :meth:`forward` a span; on an error the spans already run are rolled back."""
        done: list[tuple[KVCache, int]] = []
        out = []
        try:
            for tokens, cache in spans:
                length = cache.length
                out.append(self.forward(tokens, cache, last_only=last_only))
                done.append((cache, length))
        except BaseException:
            for cache, length in done:
                cache.truncate(length)
            raise
        return out

    def _run_layers_many(
        self,
        x: F32,  # [N, n_embd]: the spans' rows, stacked
        caches: Sequence[KVCache],
        positions: Sequence[npt.NDArray[np.int64]],  # each span's [T_i]
        starts: Sequence[int],
        ends: npt.NDArray[np.int64],  # [n_spans]: the row after each span's last
    ) -> F32:
        """Every layer of the fused int8 mode on stacked spans: :meth:`_run_chain` with one
        :class:`SpanRows` a span (its graph calls on all rows, the KV store and the attention span
        by span)."""
        spans = [
            SpanRows(cache, span_pos, start, slice(int(end) - len(span_pos), int(end)))
            for cache, span_pos, start, end in zip(caches, positions, starts, ends)
        ]
        return self._run_chain(x, 0, self.config.n_layer - 1, spans, np.concatenate(positions), None)

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
        """Same contract as :meth:`reference.model.Model.forward_layers` (nothing committed)."""
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
        x = self.store.embed_rows(ids)
        if self.config.embed_scale != 1.0:
            x = x * np.float32(self.config.embed_scale)
        return np.asarray(x, dtype=np.float32)

    def head(self, hidden: F32) -> F32:
        """Final RMSNorm, lm_head, softcap -> logits ``[T, V]`` (any layer's exit head); a
        :meth:`for_law` view with ``exit_head``: its law's decision rows."""
        if self._law is not None and self._exit_head_decides:
            return self._decision_rows(hidden)
        return self.full_head(hidden)

    def full_head(self, hidden: F32) -> F32:
        """Final RMSNorm, lm_head, softcap -> every logit ``[T, V]``, whatever the head mode."""
        return self.head_from_input(self.head_input(hidden))

    def head_input(self, hidden: F32) -> F32:
        """The head's input: the final RMSNorm of ``hidden`` ``[T, n_embd]``."""
        return layers.rms_norm(np.asarray(hidden, dtype=np.float32), self.store.output_norm, self.config.norm_eps)

    def head_from_input(self, x: F32) -> F32:
        """lm_head and softcap on the head's input ``x`` (:meth:`head_input`) -> logits ``[T, V]``."""
        logits = self.store.head_matmul(x)  # [T, V]
        if self.config.final_softcap is not None:
            logits = layers.softcap(logits, self.config.final_softcap)
        return logits

    def _pass_logits(self, hidden: F32) -> F32:
        """A pass's logits: the full head's, or on a :meth:`for_law` view its decision rows."""
        return self.full_head(hidden) if self._law is None else self._decision_rows(hidden)

    def _decision_rows(self, hidden: F32) -> F32:
        """The sparse head's decision rows for this view's law (the full head's rows where it
        declines; a final softcap, which may merge distinct logits, always declines)."""
        sparse, law = self.sparse_head, self._law
        assert sparse is not None and law is not None
        started = time.perf_counter()
        x = self.head_input(hidden)
        rows = None
        if self.config.final_softcap is None:
            rows = sparse.decision_rows(x, law, None)
        else:
            sparse.stats.rows += x.shape[0]
            sparse.stats.fell_back("softcap", x.shape[0])
        out = self.head_from_input(x) if rows is None else rows
        sparse.stats.seconds += time.perf_counter() - started
        return out

    def last_head_input(self, tokens: TokenIds, cache: KVCache) -> F32:
        """:meth:`forward` of ``tokens`` up to the head: the head's input of the last row
        ``[1, n_embd]`` (the cache advances as forward's; non-finite activations raise ModelError
        as forward's do). Plain decoding on a sparse head decides from it
        (:func:`engine.sparse_head.choose_token`)."""
        ids = check_tokens(tokens, self.config.n_vocab)
        pos = span_positions(None, cache.length, len(ids), self.config.context_length)
        start = cache.reserve(len(ids))
        x = self._run_layers(self.embed(ids), cache, 0, self.config.n_layer - 1, pos, start, None)
        out = self.head_input(x[-1:])
        if not np.isfinite(out).all():
            self._raise_non_finite(ids, pos)
        cache.advance(len(ids))
        return out

    # -- layers ----------------------------------------------------------------------------------

    def _run_layers(
        self,
        x: F32,  # [T, n_embd]
        cache: KVCache,
        first_layer: int,
        last_layer: int,
        positions: npt.NDArray[np.int64],  # [T]
        start: int,
        collected: list[F32] | None,
        span_visible: Mask | None = None,  # [T, T] tree attention (reference/tree_attention.py)
    ) -> F32:
        if self.store.fused_layers is not None:
            span = (SpanRows(cache, positions, start, slice(0, x.shape[0]), span_visible),)
            return self._run_chain(x, first_layer, last_layer, span, positions, collected)
        tables: dict[tuple[float, float], tuple[F32, F32]] = {}
        for layer in range(first_layer, last_layer + 1):
            rope = self._rope_for(layer, positions, tables, fused=False)
            x = self._layer(x, layer, self.store.layer(layer), cache, positions, start, rope, span_visible)
            if collected is not None:
                collected.append(x)
        return x

    def _rope_for(
        self,
        layer: int,
        positions: npt.NDArray[np.int64],
        tables: dict[tuple[float, float], tuple[F32, F32]],
        *,
        fused: bool,
    ) -> tuple[F32, F32]:
        """The RoPE tables of ``layer`` at ``positions`` (cos, sin; the fused graphs take the sign
        of the rotation in sin), computed once per (base, scale) in ``tables``."""
        key = (self.config.layer_rope_base(layer), self.config.layer_rope_freq_scale(layer))
        if key not in tables:
            cos, sin = self._rope_tables(positions, *key)
            tables[key] = (cos, sin * self._rot_sign) if fused else (cos, sin)
        return tables[key]

    def _layer(
        self,
        x: F32,
        layer: int,
        w: FusedLayer,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        start: int,
        rope: tuple[F32, F32],
        span_visible: Mask | None = None,
    ) -> F32:
        """One decoder layer (see reference.model.Model._layer), on fused weights."""
        cfg = self.config
        n_tokens = x.shape[0]
        h = layers.rms_norm(x, w.attn_norm, cfg.norm_eps)
        qkv = w.qkv(h)  # [T, q + 2 kv]
        if w.bqkv is not None:
            qkv += w.bqkv
        n_qk_heads = cfg.n_head + cfg.n_head_kv
        qk = qkv[:, : self._q + self._kv].reshape(n_tokens, n_qk_heads, cfg.head_dim)
        if w.qk_norm is not None:
            qk = layers.rms_norm(qk, w.qk_norm, cfg.norm_eps)  # per head: q rows then k rows
        qk = self._rotate(qk, rope)
        q = qk[:, : cfg.n_head]  # [T, n_head, d]
        k = qk[:, cfg.n_head :]  # [T, n_kv, d]
        v = qkv[:, self._q + self._kv :].reshape(n_tokens, cfg.n_head_kv, cfg.head_dim)
        cache.store(layer, start, k.transpose(1, 0, 2), v.transpose(1, 0, 2), positions)
        end = start + n_tokens
        attend = self._attend_invariant if self.batch_invariant else self._attend
        a = w.o(attend(q, layer, cache, positions, end, span_visible))  # [T, n_embd]
        if w.bo is not None:
            a += w.bo
        if w.post_attn_norm is not None:
            a = layers.rms_norm(a, w.post_attn_norm, cfg.norm_eps)
        x = x + a
        h = layers.rms_norm(x, w.ffn_norm, cfg.norm_eps)
        gu = w.gu(h)  # [T, 2 n_ff]
        g, u = gu[:, : cfg.n_ff], gu[:, cfg.n_ff :]
        if cfg.ffn_activation == ACT_SILU:
            act = layers.silu(g)
        elif cfg.ffn_activation == ACT_GELU_TANH:
            act = layers.gelu_tanh(g)
        else:
            raise ModelError(f"unknown FFN activation {cfg.ffn_activation!r}")
        act *= u
        f = w.down(act)  # [T, n_embd]
        if w.post_ffn_norm is not None:
            f = layers.rms_norm(f, w.post_ffn_norm, cfg.norm_eps)
        return np.asarray(x + f, dtype=np.float32)

    def _run_chain(
        self,
        x: F32,  # [N, n_embd]: the spans' rows, stacked
        first: int,
        last: int,
        spans: Sequence[SpanRows],  # the causal spans whose rows make up x
        positions: npt.NDArray[np.int64],  # [N]: every row's position
        collected: list[F32] | None,
    ) -> F32:
        """Layers ``first..last`` of the fused int8 mode: the graphs of its
        :class:`engine.fused.LayerChain` on all rows (one onnxruntime call between two attentions),
        and between them each span's KV store and attention. Every graph op is per row and the
        attention is one call a row, so a span's rows get the same bits whatever else is in x.
        A pass that starts or stops inside a link computes and drops that link's other half (see
        LayerChain); ``collected`` gets the hidden state after every layer (with :attr:`io_binding`, the
        graphs' buffers: valid until the next pass, so the caller stacks or copies them before it)."""
        chain = self.store.fused_layers
        assert chain is not None
        if last < first:
            return x
        tables: dict[tuple[float, float], tuple[F32, F32]] = {}

        def rope(layer: int) -> tuple[F32, F32]:  # cos, sign * sin: [N, 1, d]
            return self._rope_for(layer, positions, tables, fused=True)

        rows = x.shape[0]
        # bound: the graphs write into buffers they own and reuse (OrtGraph.run_bound); x, qk, v are
        # then those buffers, overwritten by the next pass, so what outlives the pass is copied
        bound = self.io_binding
        if first in chain.entry:
            graph = chain.entry[first]
            qk, v_flat = (graph.run_bound if bound else graph.run)(x, *rope(first))
        else:  # enter link[first - 1] past its post half: y = x, bit for bit (a Where)
            attn, enter = self._switch_rows(rows, True)
            graph = chain.link[first - 1]
            _, qk, v_flat = (graph.run_bound if bound else graph.run)(attn, x, *rope(first), enter)
        _, stay = self._switch_rows(rows, False)
        for layer in range(first, last + 1):
            a = self._attend_spans(qk, v_flat, layer, spans)  # [N, n_head d]
            if layer in chain.exit:
                graph = chain.exit[layer]
                x = (graph.run_bound if bound else graph.run)(a, x)[0]
                if layer < last:
                    graph = chain.entry[layer + 1]
                    qk, v_flat = (graph.run_bound if bound else graph.run)(x, *rope(layer + 1))
            else:  # the link; at the pass's last layer its qk, v (the next layer's) are dropped
                graph = chain.link[layer]
                x, qk, v_flat = (graph.run_bound if bound else graph.run)(a, x, *rope(layer + 1), stay)
            if collected is not None:  # each graph runs once a pass, so no later call of this pass overwrites x
                collected.append(x)  # (the caller stacks them before its next pass)
        return x.copy() if bound else x  # bound: the next pass would overwrite it

    def _switch_rows(self, rows: int, enter: bool) -> tuple[F32, npt.NDArray[np.bool_]]:
        """A link's ``attn`` of zeros and its per-row ``enter`` switch for ``rows`` rows, made once
        per (rows, enter) and never written (the same objects each pass: a bound graph keeps them
        bound)."""
        key = (rows, enter)
        made = self._switches.get(key)
        if made is None:
            attn = np.zeros((rows, self._q), dtype=np.float32)
            switch = np.full((rows, 1), enter, dtype=np.bool_)
            attn.flags.writeable = switch.flags.writeable = False
            made = (attn, switch)
            if rows <= BIND_MAX_ROWS:
                self._switches[key] = made
        return made

    def _attend_spans(self, qk: F32, v_flat: F32, layer: int, spans: Sequence[SpanRows]) -> F32:
        """Each span's K, V of ``layer`` into its cache and its rows' batch-invariant attention
        (this mode's law; a token tree row by row along its paths) -> ``[N, n_head d]``."""
        cfg = self.config
        q, k = qk[:, : cfg.n_head], qk[:, cfg.n_head :]  # views: [N, n_head, d], [N, n_kv, d]
        v = v_flat.reshape(qk.shape[0], cfg.n_head_kv, cfg.head_dim)
        parts = []
        for span in spans:
            rows = span.rows
            span.cache.store(layer, span.start, k[rows].transpose(1, 0, 2), v[rows].transpose(1, 0, 2), span.positions)
            end = span.start + len(span.positions)
            parts.append(self._attend_invariant(q[rows], layer, span.cache, span.positions, end, span.visible))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _attend(
        self,
        q: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        end: int,
        span_visible: Mask | None = None,
    ) -> F32:
        """Attention of the span in blocks of query rows (rows are independent): the scores of a
        block are ``[n_head, block, S]``, so a prefill's memory grows linearly with its length."""
        block = layers.ATTENTION_QUERY_BLOCK
        if q.shape[0] <= block:
            return self._attend_block(q, layer, cache, positions, end, span_visible)
        parts = [
            self._attend_block(
                q[i : i + block],
                layer,
                cache,
                positions[i : i + block],
                end,
                None if span_visible is None else span_visible[i : i + block],
            )
            for i in range(0, q.shape[0], block)
        ]
        return np.concatenate(parts)

    def _attend_block(
        self,
        q: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        end: int,
        span_visible: Mask | None = None,  # [block, T]: this block's rows of the tree mask
    ) -> F32:
        """Grouped-query softmax attention of the span over slots ``[0, end)`` -> ``[T, q]``."""
        cfg = self.config
        n_tokens = q.shape[0]
        n_kv, group, d = cfg.n_head_kv, cfg.n_group, cfg.head_dim
        # [T, n_kv, g, d] -> [n_kv, g*T, d]: rows of one kv head ordered (group member, token)
        qg = q.reshape(n_tokens, n_kv, group, d).transpose(1, 2, 0, 3).reshape(n_kv, group * n_tokens, d)
        keys = cache.k[layer, :, :end]  # [n_kv, S, d]
        scores = qg @ keys.transpose(0, 2, 1)  # [n_kv, g*T, S]
        scores *= np.float32(cfg.attn_scale)
        window = cfg.sliding_window if cfg.is_sliding(layer) else 0
        if n_tokens > 1 or window > 0 or positions[-1] < cache.positions[:end].max():
            mask = layers.attention_mask(positions, cache.positions[:end], window)  # [T, S]
            if span_visible is not None:  # the tree's rows are the last keys
                mask[:, end - span_visible.shape[1] :] &= span_visible
            visible = np.tile(mask, (group, 1))  # [g*T, S]
            scores = np.where(visible, scores, np.float32(-np.inf))
        scores -= np.max(scores, axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= np.sum(scores, axis=-1, keepdims=True)
        out = scores @ cache.v[layer, :, :end]  # [n_kv, g*T, d]
        return np.asarray(
            out.reshape(n_kv, group, n_tokens, d).transpose(2, 0, 1, 3).reshape(n_tokens, -1),
            dtype=np.float32,
        )

    def _attend_invariant(
        self,
        q: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        end: int,
        span_visible: Mask | None = None,
    ) -> F32:
        """:meth:`_attend`, one query row at a time over that row's own slots ``[0, its slot]``:
        exactly the call a 1-row pass at that position makes, so every row of a k-row verify pass
        gets bit for bit what a 1-row pass gives it (BLAS blocking depends on the row count and
        the slot count; here both are the 1-row pass's). T small calls instead of one. A token
        tree (``span_visible``) goes row by row along each row's own path: :meth:`_attend_tree_invariant`."""
        n_tokens = q.shape[0]
        first_slot = end - n_tokens
        if span_visible is not None:
            return self._attend_tree_invariant(q, layer, cache, positions, first_slot, span_visible)
        if n_tokens == 1:
            return self._attend_row(q, layer, cache, int(positions[0]), end)
        tile = self.store.tile_attention
        if tile is not None:  # the tile layer law's attention: one call, every row on its own
            ends = np.arange(first_slot + 1, end + 1, dtype=np.int32)
            return tile.rows(q, cache.k[layer], cache.v[layer], cache.positions, positions, ends, self._windows[layer])
        rows = [
            self._attend_row(q[t : t + 1], layer, cache, int(positions[t]), first_slot + t + 1) for t in range(n_tokens)
        ]
        return np.concatenate(rows)

    def _attend_row(self, q: F32, layer: int, cache: KVCache, position: int, end: int) -> F32:
        """:meth:`_attend_block` for one query row ``q [1, n_head, d]`` at ``position`` over slots
        ``[0, end)`` -> ``[1, n_head d]``: the same NumPy operations on the same shapes (so the same
        bits), without the block loop, the ``[T, ...]`` reshapes (identities at T = 1) and the
        mask where it hides nothing: it is built only when a key is newer than the query or
        outside a sliding window; otherwise ``where(visible, scores, -inf)`` would return
        ``scores`` unchanged. The batch-invariant attention's one call per row. With tile layers, the
        tile layer law's attention (engine.tile_layers.TileAttention) instead."""
        cfg = self.config
        tile = self.store.tile_attention
        if tile is not None:
            pos, ends = np.array([position], dtype=np.int64), np.array([end], dtype=np.int32)
            q3 = q.reshape(1, cfg.n_head, cfg.head_dim)
            return tile.rows(q3, cache.k[layer], cache.v[layer], cache.positions, pos, ends, self._windows[layer])
        qg = q.reshape(cfg.n_head_kv, cfg.n_group, cfg.head_dim)  # [n_kv, g, d]
        scores = qg @ cache.k[layer, :, :end].transpose(0, 2, 1)  # [n_kv, g, S]
        scores *= self._attn_scale
        window = self._windows[layer]
        key_positions = cache.positions[:end]
        if position < key_positions.max() or (window > 0 and position - key_positions.min() >= window):
            mask = layers.attention_mask(np.array([position], dtype=np.int64), key_positions, window)  # [1, S]
            scores = np.where(mask, scores, np.float32(-np.inf))
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        out = np.asarray(scores @ cache.v[layer, :, :end], dtype=np.float32)  # [n_kv, g, d] (no copy)
        return out.reshape(1, -1)  # [1, n_head d]

    def _attend_tree_invariant(
        self,
        q: F32,
        layer: int,
        cache: KVCache,
        positions: npt.NDArray[np.int64],
        first_slot: int,
        span_visible: Mask,  # [T, T]: row i sees row j iff j is i or one of its ancestors
    ) -> F32:
        """A token-tree span in the batch-invariant mode: each row attends exactly as the 1-row
        pass at its depth along its own root-to-row path would.

        That pass has the prefix in slots ``[0, first_slot)`` and the path's K, V (and positions) in
        the next ``depth + 1`` slots, in path order. So, row by row, the row's path -- its ancestors
        then itself; parents precede children (``tree_attention.check_parents``), so ascending span
        index is path order -- is copied into those slots and the row runs the 1-row call over
        ``[0, first_slot + depth]``: the same call on the same layout, hence the same bits (nothing
        is left to a kernel's layout-dependent blocking). The span's own slots are put back after
        (the tree's K, V stay where :meth:`KVCache.keep` expects them). O(depth) slot copies a row,
        not O(prefix). With tile layers, one call of the tile attention over the tree's flags instead
        (each row's keys are that layout's, in the same order: the same bits, no copies)."""
        n_tokens = q.shape[0]
        tile = self.store.tile_attention
        if tile is not None:
            ends = np.full(n_tokens, first_slot + n_tokens, dtype=np.int32)
            return tile.rows(q, cache.k[layer], cache.v[layer], cache.positions, positions, ends, self._windows[layer],
                             first_slot, span_visible)  # fmt: skip
        span = slice(first_slot, first_slot + n_tokens)
        saved_k = cache.k[layer, :, span].copy()  # [n_kv, T, d]
        saved_v = cache.v[layer, :, span].copy()  # [n_kv, T, d]
        saved_pos = cache.positions[span].copy()  # [T]
        rows: list[F32] = []
        try:
            for t in range(n_tokens):
                path = np.flatnonzero(span_visible[t])  # [depth + 1] span rows, root first, t last
                slots = slice(first_slot, first_slot + path.shape[0])
                cache.k[layer, :, slots] = saved_k[:, path]
                cache.v[layer, :, slots] = saved_v[:, path]
                cache.positions[slots] = saved_pos[path]
                rows.append(self._attend_row(q[t : t + 1], layer, cache, int(positions[t]), slots.stop))
        finally:
            cache.k[layer, :, span] = saved_k
            cache.v[layer, :, span] = saved_v
            cache.positions[span] = saved_pos
        return rows[0] if n_tokens == 1 else np.concatenate(rows)

    def _rope_tables(self, positions: npt.NDArray[np.int64], base: float, freq_scale: float) -> tuple[F32, F32]:
        """``cos, sin`` ``[T, 1, d]`` per dimension (1, 0 past rope_dim), as reference.layers.rope."""
        cfg = self.config
        half = cfg.rope_dim // 2
        inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / cfg.rope_dim)  # [half]
        factors = self.store.rope_freqs
        if factors is not None:
            inv_freq = inv_freq / factors.astype(np.float64)
        theta = (positions.astype(np.float64) * freq_scale)[:, None] * inv_freq[None, :]  # [T, half]
        cos_half = np.cos(theta).astype(np.float32)
        sin_half = np.sin(theta).astype(np.float32)
        n_tokens = positions.shape[0]
        cos = np.ones((n_tokens, 1, cfg.head_dim), dtype=np.float32)
        sin = np.zeros((n_tokens, 1, cfg.head_dim), dtype=np.float32)
        if cfg.rope_type == ROPE_NORM:  # pair (2i, 2i+1) turns by theta_i
            cos[:, 0, 0 : cfg.rope_dim : 2] = cos_half
            cos[:, 0, 1 : cfg.rope_dim : 2] = cos_half
            sin[:, 0, 0 : cfg.rope_dim : 2] = sin_half
            sin[:, 0, 1 : cfg.rope_dim : 2] = sin_half
        else:  # NEOX: pair (i, i + half)
            cos[:, 0, :half] = cos_half
            cos[:, 0, half : cfg.rope_dim] = cos_half
            sin[:, 0, :half] = sin_half
            sin[:, 0, half : cfg.rope_dim] = sin_half
        return cos, sin

    def _rotate(self, x: F32, rope: tuple[F32, F32]) -> F32:
        """RoPE on ``[T, H, d]``: ``x * cos + (sign * x[rot_index]) * sin`` (see module docstring)."""
        cos, sin = rope
        rotated = x[..., self._rot_index]
        rotated *= self._rot_sign
        rotated *= sin
        out = x * cos
        out += rotated
        return out

    def _raise_non_finite(self, ids: npt.NDArray[np.int64], pos: npt.NDArray[np.int64]) -> None:
        """Find the first layer with non-finite activations (slow path, errors only) and raise."""
        scratch = self.new_cache(self.config.context_length)
        x = self.embed(ids)
        if not np.isfinite(x).all():
            raise ModelError("non-finite values (NaN or inf) in the activations after the token embeddings")
        for layer in range(self.config.n_layer):
            x = self.forward_layers(x, scratch, layer, layer, pos.tolist(), start=0)
            if not np.isfinite(x).all():
                raise ModelError(f"non-finite values (NaN or inf) in the activations after layer {layer}")
        raise ModelError("non-finite values (NaN or inf) in the activations after the output head")
