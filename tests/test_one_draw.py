"""The protocol's draw and residual rule are defined once (reference/sampling.py, reference/speculative.py).

The vectorised forms (``inverse_cdf_draws`` for many uniforms on one row, ``inverse_cdf_rows`` for
one uniform per row) and every caller that used to carry its own copy (the engine's sparse draw,
the batch verifier, the tree batch verifier) must give the single-row ``inverse_cdf`` bit for bit,
including the subnormal fallback spec/protocol.md decides: when ``u * total`` rounds up to
``total`` no id crosses, and the draw is the largest id with positive weight (NOT V - 1).
Every comparison is exact (integers): there is no tolerance to derive.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from verispec.engine import sampling as engine_sampling
from verispec.reference.sampling import (
    inverse_cdf,
    inverse_cdf_draws,
    inverse_cdf_rows,
    largest_positive_id,
    sample_from,
)
from verispec.reference.speculative import residual_law, verify_sampled, verify_sampled_batch
from verispec.reference.tree_speculative import DraftTree, verify_tree_sampled, verify_tree_sampled_batch

SMALLEST_SUBNORMAL = 5e-324
# weights [V = 5] with a subnormal total and zeros after the last positive id: the row where
# "largest id with positive weight" (1) and "clamp to V - 1" (4) disagree
SUBNORMAL_ROW = np.array([0.0, SMALLEST_SUBNORMAL, 0.0, 0.0, 0.0])
ROUNDS_UP = 0.9  # 0.9 * 5e-324 rounds to 5e-324 (round to nearest): u * total == total


def _rows_with_edges(rng: np.random.Generator, count: int, vocab: int) -> npt.NDArray[np.float64]:
    """Rows [count, V]: random weights with zeros, one-hot rows, and subnormal-total rows."""
    rows = rng.random((count, vocab)) * (rng.random((count, vocab)) < 0.6)
    rows[rows.sum(axis=1) == 0, 0] = 1.0
    rows[::7] = np.eye(vocab)[rng.integers(0, vocab, size=rows[::7].shape[0])]
    rows[3::11] = 0.0
    rows[3::11, rng.integers(0, vocab)] = SMALLEST_SUBNORMAL  # subnormal totals
    return rows


def _uniforms(rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
    """Uniforms [count] in [0, 1), with the edges 0, 1/2 and the largest float below 1."""
    u = rng.random(count)
    u[::5] = 0.0
    u[1::5] = float(np.nextafter(1.0, 0.0))
    u[2::9] = 0.5
    return u


def test_the_subnormal_premise_holds() -> None:
    """The fallback is reachable: u * total really rounds up to total, so no id crosses."""
    total = float(np.cumsum(SUBNORMAL_ROW)[-1])
    assert ROUNDS_UP * total == total
    assert int(np.searchsorted(np.cumsum(SUBNORMAL_ROW), ROUNDS_UP * total, side="right")) == SUBNORMAL_ROW.shape[0]


def test_subnormal_total_draws_the_largest_positive_id_everywhere() -> None:
    assert largest_positive_id(SUBNORMAL_ROW) == 1
    assert inverse_cdf(SUBNORMAL_ROW, ROUNDS_UP) == 1
    assert inverse_cdf_draws(SUBNORMAL_ROW, np.array([ROUNDS_UP, 0.0])).tolist() == [1, 1]
    assert inverse_cdf_rows(SUBNORMAL_ROW[None], np.array([ROUNDS_UP])).tolist() == [1]
    assert sample_from(SUBNORMAL_ROW, ROUNDS_UP) == 1  # the reference's draw, its running sum computed once
    assert engine_sampling.sample_from(SUBNORMAL_ROW, ROUNDS_UP) == 1


def test_two_positive_ids_under_a_subnormal_total() -> None:
    """Weights 5e-324 at ids 1 and 3: total 1e-323; u just below 1 gives u * total == total."""
    row = np.array([0.0, SMALLEST_SUBNORMAL, 0.0, SMALLEST_SUBNORMAL, 0.0, 0.0])
    u = float(np.nextafter(1.0, 0.0))
    total = float(np.cumsum(row)[-1])
    assert u * total == total
    assert inverse_cdf(row, u) == 3
    assert inverse_cdf_rows(row[None], np.array([u])).tolist() == [3]


@pytest.mark.parametrize("vocab", [1, 2, 9, 64])
def test_vectorised_draws_equal_the_one_definition(vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    rows = _rows_with_edges(rng, 200, vocab)
    u = _uniforms(rng, 200)
    expected = [inverse_cdf(rows[m], float(u[m])) for m in range(rows.shape[0])]
    assert inverse_cdf_rows(rows, u).tolist() == expected
    for m in range(0, rows.shape[0], 17):
        many = inverse_cdf_draws(rows[m], u)
        assert many.tolist() == [inverse_cdf(rows[m], float(v)) for v in u]
        assert [engine_sampling.sample_from(rows[m], float(v)) for v in u[:20]] == many[:20].tolist()


def test_residual_law_row_by_row() -> None:
    p = np.array([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [0.0, 1.0, 0.0]])
    q = np.array([[0.25, 0.75, 0.0], [0.25, 0.25, 0.5], [0.5, 0.5, 0.0]])
    expected = np.array([[0.25, 0.0, 0.0], [0.25, 0.25, 0.5], [0.0, 0.5, 0.0]])  # row 1: p == q, all zero -> p
    np.testing.assert_array_equal(residual_law(p, q), expected)
    for j in range(3):
        np.testing.assert_array_equal(residual_law(p[j], q[j]), expected[j])


def test_batch_verifier_repairs_follow_the_fallback() -> None:
    """A rejection whose residual is a subnormal row: single and batched verifiers draw id 1.

    p's row 0 sums to 1 - 1e-7, inside the contract's 1e-6 (PROB_TOLERANCE); the draft id 0 has
    p < q, and u_0 = 0.9999999 rejects it (0.9999999 * 0.5 >= 0.5 - 1e-7)."""
    tiny = SMALLEST_SUBNORMAL
    p = np.array([[0.5 - 1e-7, tiny, 0.0, 0.5], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.5, 0.0, 0.0, 0.5]])
    assert residual_law(p[0], q[0]).tolist() == [0.0, tiny, 0.0, 0.0]
    uniforms = np.array([[0.9999999, ROUNDS_UP], [0.9999999, 0.0]])
    verdict = verify_sampled(p, q, [0], uniforms[0].tolist())
    assert (verdict.accepted, verdict.token, verdict.kind) == (0, 1, "repair")
    batch = verify_sampled_batch(p, q, np.array([[0], [0]]), uniforms)
    assert batch.accepted.tolist() == [0, 0] and batch.token.tolist() == [1, 1]
    unshared = verify_sampled_batch(np.stack([p, p]), np.stack([q, q]), np.array([[0], [0]]), uniforms)
    assert unshared.token.tolist() == [1, 1]


def test_tree_batch_draw_equals_the_single_tree_draw() -> None:
    rng = np.random.default_rng(3)
    tree = DraftTree(parents=(-1, 0, 0, 1), tokens=(-1, 1, 2, 0))
    vocab = 5
    p = rng.random((tree.size, vocab))
    p /= p.sum(axis=1, keepdims=True)
    q = rng.random((tree.size - 1, vocab))
    q /= q.sum(axis=1, keepdims=True)
    u = _uniforms(rng, 60 * tree.size).reshape(60, tree.size)
    end, token, bonus = verify_tree_sampled_batch(tree, p, q, u)
    for b in range(u.shape[0]):
        single = verify_tree_sampled(tree, p, q, u[b])
        assert single.token == int(token[b])
        assert (single.path[-1] if single.path else 0) == int(end[b])
