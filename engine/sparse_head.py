"""An exact sparse head: the full head's top-k, computing the kernel only on candidate rows.

The int8 head returns ``K = kernel(x)`` ``[V]`` (``MatMulNBits`` on the file's blocks, in row
chunks: :class:`engine.matmul.RowChunks`; or the ``tile`` head, engine/tile_head.py, whose parts
are views of one repacked head). A decision that needs only the k best rows (greedy:
k = 1; top-k sampling: k <= 64) can skip every row that provably cannot be among them:

1. a cheap score ``S_i`` and a certified radius ``B_i`` with ``|K_i - S_i| <= B_i`` for every row;
2. ``tau`` = the k-th largest lower bound ``S_j - B_j``; the candidates are the rows with
   ``S_i + B_i >= tau`` (:func:`candidates`);
3. the kernel on the chunks that hold a candidate (each chunk call is the full head's own call,
   so its rows carry the full head's bits), then the first k rows of the evaluated ones in the
   full path's order: logit descending, id ascending (:func:`first_k`,
   ``reference.sampling.first_k``'s order; k = 1 is ``np.argmax``'s first maximum).

Why the result is the full head's, ties included (proved: ``proofs.sparse_head``): the k rows
with the largest lower bounds each have ``K_j >= tau``; a pruned row has ``K_i <= S_i + B_i <
tau``, so k rows are STRICTLY above it and it is in no top-k under any tie rule
(``pruning_sound``). The evaluated rows are a superset of the true top-k, and the first k of a
superset under a total order are the first k of the whole (``superset_first_k``).

The radius is the sketch's own error plus the kernel's error against ``w . x``
(:func:`kernel_error_bound`, an error model of ``MatMulNBits`` with int8 activations stated
there, which the tile head's law, reference/q8_block_dot.py, meets too: the same activation
blocks, two roundings and an add a term; checked against both kernels by tests/test_sparse_head.py and by
``lab/sparse_head_bounds.py`` on every row of real hidden states).

Measured (``lab/measurements/sparse_head_bounds_*.json``, docs/int8-step.md): on SmolLM2's and
Gemma 3's Q8_0 heads no sketch cheaper than >= 6 bits a weight leaves few candidates (an int4
sketch leaves most rows), so nothing in decoding calls this yet: it would add a sketch to the
full head. :class:`Q8ExactSketch` (the tightest radius, as costly as the head) is what the tests
run it with. :func:`lazy_draw` is full-vocabulary sampling on the same footing: the protocol's
token from exact logits on some ids and intervals on the rest, or None when they cannot decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference import layers

if TYPE_CHECKING:
    from verispec.engine.matmul import Matmul
    from verispec.engine.weights import WeightStore
    from verispec.reference.config import Config
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.sampling import SamplingParams

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Ids = npt.NDArray[np.int64]

UNIT_ROUNDOFF_F32 = 2.0**-24
FLOAT32_TINY = 2.0**-126  # the smallest normal float32
BLOCK = 32  # MatMulNBits' block: the int8 activation is quantized per 32 inputs (the weights' block)
ACTIVATION_LEVELS = 127  # symmetric int8: scale = max|x_b| / 127
# |x~ - x| per element, in units of the block's scale: round to nearest (1/2), plus the float32
# rounding of the scale and of its reciprocal (a few units in the last place of a level <= 127)
ACTIVATION_STEP = 0.5 + 2.0**-16
# float32 roundings per block term of the kernel: int dot -> float, scale product, term product
ROUNDINGS_PER_TERM = 3
# the float64 evaluation of a bound is itself rounded: widen by this much (relative), far above
# the float64 error of a sum of <= 2^20 non-negative terms (2^20 * 2^-53 = 2^-33)
BOUND_SLACK = 2.0**-30


def gamma(n: int, u: float = UNIT_ROUNDOFF_F32) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of n roundings."""
    return n * u / (1.0 - n * u)


