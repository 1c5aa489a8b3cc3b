"""The target law: ONE function turns a logits row and a history into the distribution we sample.

``target_distribution(logits, history, params)`` is the meaning of "what the model says" under a
sampling configuration. Plain decoding samples from it; speculative verification
(:mod:`reference.speculative`) must use exactly the same function at every position, with the
history including the drafts accepted so far. Anything that computes the law a second way is where
speculative decoders grow their bugs (see ``spec/mutants.py``).

Processor order: llama.cpp's default sampler chain (``common/sampling.cpp``: logit bias, then
penalties, top-k, top-p, min-p, temperature, dist), not Hugging Face's (temperature first, then
top-k/top-p). Why: verispec runs GGUF models and is checked against llama.cpp golden data, and its
``generate`` flags mirror llama.cpp's; a user moving a configuration from ``llama-cli`` must get the
same law. A side effect we like: the filters (top-k, top-p, min-p) act on the untempered logits, so
the *support* of the law does not depend on the temperature.

    1. logit bias        l[t] += bias[t]            (bias -inf bans a token; +inf and NaN are errors)
    2. repeat penalty    for each DISTINCT token t among the last ``repeat_last_n`` history ids:
                         l[t] = l[t] / r if l[t] > 0 else l[t] * r        (llama.cpp's rule)
                         (repeat_last_n = 0 disables it, -1 means the whole history)
    3. top-k             keep the k first tokens in the order (logit descending, id ascending);
                         k = 0 disables it. The id tie-break makes ties deterministic (llama.cpp's
                         partial sort leaves them unspecified).
    4. top-p             over the survivors, p = softmax(l) at temperature 1; in the same order, keep
                         the shortest prefix whose cumulative probability is >= top_p (at least one
                         token); top_p = 1 disables it.
    5. min-p             keep survivors with l[t] >= max(l) + log(min_p), i.e. p[t] >= min_p * p_max
                         at temperature 1; min_p = 0 disables it.
    6. temperature       l = (l - max(l)) / T on the survivors (shifted first: no overflow).
    7. softmax           exp and normalize over the survivors, zeros elsewhere.

Everything is computed in float64 whatever the dtype of the logits. Temperature 0 means greedy: the
law is one-hot at the argmax of the logits after steps 1-2 (steps 3-5 never remove that token), ties
broken by the lowest id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import SamplingError

FloatArray = npt.NDArray[np.floating[Any]]
Probs = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SamplingParams:
    """A sampling configuration (llama.cpp names and defaults; 0 / 1.0 values disable a filter)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    logit_bias: Mapping[int, float] | None = None

    def validate(self, vocab_size: int | None = None) -> None:
        """Raise :class:`SamplingError` (one line naming the value) if any parameter is invalid.

        ``vocab_size`` (when given) also bounds the token ids of ``logit_bias``.
        """
        if not is_real(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise SamplingError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not is_int(self.top_k) or self.top_k < 0:
            raise SamplingError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not is_real(self.top_p) or not (0.0 < self.top_p <= 1.0):
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not is_real(self.min_p) or not (0.0 <= self.min_p <= 1.0):
            raise SamplingError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if not is_real(self.repeat_penalty) or not math.isfinite(self.repeat_penalty) or self.repeat_penalty <= 0:
            raise SamplingError(f"repeat_penalty must be a finite number > 0, got {self.repeat_penalty!r}")
        if not is_int(self.repeat_last_n) or self.repeat_last_n < -1:
            raise SamplingError(
                f"repeat_last_n must be an integer >= -1 (-1 = whole history), got {self.repeat_last_n!r}"
            )
        for token, bias in (self.logit_bias or {}).items():
            if not is_int(token) or token < 0 or (vocab_size is not None and token >= vocab_size):
                bound = f" < vocab size {vocab_size}" if vocab_size is not None else ""
                raise SamplingError(f"logit_bias token id must be an integer >= 0{bound}, got {token!r}")
            if not is_real(bias) or math.isnan(bias) or bias == math.inf:
                raise SamplingError(f"logit_bias[{token}] must be finite or -inf, got {bias!r}")

    @property
    def greedy(self) -> bool:
        """True when the law is the one-hot argmax (temperature 0)."""
        return self.temperature == 0


def is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


# -----------------------------------------------------------------------------------------------
# input checks


def check_logits(logits: FloatArray) -> npt.NDArray[np.float64]:
    """Return the logits row as float64 [V]; SamplingError on a bad shape or a non-finite value."""
    row = np.asarray(logits)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(f"logits must be a non-empty 1-D row [V], got shape {row.shape}")
    if not np.issubdtype(row.dtype, np.floating) and not np.issubdtype(row.dtype, np.integer):
        raise SamplingError(f"logits must be numeric, got dtype {row.dtype}")
    row64 = np.asarray(row, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(row64))
    if bad.size:
        raise SamplingError(f"logits contain a non-finite value ({row64[bad[0]]}) at token id {int(bad[0])}")
    return row64


def check_history(history: Sequence[int], vocab_size: int) -> None:
    if all(type(token) is int for token in history) and (
        len(history) == 0 or (min(history) >= 0 and max(history) < vocab_size)
    ):
        return  # plain ints in range (the common case, checked in C); otherwise find and name the first bad one
    for position, token in enumerate(history):
        if not is_int(token) or not (0 <= int(token) < vocab_size):
            raise SamplingError(f"history[{position}] = {token!r} is not a token id in [0, {vocab_size})")


# -----------------------------------------------------------------------------------------------
# the processors, one function each, in chain order. `alive` marks the surviving tokens.


def apply_logit_bias(logits: npt.NDArray[np.float64], bias: Mapping[int, float] | None) -> None:
    with np.errstate(over="ignore"):  # an overflow to +inf is reported by the caller
        for token, value in (bias or {}).items():
            logits[int(token)] += float(value)  # -inf bans the token


def apply_repeat_penalty(logits: npt.NDArray[np.float64], history: Sequence[int], penalty: float, last_n: int) -> None:
    if penalty == 1.0 or last_n == 0 or not history:
        return
    window = history if last_n == -1 else history[-last_n:]
    for token in sorted({int(t) for t in window}):  # each distinct token once, as llama.cpp does
        if logits[token] > 0:
            logits[token] /= penalty
        else:
            logits[token] *= penalty


def descending_order(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_]) -> npt.NDArray[np.intp]:
    """Surviving ids sorted by logit descending, then id ascending (deterministic ties)."""
    ids = np.flatnonzero(alive)
    keys = logits[ids]
    return ids[np.lexsort((ids, -keys))]


