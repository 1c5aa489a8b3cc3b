"""The int8 mode's decoder layers as onnxruntime graphs: one graph between two attentions.

The unfused int8 layer (:meth:`engine.model.FastModel._layer`) makes four onnxruntime calls (one
per matrix, ~10 us each from Python) and ~25 NumPy calls for the norms, RoPE, residuals and the
activation. Here everything of a layer except the KV store and the attention runs inside graphs:
a layer has two halves, one before its attention and one after,

- ``pre``:  ``x [T, E], cos [T, 1, d], sin [T, 1, d] -> qk [T, n_head + n_kv, d], v [T, n_kv d]``
  RMSNorm -> QKV (``MatMulNBits``, with the min term) (+ bias) -> per-head q/k norm (gemma3) -> RoPE;
  the caller takes q and k as views of ``qk`` (query heads first) and shapes ``v``: a Split and a
  Reshape node fewer a call (each costs a kernel dispatch, a view costs nothing)
- ``post``: ``attn [T, n_head d], x [T, E] -> x' [T, E]``
  o (+ bias) (-> post-attention norm) -> ``+ x`` -> RMSNorm -> gate/up -> act(gate) * up -> down
  (-> post-FFN norm) -> ``+`` the residual

and the model runs them as a :class:`LayerChain`: ``post`` of one layer and ``pre`` of the next
are ONE graph (a link), so a pass over L layers makes L + 1 calls (``pre`` of the first layer,
L - 1 links, ``post`` of the last), not 2 L; :class:`LayerGraphs` / :func:`build_layer` is the
two-graph layout of one layer. Fusing the halves changes no bit (the link's nodes are the two
halves' nodes, tested against the two-graph layout on both real models).

The attention stays in Python (:meth:`engine.model.FastModel._attend_invariant`): it is what makes
a k-row verify pass give each row bit for bit what a 1-row pass gives. The graphs keep that law:
every op is per row (the norms reduce over one row's last axis, ``MatMulNBits`` rounds each row's
blocks to int8 on their own, the rest is elementwise), so a k-row call gives each row what a
1-row call gives; tests/test_engine_fused.py checks it bit for bit on both real models, 1 and 2
threads.

It is the int8 mode's function up to float32 rounding of the non-matmul ops (onnxruntime's
RMSNorm accumulates in its own order, its sigmoid / tanh are MLAS's), not bit-identical to the
unfused path: the same weights, the same int8 kernel, the same min term. ``sin`` is the signed
table (``sign * sin``, see :func:`engine.rope.rotation`): RoPE is ``x * cos + (x @ P) * sin``
with P the permutation of :func:`rotation_matrix`.

``VERISPEC_INT8_FUSED`` (``1`` / ``0``) or ``FastModel.load(..., fused=...)`` chooses the path;
``verispec bench`` measures both in one run. ``FastModel.load(..., pass_boundaries=...)`` cuts the
chain where passes start and stop (the early-exit and layer-skip loaders pass their depths), and
``VERISPEC_INT8_SPLIT_AFTER`` cuts it for experiments (:func:`chain_splits`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np
import numpy.typing as npt

from verispec.engine.blocks import KernelBlocks
from verispec.engine.matmul import OrtGraph, block_sum_columns, blocks_nodes, env_switch, f32_nodes
from verispec.engine.rope import rotation
from verispec.reference.config import ACT_GELU_TANH, ACT_SILU, Config
from verispec.reference.errors import ModelError

F32 = npt.NDArray[np.float32]

# A projection's weights: the file's blocks (int8 compute), or float32 [n_out, n_in] where the
# GGUF type has no block form (kept exact, never requantized; engine/weights.py lists it).
Projection = Union[KernelBlocks, F32]

FUSED_BY_DEFAULT = True  # measured: docs/performance.md, fused vs unfused int8
ENV = "VERISPEC_INT8_FUSED"


SPLIT_ENV = "VERISPEC_INT8_SPLIT_AFTER"


def chain_splits(n_layer: int, pass_boundaries: Iterable[int] = ()) -> tuple[int, ...]:
    """Layers to cut the :class:`LayerChain` after: one before each of ``pass_boundaries`` (depths
    ``1..n_layer - 1`` where the loader knows passes start and stop: early exit's candidate
    depths, a layer-skip draft's exit layer; a pass that stops at depth k ends after layer k - 1),
    and those of ``VERISPEC_INT8_SPLIT_AFTER`` (for experiments): ``none`` (the default: one graph
    between two attentions), ``all`` (two graphs a layer, the layout before the chain: what the
    chain's bits are tested against) or comma-separated layers. The union, sorted. ModelError for
    another value, a layer outside ``0..n_layer - 2`` or a boundary outside ``1..n_layer - 1``."""
    depths = sorted({int(depth) for depth in pass_boundaries})
    outside = [depth for depth in depths if not 0 < depth < n_layer]
    if outside:
        raise ModelError(f"pass boundaries {outside} are outside the depths 1..{n_layer - 1} of {n_layer} layers")
    return tuple(sorted({depth - 1 for depth in depths} | set(_env_splits(n_layer))))


def _env_splits(n_layer: int) -> tuple[int, ...]:
    """The layers ``VERISPEC_INT8_SPLIT_AFTER`` names (:func:`chain_splits`)."""
    text = os.environ.get(SPLIT_ENV, "none").strip()
    if text in ("", "none"):
        return ()
    if text == "all":
        return tuple(range(n_layer - 1))
    try:
        layers = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise ModelError(f"{SPLIT_ENV}={text!r} is not none, all or comma-separated layers") from None
    bad = [layer for layer in layers if not 0 <= layer < n_layer - 1]
    if bad:
        raise ModelError(f"{SPLIT_ENV}={text!r}: layers {bad} are outside 0..{n_layer - 2}")
    return layers


def fused_default() -> bool:
    """Whether the int8 mode runs fused: ``VERISPEC_INT8_FUSED`` (1 / 0), else :data:`FUSED_BY_DEFAULT`."""
    return env_switch(ENV, FUSED_BY_DEFAULT)


@dataclass(frozen=True)
class LayerMatrices:
    """The four (fused) matrices of a layer, GGUF layout ``[out, in]``."""

    qkv: Projection  # [n_head d + 2 n_kv d, E]  rows: q, then k, then v
    o: Projection  # [E, n_head d]
    gu: Projection  # [2 n_ff, E]  rows: gate, then up
    down: Projection  # [E, n_ff]


@dataclass(frozen=True)
class LayerGraphs:
    """One decoder layer as two graphs (see the module docstring)."""

    pre: OrtGraph  # x, cos, sin -> qk, v
    post: OrtGraph  # attn, x -> x'


def _shape(p: Projection) -> tuple[int, int]:
    if isinstance(p, KernelBlocks):
        return p.shape
    return (int(p.shape[0]), int(p.shape[1]))


class FusedGraph:
    """Nodes and initializers of one graph, with fresh names for intermediates."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: dict[str, npt.NDArray[Any]] = {}
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, stem: str, value: npt.NDArray[Any]) -> str:
        name = self.name(stem)
        self.inits[name] = value
        return name

    def op(
        self,
        op_type: str,
        inputs: list[str],
        n_out: int = 1,
        out: list[str] | None = None,
        domain: str = "",
        **attrs: Any,
    ) -> list[str]:
        from onnx import helper

        outs = out if out is not None else [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, domain=domain, **attrs))
        return outs

    def project(self, p: Projection, x: str) -> str:
        """``x @ W.T`` -> its output name (the min term inside, as engine.matmul.ort_blocks)."""
        out = self.name("proj")
        prefix = self.name("w") + "_"
        nodes, inits = blocks_nodes(p, x, out, prefix) if isinstance(p, KernelBlocks) else f32_nodes(p, x, out, prefix)
        self.nodes += nodes
        self.inits.update(inits)
        return out

    def project_split(self, p: Projection, x: str, sizes: list[int]) -> list[str]:
        """``x @ W.T`` split into column groups of ``sizes``: the kernel's block-sum columns (min
        term) ride along and are dropped by the same split (engine.matmul.blocks_nodes ``wide``)."""
        if not isinstance(p, KernelBlocks):
            return self.split(self.project(p, x), sizes, axis=1)
        out, prefix = self.name("proj"), self.name("w") + "_"
        nodes, inits = blocks_nodes(p, x, out, prefix, wide=True)
        self.nodes += nodes
        self.inits.update(inits)
        extra = block_sum_columns(p)
        parts = self.split(out, sizes + [extra] if extra else sizes, axis=1)
        return parts[: len(sizes)]

    def rms_norm(self, x: str, weight: F32, eps: float, out: str | None = None) -> str:
        """RMSNorm over the last axis (onnxruntime's SimplifiedLayerNormalization: per row)."""
        w = self.const("norm", np.ascontiguousarray(weight, dtype=np.float32))
        return self.op(
            "SimplifiedLayerNormalization", [x, w], out=[out] if out else None, axis=-1, epsilon=float(np.float32(eps))
        )[0]

    def bias(self, x: str, b: F32 | None) -> str:
        if b is None:
            return x
        return self.op("Add", [x, self.const("bias", np.ascontiguousarray(b, dtype=np.float32))])[0]

    def split(self, x: str, sizes: list[int], axis: int) -> list[str]:
        return self.op("Split", [x, self.const("sizes", np.array(sizes, dtype=np.int64))], n_out=len(sizes), axis=axis)

    def reshape(self, x: str, shape: list[int], out: str | None = None) -> str:
        return self.op(
            "Reshape", [x, self.const("shape", np.array(shape, dtype=np.int64))], out=[out] if out else None
        )[0]


