"""The target law, vectorized: bit-identical to :func:`reference.sampling.target_distribution`.

Same processors, same order, same float64 arithmetic on every value that reaches the law; only the
way the surviving set is found changes:

- repeat penalty: one gather/scatter over the distinct window ids instead of a Python loop (each id
  still gets exactly one ``/ r`` or ``* r``);
- top-k, top-p, min-p and the softmax are the reference's own helpers (its top-k already partitions
  instead of sorting the whole vocabulary, and its top-p sorts only the prefix it needs);
- drawing: the inverse CDF over the nonzero ids only. Zero weights do not change a running sum, so
  the cumulative sums, the total and the first crossing are the reference's, bit for bit.

The tests (tests/test_engine_sampling.py) check ``array_equal`` against the reference, not a
tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import SamplingError
from verispec.reference.sampling import (
    FloatArray,
    Probs,
    SamplingParams,
    _apply_logit_bias,
    _apply_min_p,
    _apply_top_k,
    _apply_top_p,
    _check_history,
    _check_logits,
    _softmax_over,
    inverse_cdf,
)


def _apply_repeat_penalty(
    logits: npt.NDArray[np.float64], history: Sequence[int], penalty: float, last_n: int
) -> None:
    if penalty == 1.0 or last_n == 0 or not history:
        return
    window = history if last_n == -1 else history[-last_n:]
    ids = np.unique(np.asarray(window, dtype=np.int64))
    values = logits[ids]
    logits[ids] = np.where(values > 0, values / penalty, values * penalty)


def target_distribution(logits: FloatArray, history: Sequence[int], params: SamplingParams) -> Probs:
    """Same contract and same bits as :func:`reference.sampling.target_distribution`."""
    row = _check_logits(logits)
    vocab_size = row.shape[0]
    params.validate(vocab_size)
    _check_history(history, vocab_size)
    working = row.copy()  # [V]
    _apply_logit_bias(working, params.logit_bias)
    _apply_repeat_penalty(working, history, params.repeat_penalty, params.repeat_last_n)
    if np.any(working == np.inf):
        raise SamplingError(f"logit of token id {int(np.flatnonzero(working == np.inf)[0])} overflows to +inf after the bias")
    alive = np.isfinite(working)  # [V]
    if not alive.any():
        raise SamplingError("empty support: every token is banned by a -inf logit bias")
    if params.greedy:
        probs = np.zeros(vocab_size, dtype=np.float64)
        probs[int(np.argmax(np.where(alive, working, -np.inf)))] = 1.0
        return probs
    _apply_top_k(working, alive, params.top_k)
    _apply_top_p(working, alive, params.top_p)
    _apply_min_p(working, alive, params.min_p)
    return _softmax_over(working, alive, params.temperature)


def sample_from(probs: Probs, u: float) -> int:
    """Same draw as :func:`reference.sampling.sample_from` (inverse CDF, same bits), faster."""
    row = np.asarray(probs, dtype=np.float64)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(f"probs must be a non-empty 1-D row [V], got shape {row.shape}")
    if not (0.0 <= u < 1.0):
        raise SamplingError(f"uniform must be in [0, 1), got {u!r}")
    if not np.all(np.isfinite(row)) or np.any(row < 0):
        raise SamplingError("probs must be finite and non-negative")
    support = np.flatnonzero(row)  # ascending ids with positive weight
    if support.size == 0:
        raise SamplingError("probs have zero total mass")
    # The draw over the support alone: adding the zeros between support ids changes no running
    # sum (x + 0.0 == x exactly), so this is the reference's draw on fewer entries, same bits.
    return int(support[inverse_cdf(row[support], u)])


def sample(probs: Probs, rng: np.random.Generator) -> int:
    """One ``rng.random()`` uniform, then :func:`sample_from` (the reference's protocol)."""
    return sample_from(probs, float(rng.random()))