def softmax_over(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], temperature: float = 1.0) -> Probs:
    """softmax((l - max l) / T) over the surviving ids, zeros elsewhere. [V] -> [V]

    Shifting before dividing keeps every exponent <= 0, so no temperature overflows to NaN.
    """
    probs = np.zeros(logits.shape[0], dtype=np.float64)
    live = logits[alive]
    with np.errstate(over="ignore"):  # (l - max) / T may reach -inf: exp gives the 0 it means
        weights = np.exp((live - live.max()) / temperature)
    probs[alive] = weights / weights.sum()
    return probs


def first_k(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.intp]:
    """The first ``k`` ids of :func:`descending_order` (0 < k < number alive), without sorting all of them.

    Every one of them has a logit >= the k-th largest surviving logit (a partition finds it), and
    every survivor above it is among them; so sorting the survivors at or above it (the ties at the
    cut included) and taking k gives exactly the same ids as the full order.
    """
    keys = np.where(alive, logits, -np.inf)  # [V]; the k largest are survivors (k < number alive)
    keys.partition(keys.shape[0] - k)
    kth_largest = keys[keys.shape[0] - k]
    candidates = np.flatnonzero(alive & (logits >= kth_largest))
    first: npt.NDArray[np.intp] = candidates[np.lexsort((candidates, -logits[candidates]))][:k]
    return first


def apply_top_k(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], k: int) -> None:
    if k <= 0 or k >= int(alive.sum()):
        return
    keep = first_k(logits, alive, k)
    alive[:] = False
    alive[keep] = True


