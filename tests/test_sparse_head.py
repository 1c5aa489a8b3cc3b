"""engine/sparse_head.py: the sparse top-k is the full head's, bit for bit, ties at the cut included.

The kernel is the real one (``MatMulNBits`` row chunks built from Q8_0 bytes, as the int8 head
builds them); the sketch is :class:`Q8ExactSketch` (the tightest radius a sketch can have: the
kernel's own error model), and looser sketches derived from it by widening the radius and moving
the score inside the widening (still certified: ``|K - S'| <= |K - S| + |S - S'|``). Exact equality
everywhere: the claim is bit-identity, no tolerance. The kernel error model's check has no
tolerance either: ``|K - w.x| <= kernel_error_bound`` must hold on every row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.support.quant_blocks import q8_0_bytes
from verispec.engine import matmul, tile_head
from verispec.engine.blocks import repack
from verispec.engine.sparse_head import (
    Q8_0_TYPE,
    Q8ExactSketch,
    candidates,
    first_k,
    head_top_k,
    kernel_error_bound,
    lazy_draw,
    sparse_top_k,
)

F32 = npt.NDArray[np.float32]
N_IN = 128
CHUNK = 512
HEAD_KERNELS = ("mlas", "tile")  # the int8 mode's head kernels (engine/weights.py)


def head_chunks(raw: npt.NDArray[np.uint8], n_in: int, chunk: int = CHUNK, kernel: str = "mlas") -> matmul.RowChunks:
    """The int8 head of ``raw`` Q8_0 rows in parts of ``chunk`` rows, on head kernel ``kernel``:
    ``mlas`` (a MatMulNBits session a part) or ``tile`` (engine/tile_head.py, its C kernel where
    it builds, else its NumPy law: the same bits)."""
    if kernel == "tile":
        kernels = tile_head.default_kernel()[0]
        tiles = tile_head.pack_tiles(np.ascontiguousarray(raw).reshape(-1), raw.shape[0], n_in)
        return tile_head.TileHead(tiles, raw.shape[0], n_in, 1, kernels, part_rows=chunk)
    parts: list[matmul.Matmul] = []
    for first in range(0, raw.shape[0], chunk):
        rows = raw[first : first + chunk]
        blocks = repack(np.ascontiguousarray(rows).reshape(-1), Q8_0_TYPE, (rows.shape[0], n_in), name="head")
        parts.append(matmul.ort_blocks(blocks, 1))
    return matmul.RowChunks(parts)


def random_head(rng: np.random.Generator, rows: int) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float16]]:
    levels = rng.integers(-127, 128, size=(rows, N_IN)).astype(np.int8)
    scales = (rng.uniform(0.5, 2.0, size=(rows, N_IN // 32)) / 127).astype(np.float16)
    return levels, scales


class WidenedSketch:
    """A looser certified sketch: the radius grows by ``extra`` and the score moves by at most that."""

    def __init__(self, inner: Q8ExactSketch, extra: float, seed: int) -> None:
        self.inner, self.extra, self.rng = inner, extra, np.random.default_rng(seed)

    def bounds(self, x: F32) -> tuple[Any, Any]:
        scores, radius = self.inner.bounds(x)
        shift = self.rng.uniform(-self.extra, self.extra, size=scores.shape)
        return scores + shift, radius + self.extra


class PreparedSketch:
    """A sketch's bounds for inputs announced in advance, computed in one call. Q8ExactSketch reads
    (and dequantizes to float64) every weight of the head per call, whatever the rows of input, so
    the real-head test announces all its inputs and pays one pass instead of one per decode step.
    The bounds of a row are the inner sketch's for that row: the score ``w . x`` in float64 and a
    radius that holds for any summation order (kernel_error_bound plus ``gamma_K(2^-53) |w|.|x|``),
    so a batched product is covered as a 1-row one is. An input that was not announced (a miss)
    goes to the inner sketch, alone."""

    def __init__(self, inner: Q8ExactSketch) -> None:
        self.inner = inner
        self.prepared: dict[bytes, tuple[Any, Any]] = {}
        self.misses = 0

    def prepare(self, inputs: list[F32]) -> None:
        scores, radius = self.inner.bounds(np.concatenate(inputs))
        row = 0
        for x in inputs:
            self.prepared[x.tobytes()] = (scores[row : row + len(x)], radius[row : row + len(x)])
            row += len(x)

    def bounds(self, x: F32) -> tuple[Any, Any]:
        if x.tobytes() in self.prepared:
            return self.prepared[x.tobytes()]
        self.misses += 1
        return self.inner.bounds(x)


def full_first_k(logits: F32, k: int) -> tuple[Any, Any]:
    ids = np.arange(logits.shape[1], dtype=np.int64)
    top = np.stack([first_k(logits[t], ids, k) for t in range(logits.shape[0])])
    return top, np.take_along_axis(logits, top, axis=1)


def assert_same(got: Any, logits: F32, k: int) -> None:
    ids, values = full_first_k(logits, k)
    np.testing.assert_array_equal(got.ids, ids)
    assert got.logits.tobytes() == values.tobytes()  # the same bits, not merely equal values


# -- the kernel's error model --------------------------------------------------------------------


def activations(rng: np.random.Generator) -> dict[str, F32]:
    base = rng.standard_normal((4, N_IN)).astype(np.float32)
    outlier = base.copy()
    outlier[:, 5] = 3000.0  # one huge dimension: its block's scale swamps its neighbours
    zero_block = base.copy()
    zero_block[:, 32:64] = 0.0
    return {
        "gaussian": base,
        "huge": (base * np.float32(1e30)).astype(np.float32),
        "tiny_normal": (base * np.float32(1e-30)).astype(np.float32),
        "denormal": (base * np.float32(1e-40)).astype(np.float32),
        "outlier": outlier,
        "zero_block": zero_block,
        "mixed_scales": (base * np.logspace(-20, 20, N_IN, dtype=np.float32)).astype(np.float32),
    }


@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize(
    "kind", ["gaussian", "huge", "tiny_normal", "denormal", "outlier", "zero_block", "mixed_scales"]
)
def test_kernel_error_bound_holds_on_every_row(kind: str, head_kernel: str) -> None:
    """The error model holds for both int8 head kernels: MatMulNBits, and the tile kernel's law
    (reference/q8_block_dot.py: the same per-block quantization, two roundings and an add a term)."""
    rng = np.random.default_rng(1)
    levels, scales = random_head(rng, 1024)
    raw = q8_0_bytes(levels, scales)
    x = activations(rng)[kind]
    logits = head_chunks(raw, N_IN, kernel=head_kernel)(x).astype(np.float64)
    w = Q8ExactSketch(raw, 1024, N_IN).rows(0, 1024)
    # the exact weights: each a float16 scale times an int8 level, as the reference dequantizes them
    assert np.array_equal(w, levels.astype(np.float64) * np.repeat(scales.astype(np.float64), 32, axis=1))
    exact = x.astype(np.float64) @ w.T
    bound = kernel_error_bound(w, x)
    assert np.isfinite(logits).all()
    worst = np.abs(logits - exact) - bound
    assert (worst <= 0).all(), f"{kind}: the kernel left its error model by {worst.max()}"


# -- the selection: pruning, ties, fallback --------------------------------------------------------


@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("k", [1, 2, 8, 64])
@pytest.mark.parametrize("extra", [0.0, 2.0])
def test_sparse_top_k_is_the_full_heads(k: int, extra: float, head_kernel: str) -> None:
    rng = np.random.default_rng(k)
    levels, scales = random_head(rng, 4 * CHUNK)
    raw = q8_0_bytes(levels, scales)
    head = head_chunks(raw, N_IN, kernel=head_kernel)
    x = rng.standard_normal((3, N_IN)).astype(np.float32)
    exact_sketch = Q8ExactSketch(raw, 4 * CHUNK, N_IN)
    sketch = WidenedSketch(exact_sketch, extra, k) if extra else exact_sketch
    got = sparse_top_k(x, head, sketch, k, max_fraction=1.0)
    assert got is not None
    assert_same(got, head(x), k)


@pytest.mark.parametrize("head_kernel", HEAD_KERNELS)
@pytest.mark.parametrize("kind", ["huge", "tiny_normal", "denormal", "outlier", "zero_block", "mixed_scales"])
def test_sparse_top_k_on_extreme_activations(kind: str, head_kernel: str) -> None:
    """Huge, denormal, one-outlier and mixed-scale inputs: the same ids and bits as the full head
    (where the radius covers every row the selection evaluates every chunk: still exact)."""
    rng = np.random.default_rng(3)
    levels, scales = random_head(rng, 4 * CHUNK)
    raw = q8_0_bytes(levels, scales)
    head = head_chunks(raw, N_IN, kernel=head_kernel)
    x = activations(rng)[kind]
    for k in (1, 8):
        got = sparse_top_k(x, head, Q8ExactSketch(raw, 4 * CHUNK, N_IN), k, max_fraction=1.0)
        assert got is not None
        assert_same(got, head(x), k)


def test_exact_ties_at_the_cut_keep_the_lowest_ids() -> None:
    """The best row copied to ids in three chunks: identical bytes give identical kernel bits, so
    the top-k has exact ties at the cut; the full path keeps the lowest ids, and so must this."""
    rng = np.random.default_rng(7)
    rows = 4 * CHUNK
    levels, scales = random_head(rng, rows)
    x = rng.standard_normal((1, N_IN)).astype(np.float32)
    best = int(np.argmax(head_chunks(q8_0_bytes(levels, scales), N_IN)(x)[0]))
    copies = [3, CHUNK + 10, 2 * CHUNK + 100, 3 * CHUNK + 511]
    levels[copies] = levels[best]
    scales[copies] = scales[best]
    raw = q8_0_bytes(levels, scales)
    head = head_chunks(raw, N_IN)
    logits = head(x)
    tied = np.flatnonzero(logits[0] == logits[0].max())
    assert len(tied) >= len(copies) + 1  # the ties are real, bit for bit
    for k in (1, 2, 3, 5):
        got = sparse_top_k(x, head, Q8ExactSketch(raw, rows, N_IN), k, max_fraction=1.0)
        assert got is not None
        assert_same(got, logits, k)
        assert list(got.ids[0]) == list(tied[:k])


def test_near_ties_within_the_bound() -> None:
    """Rows one level apart from the best (closer than the radius): all candidates, resolved exactly."""
    rng = np.random.default_rng(8)
    rows = 2 * CHUNK
    levels, scales = random_head(rng, rows)
    x = rng.standard_normal((2, N_IN)).astype(np.float32)
    best = int(np.argmax(head_chunks(q8_0_bytes(levels, scales), N_IN)(x)[0]))
    for j, row in enumerate([17, CHUNK + 3, CHUNK + 400]):
        levels[row] = levels[best]
        scales[row] = scales[best]
        levels[row, j] = np.int8(max(-127, int(levels[best, j]) - 1 + 2 * j % 3))
    raw = q8_0_bytes(levels, scales)
    head = head_chunks(raw, N_IN)
    for k in (1, 4):
        got = sparse_top_k(x, head, Q8ExactSketch(raw, rows, N_IN), k, max_fraction=1.0)
        assert got is not None
        assert_same(got, head(x), k)


def test_every_row_a_candidate_falls_back() -> None:
    """Identical rows: nothing can be pruned, so the sparse path declines and runs no kernel."""
    rng = np.random.default_rng(9)
    levels, scales = random_head(rng, 1)
    raw = q8_0_bytes(np.repeat(levels, 2 * CHUNK, axis=0), np.repeat(scales, 2 * CHUNK, axis=0))
    head = head_chunks(raw, N_IN)
    x = rng.standard_normal((1, N_IN)).astype(np.float32)
    assert candidates(*(a[0] for a in Q8ExactSketch(raw, 2 * CHUNK, N_IN).bounds(x)), 1).all()
    assert sparse_top_k(x, head, Q8ExactSketch(raw, 2 * CHUNK, N_IN), 1) is None


def test_prunes_chunks_when_the_bound_is_tight() -> None:
    """A clear winner: only the chunks holding candidates run (the saving the design is for)."""
    rng = np.random.default_rng(10)
    rows = 8 * CHUNK
    levels, scales = random_head(rng, rows)
    x = rng.standard_normal((1, N_IN)).astype(np.float32)
    levels[5 * CHUNK + 7] = np.where(x[0] > 0, 127, -127).astype(np.int8)  # aligned with x: far ahead
    raw = q8_0_bytes(levels, scales)
    head = head_chunks(raw, N_IN)
    got = sparse_top_k(x, head, Q8ExactSketch(raw, rows, N_IN), 1)
    assert got is not None
    assert_same(got, head(x), 1)
    assert got.chunks_evaluated == 1 and got.chunks_total == 8


def test_non_finite_input_declines() -> None:
    rng = np.random.default_rng(11)
    levels, scales = random_head(rng, CHUNK)
    raw = q8_0_bytes(levels, scales)
    x = rng.standard_normal((1, N_IN)).astype(np.float32)
    x[0, 3] = np.nan
    assert sparse_top_k(x, head_chunks(raw, N_IN), Q8ExactSketch(raw, CHUNK, N_IN), 1) is None


def test_candidates_rejects_bad_k() -> None:
    with pytest.raises(ValueError):
        candidates(np.zeros(4), np.zeros(4), 0)
    with pytest.raises(ValueError):
        candidates(np.zeros(4), np.zeros(4), 5)


# -- the real heads ----------------------------------------------------------------------------


def _head_sketch(path: Path) -> tuple[Q8ExactSketch, Any]:
    from verispec.reference.gguf import GGUFFile

    f = GGUFFile.open(path)
    name = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
    info = f.tensors[name]
    assert info.ggml_type == Q8_0_TYPE
    rows, n_in = int(info.shape[0]), int(info.shape[-1])
    return Q8ExactSketch(np.asarray(f.raw(name)), rows, n_in), f


def head_input(model: Any, hidden: F32) -> F32:
    """What :func:`head_top_k` hands its sketch: the head's input after the final norm."""
    from verispec.reference import layers

    return layers.rms_norm(np.asarray(hidden, dtype=np.float32), model.store.output_norm, model.config.norm_eps)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize(("name", "steps"), [("smollm2-135m", 12), ("gemma3-270m", 4)])