def kernel_error_bound(w: F64, x: F32 | F64) -> F64:
    """``[T, rows]`` bounds on ``|K_ti - w_i . x_t|``, ``K`` being ``MatMulNBits``' logits.

    Error model of ``MatMulNBits`` (``accuracy_level=4``, blocks of 32 along the input):

    - the activation is quantized per block b: ``x~_bj = s_b p_bj``, ``p_bj`` an integer,
      ``s_b = max|x_b| / 127``, and ``|x~_bj - x_bj| <= ACTIVATION_STEP * s_b`` (round to nearest);
    - the weights are the file's exactly (Q8_0: a float16 scale times an int8 level is exact in
      float32), so a block's integer dot ``q_ib . p_b`` is exact (|.| < 2^24);
    - the logit is the sum over blocks of ``d_ib s_b (q_ib . p_b)``, each term with at most
      ``ROUNDINGS_PER_TERM`` float32 roundings, summed in any order in float32.

    So ``|K_i - w_i . x| <= sum_b ||w_ib||_1 a_b + gamma(nb + 3) sum_b ||w_ib||_1 (max|x_b| + a_b)``
    with ``a_b = ACTIVATION_STEP s_b`` (the first sum: the activation's rounding, Hoelder per
    block; the second: float32 rounding of a sum of nb terms, each at most ``||w_ib||_1 max|x~_b|``),
    plus, for flush-to-zero kernels, ``||w_ib||_1 min(max|x_b|, 127 * 2^-126)`` a block (a block
    with a subnormal scale lost whole) and an absolute 2^-126 per rounding of a term (< 2^20).
    ``w`` ``[rows, K]``: the dequantized rows (exact); ``x`` ``[T, K]``: the head's input.
    """
    xs = np.asarray(x, dtype=np.float64)
    n_in = xs.shape[1]
    if n_in % BLOCK or w.shape[1] != n_in:
        raise ValueError(
            f"kernel_error_bound needs matching inputs that are a multiple of {BLOCK} ({w.shape}, {xs.shape})"
        )
    nb = n_in // BLOCK
    top = np.abs(xs.reshape(xs.shape[0], nb, BLOCK)).max(axis=2)  # [T, nb]
    step = ACTIVATION_STEP * top / ACTIVATION_LEVELS  # [T, nb]
    l1 = np.abs(w.reshape(w.shape[0], nb, BLOCK)).sum(axis=2)  # [rows, nb]
    rounding = step @ l1.T  # [T, rows]
    accumulation = gamma(nb + ROUNDINGS_PER_TERM) * ((top + step) @ l1.T)
    # below float32's normal range a kernel may flush to zero (FTZ / DAZ): a block whose scale
    # or inputs are subnormal may be lost whole, and every rounding may err by an absolute 2^-126
    lost = np.minimum(top, ACTIVATION_LEVELS * FLOAT32_TINY) @ l1.T
    absolute = (nb + 1) * ROUNDINGS_PER_TERM * FLOAT32_TINY * 2.0**20  # |integer dot| < 2^20
    out: F64 = (rounding + accumulation + lost + absolute) * (1.0 + BOUND_SLACK)
    return out


def candidates(scores: F64, radius: F64, k: int) -> npt.NDArray[np.bool_]:
    """Rows that may be among the k largest of any ``K`` with ``|K_i - scores_i| <= radius_i``.

    ``tau`` = the k-th largest lower bound; a row is a candidate iff its upper bound reaches
    ``tau``. The bounds are widened by :data:`BOUND_SLACK` so that their own float64 rounding
    cannot shrink them (``proofs.sparse_head.rounded_interval``). Non-finite scores or radii make
    every row a candidate (the caller then runs the full head, which raises on non-finite
    logits as it always does).
    """
    n = scores.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..{n}")
    if not (np.isfinite(scores).all() and np.isfinite(radius).all()):
        return np.ones(n, dtype=bool)
    widen = radius * (1.0 + BOUND_SLACK) + np.abs(scores) * BOUND_SLACK
    lower = scores - widen
    tau = np.partition(lower, n - k)[n - k]  # the k-th largest lower bound
    out: npt.NDArray[np.bool_] = scores + widen >= tau
    return out


def first_k(values: F32 | F64, ids: Ids, k: int) -> Ids:
    """The ids of the first k entries in the order (value descending, id ascending).

    ``reference.sampling``'s top-k order; k = 1 is ``np.argmax``'s first maximum."""
    order = np.lexsort((ids, -np.asarray(values, dtype=np.float64)))  # last key is the primary one
    picked: Ids = ids[order[:k]]
    return picked


class HeadedModel(Protocol):
    """What the head functions here read of a model (:class:`engine.model.FastModel` has it; named
    structurally so that this module does not import the model, which imports it)."""

    config: "Config"
    store: "WeightStore"
    sparse_head: "SparseHead | None"

    def head(self, hidden: F32) -> F32: ...

    def head_from_input(self, x: F32) -> F32: ...


# -- sketches and the chunked exact evaluation ------------------------------------------------------


class Sketch(Protocol):
    """Scores and certified radii ``[T, V]``: ``|K_ti - scores_ti| <= radius_ti`` for the kernel's K."""

    def bounds(self, x: F32) -> tuple[F64, F64]: ...


Q8_0_TYPE = 8  # ggml type id
Q8_0_BLOCK_BYTES = 34  # a float16 scale and 32 int8 levels