def check_matrices(cfg: Config, mats: LayerMatrices) -> None:
    """ModelError when a matrix does not have the shape the config gives it."""
    e, d, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff
    q, kv = cfg.n_head * d, cfg.n_head_kv * d
    want = {"qkv": (q + 2 * kv, e), "o": (e, q), "gu": (2 * ff, e), "down": (e, ff)}
    for key, shape in want.items():
        found = _shape(getattr(mats, key))
        if found != shape:
            raise ModelError(f"fused layer: matrix {key} has shape {list(found)}, expected {list(shape)}")
    if cfg.ffn_activation not in (ACT_SILU, ACT_GELU_TANH):
        raise ModelError(f"unknown FFN activation {cfg.ffn_activation!r}")


def layer_vector(vectors: dict[str, F32 | None], key: str, size: int, required: bool) -> F32 | None:
    value = vectors.get(key)
    if value is None:
        if required:
            raise ModelError(f"fused layer: vector {key} is missing")
        return None
    out = np.asarray(value, dtype=np.float32)
    if out.shape != (size,):
        raise ModelError(f"fused layer: vector {key} has shape {list(out.shape)}, expected [{size}]")
    return out


def rotation_matrix(cfg: Config) -> F32:
    """``P [d, d]`` with ``(x @ P)[j] = x[index[j]]``: RoPE's partner of each dim
    (:func:`engine.rope.rotation`) as a matmul. Exact for finite x: each output sums one term
    ``1 * x[index[j]]`` and zeros (x * 0 = +-0, adding +-0 changes nothing but a zero's sign), so
    the blocking of the kernel cannot matter (measured: onnxruntime's Gather on the last axis
    costs 3x this matmul at 1 row, 10x at 5 rows)."""
    index, _ = rotation(cfg.head_dim, cfg.rope_dim, cfg.rope_type)
    p = np.zeros((cfg.head_dim, cfg.head_dim), dtype=np.float32)
    p[index, np.arange(cfg.head_dim)] = 1.0
    return p