def apply_top_p(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], top_p: float) -> None:
    """Keep the shortest prefix of :func:`descending_order` whose cumulative probability is >= ``top_p``.

    The running sum is sequential (``np.cumsum``), so its value at a position depends only on the
    prefix before it: the order is sorted only as far as a prefix that reaches ``top_p`` (64 ids,
    then 4 times more each try, at most the whole order), and the cut is the one the whole order
    gives.
    """
    if top_p >= 1.0:
        return
    probs = softmax_over(logits, alive)
    n_alive = int(np.count_nonzero(alive))
    length = min(n_alive, 64)
    while True:
        prefix = descending_order(logits, alive) if length == n_alive else first_k(logits, alive, length)
        reached = np.flatnonzero(np.cumsum(probs[prefix]) >= top_p)
        if reached.size or length == n_alive:
            break
        length = min(n_alive, 4 * length)
    keep = int(reached[0]) + 1 if reached.size else n_alive
    alive[:] = False
    alive[prefix[:keep]] = True


def apply_min_p(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], min_p: float) -> None:
    if min_p <= 0.0:
        return
    threshold = float(logits[alive].max()) + math.log(min_p)
    alive &= logits >= threshold


# -----------------------------------------------------------------------------------------------
# the target law


def target_distribution(logits: FloatArray, history: Sequence[int], params: SamplingParams) -> Probs:
    """THE target law: logits row [V] + history -> probabilities [V] (float64, sums to 1).

    Applies the processors in the order of the module docstring. Greedy params (temperature 0)
    give the one-hot vector at the argmax of the biased, penalized logits (lowest id on ties).
    Raises :class:`SamplingError` for invalid params, NaN/inf logits, a history id outside
    [0, V), or an empty support (every token banned by -inf biases).
    """
    row = check_logits(logits)
    vocab_size = row.shape[0]
    params.validate(vocab_size)
    check_history(history, vocab_size)

    working = row.copy()  # [V]
    apply_logit_bias(working, params.logit_bias)
    apply_repeat_penalty(working, history, params.repeat_penalty, params.repeat_last_n)
    if np.any(working == np.inf):
        raise SamplingError(
            f"logit of token id {int(np.flatnonzero(working == np.inf)[0])} overflows to +inf after the bias"
        )
    alive = np.isfinite(working)  # [V] bool; -inf biases ban tokens
    if not alive.any():
        raise SamplingError("empty support: every token is banned by a -inf logit bias")

    if params.greedy:
        probs = np.zeros(vocab_size, dtype=np.float64)
        probs[greedy_token(np.where(alive, working, -np.inf))] = 1.0
        return probs

    apply_top_k(working, alive, params.top_k)
    apply_top_p(working, alive, params.top_p)
    apply_min_p(working, alive, params.min_p)
    return softmax_over(working, alive, params.temperature)


def target_distributions(logits: FloatArray, histories: Sequence[Sequence[int]], params: SamplingParams) -> Probs:
    """Row-wise :func:`target_distribution`: logits [T, V] with one history per row -> [T, V].

    Row t must be given the history that precedes its position (for speculative verification:
    the context plus the drafts accepted before that position).
    """
    rows = np.asarray(logits)
    if rows.ndim != 2:
        raise SamplingError(f"logits must be [T, V], got shape {rows.shape}")
    if len(histories) != rows.shape[0]:
        raise SamplingError(f"got {len(histories)} histories for {rows.shape[0]} logits rows")
    out = np.zeros(rows.shape, dtype=np.float64)  # [T, V]
    for t in range(rows.shape[0]):
        out[t] = target_distribution(rows[t], histories[t], params)
    return out


# -----------------------------------------------------------------------------------------------
# drawing from a law


def inverse_cdf(weights: Probs, u: float) -> int:
    """The protocol's final draw: the first id t (ascending) with ``u * total < cumsum[t]``.

    ``weights`` [V] are non-negative float64 (not necessarily normalized); ``cumsum`` is the
    left-to-right running sum in float64 (``np.cumsum``: sequential, not pairwise) and
    ``total = cumsum[V-1]`` (NOT ``np.sum``, whose pairwise rounding may differ). Preconditions
    (checked by the callers): total > 0 and 0 <= u < 1. Then the chosen id is always < V and has
    positive weight: u * total < total in float64 when total is a normal number, and a zero-weight
    id repeats the previous cumsum, so the first strict crossing is never at a zero weight. If no id
    crosses (possible only for a subnormal total, where u * total can round up to total), the draw
    is the largest id with positive weight (spec/protocol.md, "The verdict", ``draw(w, u)``).
    """
    return int(inverse_cdf_draws(weights, np.array([u], dtype=np.float64))[0])


