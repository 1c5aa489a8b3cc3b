"""The target law, vectorized: bit-identical to :func:`reference.sampling.target_distribution`.

Same processors, same order, same float64 arithmetic on every value that reaches the law; only the
way the surviving set is found changes:

- repeat penalty: one gather/scatter over the distinct window ids instead of a Python loop (each id
  still gets exactly one ``/ r`` or ``* r``);
- top-k, top-p, min-p and the softmax are the reference's own helpers (its top-k already partitions
  instead of sorting the whole vocabulary, and its top-p sorts only the prefix it needs);
- a small top-k (at most :data:`SPARSE_TOP_K`) is found in a pool of the vocabulary, and the later
  processors run on its survivors alone (:func:`_top_k_law`);
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
    apply_logit_bias,
    apply_min_p,
    apply_top_k,
    apply_top_p,
    check_history,
    check_logits,
    first_k,
    inverse_cdf,
    softmax_over,
)

SPARSE_TOP_K = (
    64  # top-k up to this size takes the survivors-only path (same bits at any k; past it the pool gains little)
)
POOL_STRIDE = 16  # every 16th logit bounds the k-th largest from below (_top_k_pool)


def apply_repeat_penalty(logits: npt.NDArray[np.float64], history: Sequence[int], penalty: float, last_n: int) -> None:
    if penalty == 1.0 or last_n == 0 or not history:
        return
    window = history if last_n == -1 else history[-last_n:]
    ids = np.unique(np.asarray(window, dtype=np.int64))
    values = logits[ids]
    logits[ids] = np.where(values > 0, values / penalty, values * penalty)


def target_distribution(logits: FloatArray, history: Sequence[int], params: SamplingParams) -> Probs:
    """Same contract and same bits as :func:`reference.sampling.target_distribution`."""
    source = np.asarray(logits)
    row = check_logits(source)
    vocab_size = row.shape[0]
    params.validate(vocab_size)
    check_history(history, vocab_size)
    working = row.copy() if np.may_share_memory(row, source) else row  # [V]; a converted row is already a copy
    apply_logit_bias(working, params.logit_bias)
    apply_repeat_penalty(working, history, params.repeat_penalty, params.repeat_last_n)
    if np.any(working == np.inf):
        raise SamplingError(
            f"logit of token id {int(np.flatnonzero(working == np.inf)[0])} overflows to +inf after the bias"
        )
    alive = np.isfinite(working)  # [V]
    if not alive.any():
        raise SamplingError("empty support: every token is banned by a -inf logit bias")
    if params.greedy:
        probs = np.zeros(vocab_size, dtype=np.float64)
        probs[int(np.argmax(np.where(alive, working, -np.inf)))] = 1.0
        return probs
    if 0 < params.top_k <= SPARSE_TOP_K:
        all_alive = bool(alive.all())
        if params.top_k < (vocab_size if all_alive else int(alive.sum())):  # else top-k keeps every live id
            return _top_k_law(working, alive, all_alive, params)
    apply_top_k(working, alive, params.top_k)
    apply_top_p(working, alive, params.top_p)
    apply_min_p(working, alive, params.min_p)
    return softmax_over(working, alive, params.temperature)


def _top_k_law(
    working: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], all_alive: bool, params: SamplingParams
) -> Probs:
    """Steps top-k .. softmax when 0 < k <= SPARSE_TOP_K and k < the number alive, on k survivors.

    After top-k every later step (top-p, min-p, temperature, softmax) reads only the survivors'
    logits and their id order, and writes zeros elsewhere. So the survivors, in ascending id order
    (an order-preserving relabelling: ties still break to the lower id), are a law problem of
    their own: the reference's helpers run on it unchanged, on the same values in the same order,
    and its probabilities are scattered back. Same bits as the full row.
    """
    survivors = np.sort(_top_k_pool(working, alive, all_alive, params.top_k))  # [k] ascending ids
    sub = working[survivors]  # [k]
    sub_alive = np.ones(survivors.shape[0], dtype=np.bool_)
    apply_top_p(sub, sub_alive, params.top_p)
    apply_min_p(sub, sub_alive, params.min_p)
    probs = np.zeros(working.shape[0], dtype=np.float64)  # [V]
    probs[survivors] = softmax_over(sub, sub_alive, params.temperature)
    return probs


def _top_k_pool(
    working: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], all_alive: bool, k: int
) -> npt.NDArray[np.intp]:
    """The reference's ``first_k(working, alive, k)``, run on a pool of the vocabulary.

    The k-th largest key of every POOL_STRIDE-th id is at most the k-th largest of all (a subset's
    k-th largest never exceeds the whole set's), so the ids whose key reaches it -- the pool --
    hold every id at or above the whole row's k-th largest, its ties included. ``first_k`` of
    the pool then finds that same k-th largest and the same ids; pool indices ascend with the ids,
    so its id-ascending tie rule is unchanged.
    """
    keys = working if all_alive else np.where(alive, working, -np.inf)  # [V]
    sample = keys[::POOL_STRIDE]
    if sample.shape[0] <= k:
        return first_k(working, alive, k)
    floor = np.partition(sample, sample.shape[0] - k)[sample.shape[0] - k]
    pool = np.flatnonzero(keys >= floor)  # ascending ids
    chosen: npt.NDArray[np.intp] = pool[first_k(working[pool], alive[pool], k)]
    return chosen


def sample_from(probs: Probs, u: float) -> int:
    """Same draw as :func:`reference.sampling.sample_from` (inverse CDF, same bits), faster."""
    row = np.asarray(probs, dtype=np.float64)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(f"probs must be a non-empty 1-D row [V], got shape {row.shape}")
    if not (0.0 <= u < 1.0):
        raise SamplingError(f"uniform must be in [0, 1), got {u!r}")
    if not np.all(np.isfinite(row)) or np.any(row < 0):
        raise SamplingError("probs must be finite and non-negative")
    support = np.flatnonzero(
        row > 0
    )  # ascending ids with positive weight (a boolean scan: faster than nonzero of floats)
    if support.size == 0:
        raise SamplingError("probs have zero total mass")
    # The draw over the support alone: adding the zeros between support ids changes no running
    # sum (x + 0.0 == x exactly), so this is the reference's draw on fewer entries, same bits.
    return int(support[inverse_cdf(row[support], u)])


def sample(probs: Probs, rng: np.random.Generator) -> int:
    """One ``rng.random()`` uniform, then :func:`sample_from` (the reference's protocol)."""
    return sample_from(probs, float(rng.random()))