def add_pre(
    g: FusedGraph, cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None], names: dict[str, str]
) -> None:
    """The ``pre`` half of a layer into ``g``: ``names`` maps x, cos, sin, qk, v to the graph's names."""
    d, n_head, n_kv = cfg.head_dim, cfg.n_head, cfg.n_head_kv
    q, kv = n_head * d, n_kv * d
    h = g.rms_norm(names["x"], required_vector(vectors, "attn_norm", cfg.n_embd), cfg.norm_eps)
    qk_flat, v_flat = g.project_split(mats.qkv, h, [q + kv, kv])
    bq, bk, bv = (layer_vector(vectors, key, n, False) for key, n in (("bq", q), ("bk", kv), ("bv", kv)))
    if bq is not None or bk is not None:
        qk_flat = g.bias(
            qk_flat,
            np.concatenate(
                [np.zeros(q, np.float32) if bq is None else bq, np.zeros(kv, np.float32) if bk is None else bk]
            ),
        )
    v_flat = g.bias(v_flat, bv)
    qk = g.reshape(qk_flat, [-1, n_head + n_kv, d])  # [T, H, d]: query heads, then key heads
    g.op("Identity", [v_flat], out=[names["v"]])  # [T, n_kv d]
    q_norm, k_norm = layer_vector(vectors, "q_norm", d, cfg.qk_norm), layer_vector(vectors, "k_norm", d, cfg.qk_norm)
    if q_norm is not None and k_norm is not None:  # per head: one norm, then each head's weights
        unit = g.rms_norm(qk, np.ones(d, np.float32), cfg.norm_eps)
        weights = np.concatenate([np.tile(q_norm, (n_head, 1)), np.tile(k_norm, (n_kv, 1))])  # [H, d]
        qk = g.op("Mul", [unit, g.const("qk_norm", weights)])[0]
    rotated = g.op("MatMul", [qk, g.const("rot", rotation_matrix(cfg))])[0]  # [T, H, d]: x[..., index]
    cos, sin = g.op("Mul", [qk, names["cos"]])[0], g.op("Mul", [rotated, names["sin"]])[0]
    g.op("Add", [cos, sin], out=[names["qk"]])  # [T, H, d]


