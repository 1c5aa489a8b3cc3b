"""A textbook speculative-sampling verifier: the right law, not the protocol's arithmetic.

It accepts a draft when ``u < min(1, p/q)`` (a division where the protocol multiplies: ``u*q < p``)
and draws the repair token from the residual NORMALIZED first (the protocol draws ``u * total``
against the raw residual's cumulative sum). Both give the target law exactly in real arithmetic,
so the law tests pass it; but in float64 its tokens differ from the protocol's on some uniforms
(rounding at the boundaries), so the bit-exact replay fails. The check's verdict must say so
instead of calling it "not lossless". The contract (bad input raises) is kept, by the reference's
own input checks, so only the arithmetic differs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerdict, Verdict, check_sampled_inputs


def _draw(weights: npt.NDArray[np.float64], u: float) -> int:
    """The first id whose cumulative probability exceeds ``u`` (of the normalized row)."""
    cdf = np.cumsum(weights / weights.sum())
    return int(min(np.searchsorted(cdf, u, side="right"), np.flatnonzero(weights > 0)[-1]))


def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
    p_rows, q_rows, draft_ids, draws = check_sampled_inputs(p, q, drafts, uniforms)
    k = draft_ids.shape[0]
    for i in range(k):
        x = int(draft_ids[i])
        if draws[i] < min(1.0, p_rows[i, x] / q_rows[i, x]):
            continue
        residual = np.maximum(p_rows[i] - q_rows[i], 0.0)
        if not residual.sum() > 0:
            residual = p_rows[i]
        return Verdict(accepted=i, token=_draw(residual, float(draws[k])), kind="repair")
    return Verdict(accepted=k, token=_draw(p_rows[k], float(draws[k])), kind="bonus")


def verify_batch(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> BatchVerdict:
    """:func:`verify` on N items at once (p [k+1, V] or [N, k+1, V], q [k, V] or [N, k, V])."""
    draft_ids = np.asarray(drafts, dtype=np.int64)
    draws = np.asarray(uniforms, dtype=np.float64)
    n, k = draft_ids.shape
    p_all = np.broadcast_to(np.asarray(p, dtype=np.float64), (n, k + 1, np.shape(p)[-1]))
    q_all = np.broadcast_to(np.asarray(q, dtype=np.float64), (n, k, np.shape(q)[-1]))
    items, rows = np.arange(n)[:, None], np.arange(k)[None, :]
    ok = draws[:, :k] < np.minimum(1.0, p_all[items, rows, draft_ids] / q_all[items, rows, draft_ids])
    accepted = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))
    is_bonus = accepted == k
    row_p = p_all[np.arange(n), accepted]
    residual = np.maximum(row_p - q_all[np.arange(n), np.minimum(accepted, k - 1)], 0.0)
    weights = np.where((is_bonus | ~(residual.sum(axis=1) > 0))[:, None], row_p, residual)
    cdf = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    token = np.sum(cdf <= draws[:, k : k + 1], axis=1)
    last_positive = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    return BatchVerdict(accepted.astype(np.int64), np.minimum(token, last_positive).astype(np.int64), is_bonus)