class Q8ExactSketch:
    """The head's own Q8_0 weights in float64, a chunk of rows at a time: ``S = w . x`` and the
    radius :func:`kernel_error_bound` plus the float64 dot's rounding (``gamma_K(2^-53) |w|.|x|``).
    It reads every weight, so it is no cheaper than the head: it is the reference sketch the
    selection is tested with on real heads (the tightest radius any sketch can have is the
    kernel's own error), not a speed-up."""

    def __init__(self, raw: npt.NDArray[np.uint8], n_rows: int, n_in: int, chunk_rows: int = 8192) -> None:
        if n_in % BLOCK or raw.size != n_rows * n_in // BLOCK * Q8_0_BLOCK_BYTES:
            raise ValueError(f"{raw.size} bytes are not a Q8_0 matrix of {n_rows} x {n_in}")
        self.raw = raw.reshape(n_rows, -1)
        self.n_rows, self.n_in, self.chunk_rows = n_rows, n_in, chunk_rows

    def rows(self, first: int, last: int) -> F64:
        nb = self.n_in // BLOCK
        blocks = self.raw[first:last].reshape(-1, Q8_0_BLOCK_BYTES)
        scale = blocks[:, :2].copy().view(np.float16).astype(np.float64).reshape(-1, nb)
        levels = blocks[:, 2:].view(np.int8).reshape(-1, nb, BLOCK)
        # the int8 levels cast to float64 inside the product (one pass; each product exact)
        out: F64 = np.multiply(levels, scale[:, :, None], dtype=np.float64).reshape(-1, self.n_in)
        return out

    def bounds(self, x: F32) -> tuple[F64, F64]:
        xs = np.asarray(x, dtype=np.float64)
        scores = np.empty((xs.shape[0], self.n_rows))
        radius = np.empty((xs.shape[0], self.n_rows))
        dot_rounding = gamma(self.n_in, 2.0**-53)
        for first in range(0, self.n_rows, self.chunk_rows):
            last = min(first + self.chunk_rows, self.n_rows)
            w = self.rows(first, last)
            scores[:, first:last] = xs @ w.T
            own = dot_rounding * (np.abs(xs) @ np.abs(w).T)
            radius[:, first:last] = kernel_error_bound(w, x) + own * (1.0 + BOUND_SLACK)
        return scores, radius