def inverse_cdf_draws(
    weights: Probs, draws: Probs, cumulative: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.int64]:
    """THE definition of the draw: :func:`inverse_cdf` of one weight row [V] for J uniforms [J].

    Every production and spec copy of the draw calls this (or :func:`inverse_cdf_rows`, tested
    bit-identical to it); the running sum is computed once for all J uniforms. ``cumulative``: that
    running sum, ``np.cumsum(weights, dtype=np.float64)``, when the caller has already computed it
    (:func:`sample_from` checks its total first): the same array, so the same draw.
    """
    if cumulative is None:
        cumulative = np.cumsum(weights, dtype=np.float64)  # [V]
    chosen = np.searchsorted(cumulative, draws * float(cumulative[-1]), side="right").astype(np.int64)  # [J]
    overflow = chosen == cumulative.shape[0]  # only for a subnormal total
    if np.any(overflow):
        chosen[overflow] = largest_positive_id(weights)
    return chosen


def inverse_cdf_rows(weights: Probs, draws: Probs) -> npt.NDArray[np.int64]:
    """Vectorised :func:`inverse_cdf_draws`: one uniform per row, weights [M, V], draws [M] -> [M].

    Row m gives exactly ``inverse_cdf(weights[m], draws[m])`` (tests/test_one_draw.py checks it bit
    for bit, subnormal totals included): the running sum never decreases, so the count of
    ``cumsum[t] <= u * total`` is the index ``searchsorted(side="right")`` returns.
    """
    vocab = weights.shape[-1]
    cumulative = np.cumsum(weights, axis=1, dtype=np.float64)  # [M, V], left to right per row
    threshold = draws * cumulative[:, -1]  # [M]
    chosen = np.asarray(np.sum(cumulative <= threshold[:, None], axis=1), dtype=np.int64)  # [M]
    overflow = chosen == vocab  # only for a subnormal total
    for m in np.flatnonzero(overflow):  # rare: only rows with a subnormal total
        chosen[m] = largest_positive_id(weights[m])
    return chosen


def largest_positive_id(weights: Probs) -> int:
    """The subnormal fallback of the draw: the largest id t with ``weights[t] > 0`` (total > 0)."""
    return int(np.flatnonzero(np.asarray(weights) > 0)[-1])


def sample_from(probs: Probs, u: float) -> int:
    """Draw from ``probs`` [V] with one uniform ``u`` in [0, 1) by :func:`inverse_cdf`.

    ``probs`` must be finite and non-negative with a positive total (it need not sum exactly to 1:
    the draw normalizes by its own cumulative total). Raises :class:`SamplingError` otherwise.
    """
    row = np.asarray(probs, dtype=np.float64)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(f"probs must be a non-empty 1-D row [V], got shape {row.shape}")
    if not np.all(np.isfinite(row)) or np.any(row < 0):
        raise SamplingError("probs must be finite and non-negative")
    if not (0.0 <= u < 1.0):
        raise SamplingError(f"uniform must be in [0, 1), got {u!r}")
    cumulative = np.cumsum(row, dtype=np.float64)  # [V]: the total checked here and the draw's running sum
    if float(cumulative[-1]) <= 0.0:
        raise SamplingError("probs have zero total mass")
    return int(inverse_cdf_draws(row, np.array([u], dtype=np.float64), cumulative)[0])


def sample(probs: Probs, rng: np.random.Generator) -> int:
    """Draw one token from ``probs`` [V] with one ``rng.random()`` uniform (see :func:`sample_from`)."""
    return sample_from(probs, float(rng.random()))


def greedy_token(logits: FloatArray) -> int:
    """argmax of a logits (or probability) row [V], the lowest id on ties; SamplingError on NaN."""
    row = np.asarray(logits, dtype=np.float64)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(f"logits must be a non-empty 1-D row [V], got shape {row.shape}")
    if np.isnan(row).any():
        raise SamplingError(f"logits contain NaN at token id {int(np.flatnonzero(np.isnan(row))[0])}")
    return int(np.argmax(row))  # numpy returns the first maximum: lowest id
