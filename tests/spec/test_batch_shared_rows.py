"""verify_sampled_batch with shared rows ([k+1, V], [k, V]) chooses each emitted token from one
cumulative sum per stopping position (a binary search per item); with per-item rows
([N, k+1, V]) it runs the chunked [items, V] loop. Both must give bit-identical verdicts, and
both must equal N calls of verify_sampled: same accepted counts, same tokens, same bonus flags.
The rows below cover the branches of the token choice: a repair from the residual, the bonus row,
rows with zeros, and a subnormal residual total (the overflow branch: u * total rounds up to the
total)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from verispec.reference.speculative import verify_sampled, verify_sampled_batch

Rows = npt.NDArray[np.float64]


def _random_rows(rng: np.random.Generator, rows: int, vocab: int, zeros: float) -> Rows:
    weights = rng.random((rows, vocab)) * (rng.random((rows, vocab)) >= zeros)
    weights[:, 0] += 1e-3  # no all-zero row
    return np.asarray(weights / weights.sum(axis=1, keepdims=True), dtype=np.float64)


def _drafts(rng: np.random.Generator, q: Rows, n: int) -> npt.NDArray[np.int64]:
    k, vocab = q.shape
    cumulative = np.cumsum(q, axis=1)
    draws = [np.searchsorted(cumulative[i], rng.random(n) * cumulative[i, -1], side="right") for i in range(k)]
    return np.asarray(np.minimum(np.stack(draws, axis=1), vocab - 1), dtype=np.int64)  # [n, k]


def _assert_same(shared: object, per_item: object) -> None:
    for field in ("accepted", "token", "is_bonus"):
        a = np.asarray(getattr(shared, field))
        b = np.asarray(getattr(per_item, field))
        assert a.dtype == b.dtype and np.array_equal(a, b), field


def _cases() -> list[tuple[str, Rows, Rows]]:
    rng = np.random.default_rng(5)
    cases = []
    for vocab, k, zeros in ((6, 1, 0.3), (6, 3, 0.0), (50, 2, 0.5), (4096, 2, 0.9)):
        p = _random_rows(rng, k + 1, vocab, zeros)
        q = _random_rows(rng, k, vocab, zeros)
        cases.append((f"random V={vocab} k={k}", p, q))
    p = _random_rows(rng, 3, 8, 0.0)
    cases.append(("q equals p: every draft accepted, the bonus row", p, p[:2].copy()))
    return cases


@pytest.mark.parametrize("name,p,q", _cases(), ids=[c[0] for c in _cases()])
def test_shared_rows_match_per_item_rows_and_single_calls(name: str, p: Rows, q: Rows) -> None:
    rng = np.random.default_rng(11)
    n = 3000
    drafts = _drafts(rng, q, n)
    uniforms = rng.random((n, q.shape[0] + 1))
    shared = verify_sampled_batch(p, q, drafts, uniforms)
    per_item = verify_sampled_batch(
        np.ascontiguousarray(np.broadcast_to(p, (n, *p.shape))),
        np.ascontiguousarray(np.broadcast_to(q, (n, *q.shape))),
        drafts,
        uniforms,
    )
    _assert_same(shared, per_item)
    accepted = np.asarray(shared.accepted)
    if name.startswith("q equals p"):
        assert set(accepted.tolist()) == {q.shape[0]}
    else:  # repairs at more than one position and bonus tokens are exercised
        assert len(np.unique(accepted)) >= 2 and {0, q.shape[0]} <= set(accepted.tolist())
    for i in range(0, n, 37):  # and each equals the single-verification reference
        single = verify_sampled(p, q, drafts[i].tolist(), uniforms[i].tolist())
        assert (single.accepted, single.token) == (int(accepted[i]), int(np.asarray(shared.token)[i]))


def test_a_subnormal_residual_total_takes_the_overflow_branch_alike() -> None:
    """p and q agree except in subnormal entries: draft 3 (q = 5e-324 > p = 0) is always rejected
    and the residual is [0, 0, 5e-324, 0]. For u > 1/2, u * total rounds up to the total, so the
    count of c[t] <= u*total is V (overflow): the answer must be id 2, the largest with positive
    weight; for u < 1/2 it rounds to 0 and the count is 2. Draft 1 (q = p) is always accepted."""
    p = np.array([[0.5, 0.5, 1e-323, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[0.5, 0.5, 5e-324, 5e-324]])
    drafts = np.array([[3], [3], [3], [1], [3]], dtype=np.int64)
    uniforms = np.array([[0.9, 0.99], [0.1, 0.75], [0.5, 0.2], [0.3, 0.6], [0.0, 0.999999]])
    n = drafts.shape[0]
    shared = verify_sampled_batch(p, q, drafts, uniforms)
    per_item = verify_sampled_batch(np.stack([p] * n), np.stack([q] * n), drafts, uniforms)
    _assert_same(shared, per_item)
    assert np.asarray(shared.accepted).tolist() == [0, 0, 0, 1, 0]
    assert np.asarray(shared.token).tolist()[:3] == [2, 2, 2] and int(np.asarray(shared.token)[4]) == 2
    for i in range(n):
        single = verify_sampled(p, q, drafts[i].tolist(), uniforms[i].tolist())
        assert (single.accepted, single.token) == (
            int(np.asarray(shared.accepted)[i]),
            int(np.asarray(shared.token)[i]),
        )