class Q8BlockSketch:
    """The head's own Q8_0 weights, scored in float32 with radii from per-block norms kept at
    construction: the head mode's sketch (:class:`SparseHead`). Scores ``S = fl32(w . x)`` (w is
    exact in float32: a float16 scale times an int8 level); the radius is
    :func:`kernel_error_bound` (from the same block norms) plus the float32 dot's own error,
    ``gamma_n(2^-24) sum_b ||w_b||_1 max|x_b|`` (any summation order, fused or not) and an absolute
    ``2^-126`` per term and per flushed input for a flush-to-zero BLAS. As tight as
    :class:`Q8ExactSketch` up to that float32 term (far below the activation's rounding) and
    several times cheaper -- but it still reads every weight: no cheaper than the head."""

    def __init__(self, raw: npt.NDArray[np.uint8], n_rows: int, n_in: int, chunk_rows: int = 8192) -> None:
        if n_in % BLOCK or raw.size != n_rows * n_in // BLOCK * Q8_0_BLOCK_BYTES:
            raise ValueError(f"{raw.size} bytes are not a Q8_0 matrix of {n_rows} x {n_in}")
        nb = n_in // BLOCK
        blocks = raw.reshape(n_rows, nb, Q8_0_BLOCK_BYTES)
        self.levels = blocks[:, :, 2:].view(np.int8)  # [rows, nb, 32] (a view of the copy held here)
        self.scales = blocks[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(n_rows, nb)  # exact
        l1 = np.empty((n_rows, nb))
        for first in range(0, n_rows, chunk_rows):
            part = np.abs(self.levels[first : first + chunk_rows].astype(np.float64)).sum(axis=2)
            l1[first : first + chunk_rows] = part * np.abs(self.scales[first : first + chunk_rows].astype(np.float64))
        self.l1 = l1  # [rows, nb]: ||w_ib||_1, exact sums of exact products (< 2^53)
        self.n_rows, self.n_in, self.chunk_rows = n_rows, n_in, chunk_rows

    def bounds(self, x: F32) -> tuple[F64, F64]:
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        rows, nb = x32.shape[0], self.n_in // BLOCK
        if x32.ndim != 2 or x32.shape[1] != self.n_in:
            raise ValueError(f"Q8BlockSketch takes [T, {self.n_in}] inputs, got {x32.shape}")
        scores = np.empty((rows, self.n_rows))
        for first in range(0, self.n_rows, self.chunk_rows):
            last = min(first + self.chunk_rows, self.n_rows)
            # one pass: the int8 levels cast to float32 inside the product (each product exact, as the
            # cast-then-multiply it replaces: the same w, half the memory traffic)
            w = np.multiply(self.levels[first:last], self.scales[first:last, :, None], dtype=np.float32)
            w = w.reshape(-1, self.n_in)
            scores[:, first:last] = x32 @ w.T
        top = np.abs(x32.astype(np.float64).reshape(rows, nb, BLOCK)).max(axis=2)  # [T, nb]
        step = ACTIVATION_STEP * top / ACTIVATION_LEVELS
        kernel = (
            step @ self.l1.T
            + gamma(nb + ROUNDINGS_PER_TERM) * ((top + step) @ self.l1.T)
            + np.minimum(top, ACTIVATION_LEVELS * FLOAT32_TINY) @ self.l1.T
            + (nb + 1) * ROUNDINGS_PER_TERM * FLOAT32_TINY * 2.0**20
        )
        own = gamma(self.n_in) * (top @ self.l1.T) + np.minimum(top, FLOAT32_TINY) @ self.l1.T
        own += 2 * (self.n_in + 1) * FLOAT32_TINY
        radius: F64 = (kernel + own) * (1.0 + BOUND_SLACK)
        return scores, radius


class ChunkEvaluator:
    """The full head's logits of the chunks (the head's own kernel sessions,
    :class:`engine.matmul.RowChunks` parts) that hold a masked row: each chunk called exactly as
    the full head calls it, on the same rows of input, so every row has the full head's bits."""

    def __init__(self, parts: list["Matmul"]) -> None:
        self.parts = parts
        self.starts = np.cumsum([0] + [p.n_out for p in parts])
        self.chunks_called = 0
        self.calls = 0

    def __call__(self, x: F32, mask: npt.NDArray[np.bool_]) -> tuple[Ids, F32]:
        """``mask`` ``[V]`` (the union over the rows of x) -> ids ``[m]`` ascending, logits ``[T, m]``."""
        ids: list[Ids] = []
        values: list[F32] = []
        self.calls += 1
        for part, first, last in zip(self.parts, self.starts[:-1], self.starts[1:]):
            if mask[first:last].any():
                ids.append(np.arange(first, last, dtype=np.int64))
                values.append(np.asarray(part(x), dtype=np.float32))
                self.chunks_called += 1
        return np.concatenate(ids), np.concatenate(values, axis=1)


@dataclass(frozen=True)
class SparseTopK:
    """The first k ids a row ``[T, k]`` and their logits (the full head's bits), and the work done."""

    ids: Ids
    logits: F32
    candidates: int  # rows some row of the pass could not rule out
    chunks_evaluated: int
    chunks_total: int


def sparse_top_k(x: F32, output: "Matmul", sketch: Sketch, k: int, *, max_fraction: float = 0.5) -> SparseTopK | None:
    """Row-wise first k ids of ``output(x)`` (order: logit descending, id ascending) and their
    logits, bit for bit the full head's, from the chunks that hold a candidate; None, having run
    no kernel, when ``output`` is not in row chunks, when anything is non-finite, or when the
    candidates of the rows together exceed ``max_fraction`` of the vocabulary (the caller runs the
    full head: the sketch plus nearly every chunk would cost more). ``x``: the head's input
    ``[T, n_in]`` (normed)."""
    from verispec.engine.matmul import RowChunks

    if not isinstance(output, RowChunks) or not np.isfinite(x).all():
        return None
    scores, radius = sketch.bounds(x)
    union = np.logical_or.reduce([candidates(scores[t], radius[t], k) for t in range(x.shape[0])])
    if union.mean() > max_fraction:
        return None
    evaluator = ChunkEvaluator(output.parts)
    ids, values = evaluator(x, union)
    if not np.isfinite(values).all():
        return None
    top = np.stack([first_k(values[t], ids, k) for t in range(x.shape[0])])
    logits = np.take_along_axis(values, np.searchsorted(ids, top), axis=1)
    return SparseTopK(top, logits, int(union.sum()), evaluator.chunks_called, len(output.parts))


def head_top_k(
    model: "HeadedModel", hidden: F32, k: int, sketch: Sketch, *, max_fraction: float = 0.5
) -> tuple[Ids, F32, bool]:
    """:func:`sparse_top_k` on ``model``'s head (final norm first), else the full head: the first
    k ids of ``model.head(hidden)`` per row and their logits, plus whether the sparse path ran.

    The full head runs (same answer) where :func:`sparse_top_k` declines and when the model has
    a final softcap: a monotone map in float32 can merge distinct logits into ties, and the
    pruning argument (``proofs.sparse_head``) is about the kernel's values."""
    if model.config.final_softcap is None and model.store.head_output is not None:
        x = layers.rms_norm(np.asarray(hidden, dtype=np.float32), model.store.output_norm, model.config.norm_eps)
        sparse = sparse_top_k(x, model.store.head_output, sketch, k, max_fraction=max_fraction)
        if sparse is not None:
            return sparse.ids, sparse.logits, True
    logits = model.head(hidden)
    all_ids = np.arange(logits.shape[1], dtype=np.int64)
    top = np.stack([first_k(logits[t], all_ids, k) for t in range(logits.shape[0])])
    return top, np.take_along_axis(logits, top, axis=1), False


# -- exact lazy sampling -------------------------------------------------------------------------

UNIT_ROUNDOFF_F64 = 2.0**-53
EXP_ULPS = 4  # numpy's float64 exp: within a few units in the last place (bounded by 4 here)
FLOAT64_TINY = 2.0**-1022  # the smallest normal float64


def lazy_draw(
    exact_ids: Ids,
    exact_logits: F32 | F64,
    lower: F64,
    upper: F64,
    temperature: float,
    u: float,
) -> int | None:
    """The token the protocol draws with uniform ``u`` from the full-vocabulary law at
    ``temperature`` -- ``reference.sampling.inverse_cdf(softmax_over(l, all, T), u)`` on the full
    head's logits ``l`` -- from the logits of ``exact_ids`` alone, or None when the draw lands
    where the bounds cannot decide (the caller then runs the full head; the token is the same for
    every ``u`` either way, so the law is the same).

    Every other id's logit is known only by ``lower_i <= l_i <= upper_i`` (float64 bounds on its
    float32 value; ``lower``/``upper`` are ``[V]``, read only outside ``exact_ids``).

    Proof. (1) The maximum m is exact: a logit of ``exact_ids`` no other upper bound exceeds
    (else None). (2) The reference computes ``a_i = fl(fl(l_i - m) / T)``; rounding is
    monotone, so ``a_i`` lies between the same two operations applied to ``lower_i`` and
    ``upper_i`` (computed here identically), and exactly at the value for an exact id. (3) Its
    ``exp`` is within ``EXP_ULPS`` relative units of ``e^a_i``; the normalizer, a float64 sum of V
    non-negative terms in any order, within ``gamma_V`` of the exact sum; each probability one
    more rounding; each running sum ``c_t`` (sequential, of non-negative terms) within
    ``gamma_V`` of the exact prefix sum; the threshold ``fl(u c_{V-1})`` one more rounding. The
    intervals below widen every one of these outward (and for their own float64 evaluation), so
    they contain the reference's values. (4) ``c`` never decreases, and the protocol picks the
    first t with ``c_t > threshold``. If ``c_lo[t] > threshold_hi`` and ``c_hi[t-1] <=
    threshold_lo`` then every s < t has ``c_s <= c_{t-1} <= threshold`` and ``c_t > threshold``:
    the protocol picks t. Otherwise None. A total that is not a normal float64 gives None (the
    protocol's subnormal fallback is not modelled). ``tests/test_sparse_head.py`` checks it
    exhaustively on small vocabularies against the reference draw.
    """
    if not (temperature > 0 and 0.0 <= u < 1.0):
        raise ValueError(f"lazy_draw needs temperature > 0 and 0 <= u < 1 (got {temperature}, {u})")
    n = lower.shape[0]
    known = np.zeros(n, dtype=bool)
    known[exact_ids] = True
    exact = np.asarray(exact_logits, dtype=np.float64)
    m = float(exact.max())
    if (~known).any() and float(upper[~known].max()) > m:
        return None
    lo = np.where(known, 0.0, lower)
    hi = np.where(known, 0.0, upper)
    lo[exact_ids] = exact
    hi[exact_ids] = exact
    # the reference's exp and ours each err by EXP_ULPS at a and at its bound; one more rounding for
    # the product; below the normal range exp may err absolutely (subnormal results): lower
    # bounds drop to 0 there and upper bounds gain the smallest normal number
    spread = (2 * EXP_ULPS + 3) * UNIT_ROUNDOFF_F64
    with np.errstate(over="ignore", under="ignore"):
        e_lo = np.exp((lo - m) / temperature) * (1.0 - spread)
        e_hi = np.exp((hi - m) / temperature) * (1.0 + spread) + FLOAT64_TINY
    e_lo[e_lo < FLOAT64_TINY] = 0.0
    widen = gamma(2 * n + 8, UNIT_ROUNDOFF_F64)  # the reference's sums and ours, with room
    z_lo = float(e_lo.sum()) * (1.0 - widen)
    z_hi = float(e_hi.sum()) * (1.0 + widen)
    if not (z_lo >= FLOAT64_TINY and np.isfinite(z_hi)):
        return None
    # a probability below the normal range errs absolutely (by < FLOAT64_TINY each)
    c_lo = np.cumsum(e_lo / z_hi) * (1.0 - widen) - n * FLOAT64_TINY
    c_hi = np.cumsum(e_hi / z_lo) * (1.0 + widen) + n * FLOAT64_TINY
    if not c_lo[-1] >= FLOAT64_TINY:
        return None
    t_lo = u * float(c_lo[-1]) * (1.0 - 4 * UNIT_ROUNDOFF_F64)
    t_hi = u * float(c_hi[-1]) * (1.0 + 4 * UNIT_ROUNDOFF_F64)
    t = int(np.searchsorted(c_lo, t_hi, side="right"))  # the first t with c_lo[t] > t_hi
    if t >= n or (t > 0 and c_hi[t - 1] > t_lo):
        return None
    return t


# -- the head mode of the int8 engine: decisions from the candidate chunks ---------------------------

HEAD_MODES: tuple[str, ...] = ("full", "sparse")
# Not the default: the sketch it runs (Q8BlockSketch) reads every head weight, and the sketches the
# kernel could run cheaper leave most of the vocabulary (int4: 186k of Gemma 3's 262k rows,
# lab/measurements/sparse_head_bounds_*.json). Measured: lab/measurements/sparse_head_decode_*.json.
HEAD_HELP = (
    "full (default): the head computes every logit; sparse: greedy, top-k <= 64 and full-vocabulary "
    "sampling decided from the head chunks holding candidates of a certified bound (the same tokens, bit "
    "for bit; the full head where it cannot prune; int8 engine only). Not the default because it is "
    "measured slower: its sketch reads every head weight, so plain greedy decoding ran at 0.30x (SmolLM2) "
    "and 0.13x (Gemma 3) the full head's tokens/s, 1 thread, load average ~15 on 2 cores "
    "(docs/results/engine-studies.md)"
)
# the value a pruned logit reads as: below every finite float32 logit, so every processed (biased,
# penalized: monotone) value of it is at most the same processing of the row's upper bound
PRUNED_LOGIT = float(np.finfo(np.float32).min)
FALLBACK_REASONS = ("law", "penalty", "few-alive", "fraction", "non-finite", "softcap", "undecided")


@dataclass(frozen=True)
class HeadOptions:
    """The int8 engine's head mode: ``mode`` ``full`` (every logit) or ``sparse`` (decisions from
    the chunks holding candidates, the full head where they exceed ``max_fraction`` of the rows)."""

    mode: str = "full"
    max_fraction: float = 0.5

    def __post_init__(self) -> None:
        from verispec.reference.errors import ModelError

        if self.mode not in HEAD_MODES:
            raise ModelError(f"head mode {self.mode!r} is not one of {', '.join(HEAD_MODES)}")
        if not 0.0 < self.max_fraction <= 1.0:
            raise ModelError(f"max_fraction must be in (0, 1], got {self.max_fraction!r}")


@dataclass
class HeadStats:
    """What the sparse head did since the last :meth:`reset`: head rows a decision asked for, how
    many it decided from candidate chunks (``sparse_rows``) or by a lazy draw (``lazy_draws``),
    and the rows the full head ran for, by reason (``fallbacks``)."""

    rows: int = 0
    sparse_rows: int = 0
    lazy_draws: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    chunks_evaluated: int = 0  # chunk calls of the sparse passes
    chunks_offered: int = 0  # chunks those passes had
    seconds: float = 0.0  # wall time in the head (sketch, chunks, and the full head's fallbacks)
    sketch_seconds: float = 0.0  # of which in the sketch's bounds

    def fell_back(self, reason: str, rows: int) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + rows

    @property
    def fallback_rows(self) -> int:
        return sum(self.fallbacks.values())

    def reset(self) -> None:
        self.rows = self.sparse_rows = self.lazy_draws = self.chunks_evaluated = self.chunks_offered = 0
        self.fallbacks, self.seconds, self.sketch_seconds = {}, 0.0, 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "sparse_rows": self.sparse_rows,
            "lazy_draws": self.lazy_draws,
            "fallback_rows": self.fallback_rows,
            "fallbacks": dict(self.fallbacks),
            "fallback_fraction": self.fallback_rows / self.rows if self.rows else 0.0,
            "chunks_evaluated": self.chunks_evaluated,
            "chunks_offered": self.chunks_offered,
            "seconds": self.seconds,
            "sketch_seconds": self.sketch_seconds,
        }