def test_real_heads_over_decode_steps(
    name: str, steps: int, int8_real_model: Any, smollm2_path: Path, gemma3_path: Path
) -> None:
    """Greedy decoding of a real model: at every step (and on a 4-row pass, and on an early-exit
    head at the middle layer) the sparse top-k of the head's input equals the full head's top-k
    for k = 1, 8, 64, ids and bits. The greedy tokens are decoded first (the full head's first
    id: the sparse top-1 wherever the check below passes), so that the sketch's bounds for every
    input are computed in one pass over the head (:class:`PreparedSketch`); then every step is
    checked."""
    model = int8_real_model(name)
    exact_sketch, handle = _head_sketch(smollm2_path if name == "smollm2-135m" else gemma3_path)
    sketch = PreparedSketch(exact_sketch)
    try:
        cache = model.new_cache(64)
        tokens = [1, 504, 2365, 6354, 28, 1130, 314, 260]
        result = model.forward(tokens, cache, return_hidden=True)
        prompt_hidden, prompt_logits = result.hidden[-1][-4:], result.logits[-4:]  # the head's input before its norm
        exit_layer = model.config.n_layer // 2  # an early-exit head: model.head on a middle layer's state
        exit_hidden = result.hidden[exit_layer][-1:]
        token = int(np.argmax(result.logits[-1]))
        step_rows = []  # (hidden [1, n_embd], logits [1, V]) of each decode step
        for _ in range(steps):
            result = model.forward([token], cache, return_hidden=True)
            step_rows.append((result.hidden[-1], result.logits))
            token = int(full_first_k(result.logits, 1)[0][0, 0])
        hidden_inputs = [prompt_hidden, exit_hidden, *(h for h, _ in step_rows)]
        sketch.prepare([head_input(model, h) for h in hidden_inputs])

        for k in (1, 8, 64):
            top, logits, sparse = head_top_k(model, prompt_hidden, k, sketch, max_fraction=1.0)
            ids, values = full_first_k(prompt_logits, k)
            np.testing.assert_array_equal(top, ids)
            assert logits.tobytes() == values.tobytes() and sparse
        top, logits, sparse = head_top_k(model, exit_hidden, 8, sketch, max_fraction=1.0)
        ids, values = full_first_k(model.head(exit_hidden), 8)
        np.testing.assert_array_equal(top, ids)
        assert logits.tobytes() == values.tobytes() and sparse
        for hidden, step_logits in step_rows:
            for k in (1, 8, 64):
                top, logits, sparse = head_top_k(model, hidden, k, sketch, max_fraction=1.0)
                ids, values = full_first_k(step_logits, k)
                np.testing.assert_array_equal(top, ids)
                assert logits.tobytes() == values.tobytes() and sparse
        print(f"{name}: {len(hidden_inputs)} head inputs, {sketch.misses} not prepared")
    finally:
        handle.close()