def add_post(
    g: FusedGraph, cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None], names: dict[str, str]
) -> None:
    """The ``post`` half of a layer into ``g``: ``names`` maps attn, x, y to the graph's names."""
    e, ff = cfg.n_embd, cfg.n_ff
    a = g.bias(g.project(mats.o, names["attn"]), layer_vector(vectors, "bo", e, False))
    post_attn = layer_vector(vectors, "post_attn_norm", e, cfg.post_norms)
    if post_attn is not None:
        a = g.rms_norm(a, post_attn, cfg.norm_eps)
    ffn_norm = g.const("norm", required_vector(vectors, "ffn_norm", e))
    # h = RMSNorm(x + a), and the sum x + a itself (output 3): the residual
    h, _, _, x1 = g.op(
        "SkipSimplifiedLayerNormalization",
        [a, names["x"], ffn_norm],
        out=[g.name("h"), "", "", g.name("x1")],
        domain="com.microsoft",
        epsilon=float(np.float32(cfg.norm_eps)),
    )
    gate, up = g.project_split(mats.gu, h, [ff, ff])
    if cfg.ffn_activation == ACT_SILU:
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])[0]])[0]
    else:
        act = g.op("Gelu", [gate], approximate="tanh")[0]
    f = g.project(mats.down, g.op("Mul", [act, up])[0])
    post_ffn = layer_vector(vectors, "post_ffn_norm", e, cfg.post_norms)
    if post_ffn is not None:
        f = g.rms_norm(f, post_ffn, cfg.norm_eps)
    g.op("Add", [x1, f], out=[names["y"]])


PRE_NAMES = {"x": "x", "cos": "cos", "sin": "sin", "qk": "qk", "v": "v"}
POST_NAMES = {"attn": "attn", "x": "x", "y": "y"}


def _pre_io(cfg: Config, n: dict[str, str]) -> tuple[dict[str, list[int | str]], dict[str, list[int | str]]]:
    d = cfg.head_dim
    inputs: dict[str, list[int | str]] = {n["x"]: ["T", cfg.n_embd], n["cos"]: ["T", 1, d], n["sin"]: ["T", 1, d]}
    outputs: dict[str, list[int | str]] = {
        n["qk"]: ["T", cfg.n_head + cfg.n_head_kv, d],
        n["v"]: ["T", cfg.n_head_kv * d],
    }
    return inputs, outputs