def local_k(params: "SamplingParams", n_vocab: int) -> int | None:
    """How many of a row's first ids (processed logit descending, id ascending) the law reads, or
    None when it reads every logit. Greedy: 2 (the argmax, and the runner-up that the early-exit
    margin reads); top-k with ``k <= SPARSE_TOP_K`` (engine.sampling): k -- every processor after
    top-k reads the survivors alone (engine.sampling._top_k_law)."""
    from verispec.engine.sampling import SPARSE_TOP_K

    if params.greedy:
        return 2
    if 0 < params.top_k <= SPARSE_TOP_K and params.top_k < n_vocab:
        return int(params.top_k)
    return None


def processed_bounds(scores: F64, radius: F64, history: Sequence[int], params: "SamplingParams") -> tuple[F64, F64]:
    """``[V]`` bounds on the law's working values (logit bias, then repeat penalty, in float64)
    from ``|K_i - scores_i| <= radius_i``: the row's interval widened for its own rounding (as
    :func:`candidates`), then the same processors applied to both ends. Each processor maps a
    value through a monotone non-decreasing float64 operation (``fl(l + b)``; ``fl(l / r)`` for
    ``l > 0`` and ``fl(l r)`` otherwise, ``r > 0``), so the processed ends bound the processed
    logit. A -inf bias gives -inf at both ends (the id is banned in both heads)."""
    from verispec.engine.sampling import apply_repeat_penalty
    from verispec.reference.sampling import apply_logit_bias

    widen = radius * (1.0 + BOUND_SLACK) + np.abs(scores) * BOUND_SLACK
    lower, upper = scores - widen, scores + widen
    for end in (lower, upper):
        apply_logit_bias(end, params.logit_bias)
        apply_repeat_penalty(end, history, params.repeat_penalty, params.repeat_last_n)
    return lower, upper