# -- exact lazy sampling: the protocol's token for the protocol's uniform -----------------------


def protocol_draw(logits: F32, temperature: float, u: float) -> int:
    from verispec.reference.sampling import inverse_cdf, softmax_over

    row = logits.astype(np.float64)
    return inverse_cdf(softmax_over(row, np.ones(row.shape[0], dtype=bool), temperature), u)


def uniforms(logits: F32, temperature: float) -> list[float]:
    """A grid, plus every running-sum boundary of the reference's draw and its neighbours."""
    from verispec.reference.sampling import softmax_over

    row = logits.astype(np.float64)
    cumulative = np.cumsum(softmax_over(row, np.ones(row.shape[0], dtype=bool), temperature))
    edges = cumulative / cumulative[-1]
    near = np.concatenate([edges, np.nextafter(edges, 0.0), np.nextafter(edges, 1.0)])
    grid = np.concatenate([np.linspace(0.0, 1.0, 1001, endpoint=False), near])
    return [float(u) for u in grid if 0.0 <= u < 1.0]


@pytest.mark.parametrize("seed", range(60))
def test_lazy_draw_is_the_protocols_token(seed: int) -> None:
    """Small vocabularies, every kind of bound: whenever lazy_draw decides, it decides the token
    the full law's draw gives for the same uniform (exhaustively over a grid and every boundary)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    logits = (rng.standard_normal(n) * rng.choice([0.1, 1.0, 5.0, 30.0])).astype(np.float32)
    if seed % 3 == 0:
        logits[rng.integers(n)] = logits.max()  # an exact tie at the top
    temperature = float(rng.choice([0.3, 0.8, 1.0, 2.0]))
    radius = float(rng.choice([0.0, 1e-6, 0.01, 0.5, 3.0]))
    row = logits.astype(np.float64)
    lower = row - radius * rng.uniform(0.0, 1.0, n)
    upper = row + radius * rng.uniform(0.0, 1.0, n)
    best = int(np.argmax(logits))
    exact_ids = np.unique(np.concatenate([[best], np.flatnonzero(rng.uniform(size=n) < 0.4)])).astype(np.int64)
    decided = 0
    grid = uniforms(logits, temperature)
    for u in grid:
        token = lazy_draw(exact_ids, logits[exact_ids], lower, upper, temperature, u)
        if token is not None:
            assert token == protocol_draw(logits, temperature, u), (u, token)
            decided += 1
    if radius == 0.0:  # exact bounds: only the uniforms next to a boundary stay undecided
        assert decided >= 0.9 * len(grid)


def test_lazy_draw_declines_when_the_maximum_is_not_exact() -> None:
    logits = np.array([1.0, 3.0, 2.0], dtype=np.float32)
    row = logits.astype(np.float64)
    assert lazy_draw(np.array([0, 2]), logits[[0, 2]], row - 0.1, row + 0.1, 1.0, 0.5) is None


def test_lazy_draw_all_exact_decides_almost_every_uniform() -> None:
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(1000).astype(np.float32)
    row = logits.astype(np.float64)
    ids = np.arange(1000, dtype=np.int64)
    us = rng.uniform(size=200)
    tokens = [lazy_draw(ids, logits, row, row, 0.8, float(u)) for u in us]
    assert sum(t is not None for t in tokens) >= 195
    for u, t in zip(us, tokens):
        if t is not None:
            assert t == protocol_draw(logits, 0.8, float(u))


def test_lazy_draw_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        lazy_draw(np.array([0]), np.zeros(1, dtype=np.float32), np.zeros(1), np.zeros(1), 0.0, 0.5)
    with pytest.raises(ValueError):
        lazy_draw(np.array([0]), np.zeros(1, dtype=np.float32), np.zeros(1), np.zeros(1), 1.0, 1.0)


@pytest.mark.model
def test_lazy_draw_on_a_real_head(int8_real_model: Any, smollm2_path: Path) -> None:
    """SmolLM2's head at a prompt: exact logits on the chunks holding the greedy candidates, the
    sketch's intervals elsewhere. Every decided draw is the full law's token for its uniform."""
    from verispec.engine.sparse_head import ChunkEvaluator
    from verispec.reference import layers

    model = int8_real_model("smollm2-135m")
    exact_sketch, handle = _head_sketch(smollm2_path)
    try:
        result = model.forward([1, 504, 2365, 6354, 28, 1130, 314, 260], model.new_cache(16), return_hidden=True)
        x = layers.rms_norm(result.hidden[-1][-1:], model.store.output_norm, model.config.norm_eps)
        scores, radius = exact_sketch.bounds(x)
        mask = candidates(scores[0], radius[0], 1)
        ids, values = ChunkEvaluator(model.store.head_output.parts)(x, mask)
        widen = radius[0] * 1.001 + np.abs(scores[0]) * 1e-9
        decided = 0
        for u in np.random.default_rng(0).uniform(size=200):
            token = lazy_draw(ids, values[0], scores[0] - widen, scores[0] + widen, 0.8, float(u))
            if token is not None:
                assert token == protocol_draw(result.logits[-1], 0.8, float(u))
                decided += 1
        assert ids.shape[0] < result.logits.shape[1]  # some rows were only bounded
        assert decided > 0  # the lazy path ran (135 of 200 draws from one 8192-row chunk when written)
    finally:
        handle.close()