def build_pre(cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None], threads: int) -> OrtGraph:
    """``x, cos, sin -> qk, v`` of one layer (module docstring)."""
    g = FusedGraph()
    add_pre(g, cfg, mats, vectors, PRE_NAMES)
    return OrtGraph(g.nodes, g.inits, *_pre_io(cfg, PRE_NAMES), threads)


def build_post(cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None], threads: int) -> OrtGraph:
    """``attn, x -> x'`` of one layer (module docstring)."""
    g = FusedGraph()
    add_post(g, cfg, mats, vectors, POST_NAMES)
    e = cfg.n_embd
    return OrtGraph(
        g.nodes, g.inits, {"attn": ["T", cfg.n_head * cfg.head_dim], "x": ["T", e]}, {"y": ["T", e]}, threads
    )


def required_vector(vectors: dict[str, F32 | None], key: str, size: int) -> F32:
    value = layer_vector(vectors, key, size, True)
    assert value is not None
    return value


def build_layer(cfg: Config, mats: LayerMatrices, vectors: dict[str, F32 | None], threads: int) -> LayerGraphs:
    """Both graphs of one layer; ModelError for a matrix or vector of the wrong shape."""
    check_matrices(cfg, mats)
    return LayerGraphs(pre=build_pre(cfg, mats, vectors, threads), post=build_post(cfg, mats, vectors, threads))


# -- the chain: one graph between two attentions ---------------------------------------------------

LayerSource = Callable[[int], tuple[LayerMatrices, dict[str, F32 | None]]]  # layer -> its matrices, vectors


class ChainGraph(Protocol):
    """What the chain runs: an onnxruntime graph (:class:`engine.matmul.OrtGraph`), or a layer
    half on the tile kernel (:class:`engine.tile_layers.TileGraph`): named inputs, row axis first;
    ``run`` returns new arrays, ``run_bound`` buffers the graph owns and reuses."""

    @property
    def input_names(self) -> tuple[str, ...]: ...

    def run(self, *arrays: npt.NDArray[Any]) -> list[F32]: ...

    def run_bound(self, *arrays: npt.NDArray[Any]) -> list[F32]: ...


@dataclass(frozen=True)
class LayerChain:
    """A model's layers as a chain of graphs, ONE onnxruntime call between two attentions.

    Layer l's ``pre`` half runs before its attention and its ``post`` half after; nothing but the
    attention separates them from their neighbours' halves, so ``post(l)`` and ``pre(l + 1)`` are
    one graph, a *link*: ``attn, x, cos, sin, enter -> y, qk, v`` (o-projection, residual, norm,
    FFN, residual; then the next layer's norm, QKV, q/k norms, RoPE at ``cos, sin``). A full pass
    is ``entry[0]``, ``link[0..L-2]``, ``exit[L-1]``: L + 1 calls instead of 2 L. Every weight is in
    exactly one graph (no memory for the fusion). The link's nodes are the two halves' nodes, in
    the same order, with the same inputs: tests/test_engine_fused.py checks that the bits are the
    two-graph layout's, row by row, on both real models.

    A pass over layers ``first..last`` (``forward_layers``: early exit and its catch-up, layer
    skipping) starts and stops where the chain may not be cut:

    - ``split_after`` (built in): after those layers the chain is cut, ``exit[l]`` and
      ``entry[l + 1]`` instead of ``link[l]`` (2 calls there; a pass may start or stop on them free);
    - a stop at a layer the chain is not cut after runs ``link[last]`` and drops ``qk, v``: the
      next layer's ``pre`` half is computed and discarded (its QKV projection);
    - a start at a layer the chain is not cut before runs ``link[first - 1]`` with ``enter`` set:
      ``y = Where(enter, x, post(attn, x))``, so the ``pre`` half reads the given hidden state
      bit for bit (a selection, no arithmetic); the ``post`` half before it is computed and
      discarded. ``enter`` is a per-row bool ``[T, 1]`` (every input keeps the row axis first,
      so the row-mode probe and padding of :class:`engine.matmul.OrtGraph` apply unchanged).
    """

    n_layer: int
    entry: Mapping[int, ChainGraph]  # layer -> pre(layer) alone: x, cos, sin -> qk, v
    exit: Mapping[int, ChainGraph]  # layer -> post(layer) alone: attn, x -> y
    link: Mapping[int, ChainGraph]  # layer -> post(layer) + pre(layer + 1): attn, x, cos, sin, enter -> y, qk, v

    def graphs(self) -> list[ChainGraph]:
        """Every graph of the chain, in layer order."""
        keyed = [(layer, 0, g) for layer, g in self.entry.items()]
        keyed += [(layer, 1, g) for layer, g in [*self.exit.items(), *self.link.items()]]
        return [g for _, _, g in sorted(keyed, key=lambda item: item[:2])]

    def calls(self, first: int, last: int) -> int:
        """onnxruntime calls of a pass over layers ``first..last`` (0 for the empty range)."""
        if last < first:
            return 0
        return 1 + sum(1 if layer in self.link or layer == last else 2 for layer in range(first, last + 1))