def candidates_between(lower: F64, upper: F64, k: int) -> npt.NDArray[np.bool_] | None:
    """Rows whose value may be among the first k of any row with ``lower <= value <= upper``:
    the live rows (finite upper end) reaching ``tau``, the k-th largest lower end. None when at
    most k rows are live (the law's top-k then keeps every live row: the full head runs)."""
    alive = np.isfinite(upper)
    n_alive = int(alive.sum())
    if n_alive <= k:
        return None
    keys = np.where(alive, lower, -np.inf)
    tau = np.partition(keys, keys.shape[0] - k)[keys.shape[0] - k]
    out: npt.NDArray[np.bool_] = alive & (upper >= tau)
    return out


class SparseHead:
    """The int8 engine's sparse head: ``output``'s row chunks, a certified ``sketch`` of them, the
    options and the running :class:`HeadStats` (shared by every view of the model).

    :meth:`decision_rows` gives rows that a top-k-local law (:func:`local_k`) maps to the same
    probabilities, bit for bit, as the full head's rows: the full head's logits on every chunk
    holding a candidate, :data:`PRUNED_LOGIT` elsewhere. Why the law cannot tell them apart: the
    k live rows with the largest processed lower ends each have a processed value ``>= tau``; a
    pruned row's processed value -- of its logit in the full head, of PRUNED_LOGIT here (below
    its logit, the processing monotone) -- is ``<= upper < tau``. So in both rows the same k ids
    come first in the law's order (processed value descending, id ascending), with the same
    values; the argmax, the runner-up's value, top-k's survivors and every later processor read
    only those (engine.sampling._top_k_law) and the set of live ids, which the bias alone decides.
    :meth:`choose` is plain decoding's step, full-vocabulary sampling included (:func:`lazy_draw`).
    """

    def __init__(self, output: "Matmul", sketch: Sketch, n_vocab: int, options: HeadOptions) -> None:
        self.output, self.sketch, self.n_vocab, self.options = output, sketch, n_vocab, options
        self.stats = HeadStats()

    @classmethod
    def from_gguf(cls, f: "GGUFFile", config: "Config", store: "WeightStore", options: HeadOptions) -> "SparseHead":
        """The sparse head of an int8 store loaded from ``f``: its sketch reads a copy of the
        head's Q8_0 bytes (the file's mapping does not outlive the load). ModelError unless the
        store is the int8 mode's, its head in row chunks, Q8_0 (the error model's weights)."""
        from verispec.engine.matmul import RowChunks
        from verispec.reference.errors import ModelError

        if store.mode != "int8":
            raise ModelError(f"the sparse head is a head mode of the int8 engine (weights='int8', not {store.mode!r})")
        output = store.head_output
        if not isinstance(output, RowChunks):
            raise ModelError("the sparse head needs the int8 head in row chunks (a vocabulary of more than one chunk)")
        head_name = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
        info = f.tensors[head_name]
        if info.ggml_type != Q8_0_TYPE:
            raise ModelError(
                f"the sparse head's error model needs a Q8_0 head; {head_name} is ggml type {info.ggml_type}"
            )
        raw = np.array(f.raw(head_name), dtype=np.uint8).reshape(-1)  # a copy: the mapping closes after the load
        return cls(output, Q8BlockSketch(raw, config.n_vocab, config.n_embd), config.n_vocab, options)

    def decision_rows(self, x: F32, params: "SamplingParams", histories: Sequence[Sequence[int]] | None) -> F32 | None:
        """Rows ``[T, V]`` the law ``params`` maps to the full head's probabilities (class doc) for
        the normed head input ``x`` ``[T, n_in]``, row t's history ``histories[t]`` (None: no
        history known, so a repeat penalty makes the full head run); None (recorded in
        :attr:`stats` by reason) when the full head must run."""
        rows = x.shape[0]
        self.stats.rows += rows
        k = local_k(params, self.n_vocab)
        if k is None:
            self.stats.fell_back("law", rows)
            return None
        penalized = params.repeat_penalty != 1.0 and params.repeat_last_n != 0
        if penalized and histories is None:
            self.stats.fell_back("penalty", rows)
            return None
        if not np.isfinite(x).all():
            self.stats.fell_back("non-finite", rows)
            return None
        scores, radius = self._bounds(x)
        union = np.zeros(self.n_vocab, dtype=bool)
        for t in range(rows):
            if not (np.isfinite(scores[t]).all() and np.isfinite(radius[t]).all()):
                self.stats.fell_back("non-finite", rows)
                return None
            lower, upper = processed_bounds(scores[t], radius[t], histories[t] if histories else (), params)
            chosen = candidates_between(lower, upper, k)
            if chosen is None:
                self.stats.fell_back("few-alive", rows)
                return None
            union |= chosen
        if union.mean() > self.options.max_fraction:
            self.stats.fell_back("fraction", rows)
            return None
        ids, values = self._evaluate(x, union)
        if not np.isfinite(values).all():
            self.stats.fell_back("non-finite", rows)
            return None
        out = np.full((rows, self.n_vocab), PRUNED_LOGIT, dtype=np.float32)
        out[:, ids] = values
        self.stats.sparse_rows += rows
        return out

    def _bounds(self, x: F32) -> tuple[F64, F64]:
        import time

        started = time.perf_counter()
        try:
            return self.sketch.bounds(x)
        finally:
            self.stats.sketch_seconds += time.perf_counter() - started

    def _evaluate(self, x: F32, mask: npt.NDArray[np.bool_]) -> tuple[Ids, F32]:
        from verispec.engine.matmul import RowChunks

        assert isinstance(self.output, RowChunks)
        evaluator = ChunkEvaluator(self.output.parts)
        ids, values = evaluator(x, mask)
        self.stats.chunks_evaluated += evaluator.chunks_called
        self.stats.chunks_offered += len(self.output.parts)
        return ids, values

    def lazy_choice(self, x: F32, history: Sequence[int], params: "SamplingParams", u: float) -> int | None:
        """The token a full-vocabulary law (top-k 0 or >= V, top-p 1, min-p 0, no banned id) draws
        with uniform ``u`` from the normed head input ``x`` ``[1, n_in]``: :func:`lazy_draw` on
        the exact logits of the chunks holding the candidates of the first
        :data:`engine.sampling.SPARSE_TOP_K` ids and the processed bounds elsewhere. None (in
        :attr:`stats` by reason) when the law is not such a law or the bounds cannot decide: the
        caller runs the full head with the same ``u``, and the token is the same either way."""
        from verispec.engine.sampling import SPARSE_TOP_K, apply_repeat_penalty
        from verispec.reference.sampling import apply_logit_bias

        self.stats.rows += 1
        if (
            params.greedy
            or 0 < params.top_k < self.n_vocab
            or params.top_p < 1.0
            or params.min_p > 0.0
            or any(b == -np.inf for b in (params.logit_bias or {}).values())
        ):
            self.stats.fell_back("law", 1)
            return None
        if not np.isfinite(x).all():
            self.stats.fell_back("non-finite", 1)
            return None
        scores, radius = self._bounds(x)
        if not (np.isfinite(scores).all() and np.isfinite(radius).all()):
            self.stats.fell_back("non-finite", 1)
            return None
        lower, upper = processed_bounds(scores[0], radius[0], history, params)
        if not (np.isfinite(lower).all() and np.isfinite(upper).all()):
            self.stats.fell_back("non-finite", 1)
            return None
        chosen = candidates_between(lower, upper, min(SPARSE_TOP_K, self.n_vocab - 1))
        if chosen is None:
            self.stats.fell_back("few-alive", 1)
            return None
        if chosen.mean() > self.options.max_fraction:
            self.stats.fell_back("fraction", 1)
            return None
        ids, values = self._evaluate(x, chosen)
        working = np.zeros(self.n_vocab)  # the law's processing, read at ``ids`` only
        working[ids] = values[0]
        apply_logit_bias(working, params.logit_bias)
        apply_repeat_penalty(working, history, params.repeat_penalty, params.repeat_last_n)
        if not np.isfinite(working[ids]).all():
            self.stats.fell_back("non-finite", 1)
            return None
        token = lazy_draw(ids, working[ids], lower, upper, params.temperature, u)
        if token is None:
            self.stats.fell_back("undecided", 1)
            return None
        self.stats.lazy_draws += 1
        return token


