"""Every row-level mutant's batch verifier treats its items independently: a batch of N gives,
item by item, what N batches of one give. broken_batch draws a repair token only for the
rejected items and a bonus token only for the all-accepted ones, which is exact only because of
this independence (and a subset mapped to the wrong uniforms or rows would break it here)."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.reference.speculative import verify_sampled_batch
from verispec.spec.mutants import catalogue

ROW_MUTANTS = [m for m in catalogue() if m.batch is not verify_sampled_batch]


def _rows(rng: np.random.Generator, count: int, vocab: int, zeros: float) -> np.ndarray:
    weights = rng.random((count, vocab)) * (rng.random((count, vocab)) >= zeros)
    weights[:, 0] += 1e-3
    return np.asarray(weights / weights.sum(axis=1, keepdims=True), dtype=np.float64)


@pytest.mark.parametrize("mutant", ROW_MUTANTS, ids=[m.name for m in ROW_MUTANTS])
def test_a_batch_is_its_items_one_at_a_time(mutant: object) -> None:
    rng = np.random.default_rng(9)
    for vocab, k, zeros, shared in ((6, 2, 0.3, True), (1100, 5, 0.5, False)):
        p = _rows(rng, k + 1, vocab, zeros)
        q = 0.8 * p[:k] + 0.2 * _rows(rng, k, vocab, zeros)  # close to p: both repairs and bonuses occur
        n = 40
        cumulative = np.cumsum(q, axis=1)
        drafts = np.stack(
            [np.minimum(np.searchsorted(cumulative[i], rng.random(n), side="right"), vocab - 1) for i in range(k)],
            axis=1,
        )
        uniforms = rng.random((n, k + 1))
        p_in = p if shared else np.ascontiguousarray(np.broadcast_to(p, (n, *p.shape)))
        q_in = q if shared else np.ascontiguousarray(np.broadcast_to(q, (n, *q.shape)))
        batch = mutant.batch(p_in, q_in, drafts, uniforms)  # type: ignore[attr-defined]
        # both kinds of item in one batch (these four accept always, never emit a bonus, or accept
        # by a test that random rows rarely pass)
        one_kind = ("always_accept", "no_bonus_token", "sampling_verified_greedily", "target_rows_off_by_one")
        assert 0 < int(np.sum(np.asarray(batch.is_bonus))) < n or mutant.name in one_kind  # type: ignore[attr-defined]
        for i in range(n):
            one = mutant.batch(p, q, drafts[i : i + 1], uniforms[i : i + 1])  # type: ignore[attr-defined]
            got = (
                int(np.asarray(batch.accepted)[i]),
                int(np.asarray(batch.token)[i]),
                bool(np.asarray(batch.is_bonus)[i]),
            )
            assert got == (
                int(np.asarray(one.accepted)[0]),
                int(np.asarray(one.token)[0]),
                bool(np.asarray(one.is_bonus)[0]),
            ), (mutant.name, i)  # type: ignore[attr-defined]