def link_names() -> tuple[dict[str, str], dict[str, str]]:
    """The names a link's ``post`` and ``pre`` halves read and write (``y_post``: before ``Where``)."""
    post = {"attn": "attn", "x": "x", "y": "y_post"}
    pre = {"x": "y", "cos": "cos", "sin": "sin", "qk": "qk", "v": "v"}
    return post, pre


def build_link(
    cfg: Config,
    here: tuple[LayerMatrices, dict[str, F32 | None]],
    after: tuple[LayerMatrices, dict[str, F32 | None]],
    threads: int,
) -> OrtGraph:
    """``attn, x, cos, sin, enter -> y, qk, v``: ``post`` of the layer ``here``, ``pre`` of the
    layer ``after`` it (:class:`LayerChain`)."""
    check_matrices(cfg, here[0])
    check_matrices(cfg, after[0])
    post, pre = link_names()
    g = FusedGraph()
    add_post(g, cfg, here[0], here[1], post)
    g.op("Where", ["enter", "x", post["y"]], out=["y"])  # [T, E]: the given x where a pass enters here
    add_pre(g, cfg, after[0], after[1], pre)
    pre_in, pre_out = _pre_io(cfg, pre)
    inputs: dict[str, list[int | str]] = {
        "attn": ["T", cfg.n_head * cfg.head_dim],
        "x": ["T", cfg.n_embd],
        "cos": pre_in["cos"],
        "sin": pre_in["sin"],
        "enter": ["T", 1],
    }
    return OrtGraph(g.nodes, g.inits, inputs, {"y": ["T", cfg.n_embd], **pre_out}, threads, bool_inputs=("enter",))


def build_chain(
    cfg: Config,
    layer: LayerSource,
    threads: int,
    split_after: Iterable[int] = (),
    built: Callable[[], None] | None = None,
) -> LayerChain:
    """The :class:`LayerChain` of ``cfg.n_layer`` layers, ``layer(i)`` read once per layer, in
    order (at most two layers' matrices alive at a time); ``built()`` after each graph (the loader
    hands freed memory back there). ``split_after``: layers ``0 <= l < L - 1`` to cut the chain
    after (ModelError outside)."""
    n = cfg.n_layer
    cuts = frozenset(split_after)
    bad = sorted(layer for layer in cuts if not 0 <= layer < n - 1)
    if bad:
        raise ModelError(f"layer chain: cannot split after layer(s) {bad} (0..{n - 2} for {n} layers)")
    entry: dict[int, OrtGraph] = {}
    exit_: dict[int, OrtGraph] = {}
    link: dict[int, OrtGraph] = {}

    def done() -> None:
        if built is not None:
            built()

    here = layer(0)
    check_matrices(cfg, here[0])
    entry[0] = build_pre(cfg, here[0], here[1], threads)
    done()
    for il in range(n):
        after = layer(il + 1) if il + 1 < n else None
        if after is None or il in cuts:
            exit_[il] = build_post(cfg, here[0], here[1], threads)
            done()
            if after is not None:
                check_matrices(cfg, after[0])
                entry[il + 1] = build_pre(cfg, after[0], after[1], threads)
                done()
        else:
            link[il] = build_link(cfg, here, after, threads)
            done()
        if after is not None:
            here = after
    return LayerChain(n, entry, exit_, link)