def choose_token(
    model: "HeadedModel", x: F32, history: Sequence[int], params: "SamplingParams", rng: np.random.Generator
) -> int:
    """Plain decoding's step on a sparse-head model from the normed head input ``x`` ``[1, n_in]``:
    the token ``sample(target_distribution(full head row, history, params), rng)`` gives, consuming
    the same one uniform. A top-k-local law reads :meth:`SparseHead.decision_rows` (the full head
    where it declines); any other law draws its uniform first and asks :meth:`SparseHead.lazy_choice`,
    the full head's row with that uniform where it declines."""
    import time

    from verispec.engine.sampling import sample, sample_from, target_distribution

    head = model.sparse_head
    if head is None:
        raise ValueError("choose_token needs a model loaded with the sparse head")
    started = time.perf_counter()
    capped = model.config.final_softcap is not None  # a softcap may merge logits: the full head
    if local_k(params, head.n_vocab) is not None:
        rows = None
        if capped:
            head.stats.rows += 1
            head.stats.fell_back("softcap", 1)
        else:
            rows = head.decision_rows(x, params, [history])
        row = (rows if rows is not None else model.head_from_input(x))[0]
        head.stats.seconds += time.perf_counter() - started
        return sample(target_distribution(row, history, params), rng)
    u = float(rng.random())
    if capped:
        head.stats.rows += 1
        head.stats.fell_back("softcap", 1)
        token = None
    else:
        token = head.lazy_choice(x, history, params, u)
    if token is not None:
        head.stats.seconds += time.perf_counter() - started
        return token
    row = model.head_from_input(x)[0]
    head.stats.seconds += time.perf_counter() - started
    return sample_from(target_distribution(row, history, params), u)
