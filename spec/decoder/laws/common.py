"""What every law profile shares: the :class:`Profile` object, the checks of a row and a history,
and the few ops two ecosystems define the same way (each op written once, used by every profile
that means it).

A profile is ONE function ``law(logits[V], prompt_ids, output_ids, params) -> probs[V]`` (float64,
sums to 1) with its ecosystem's typed params. ``output_ids`` are the tokens generated so far; the
profile decides which history each op sees (the prompt, the output, a window of either).

Shared ops (the chain of each profile says where, and on which logits, it runs them):

    repetition (set)     for each DISTINCT token t of a history: l[t] = l[t] / r if l[t] > 0 else
                         l[t] * r (llama.cpp, transformers and vLLM agree; l = 0 stays 0 either way)
                         -- :func:`reference.sampling.apply_repeat_penalty`, the one copy
    counts               l[t] -= count(t) * frequency + [count(t) > 0] * presence over a history
                         (llama.cpp over its window, vLLM over the output; the OpenAI definition)
    top-k (ties kept)    remove l[t] < (the k-th largest l): every token tied with the k-th stays
                         (transformers' TopKLogitsWarper, vLLM's apply_top_k_top_p)
    top-p (ascending)    sort ascending (logit, then id: the libraries' torch.sort leaves ties
                         unspecified), p = softmax of the survivors, remove the prefix whose
                         running sum is <= 1 - top_p, never the last ``min_keep`` (transformers'
                         TopPLogitsWarper, vLLM's apply_top_k_top_p)
    min-p (relative)     remove p[t] < min_p * max(p), p = softmax of the survivors (transformers'
                         MinPLogitsWarper, vLLM's MinPLogitsProcessor)
    end-of-generation    l[e] = -inf for the given ids (min_tokens / min_new_tokens)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import SamplingError
from verispec.reference.sampling import FloatArray, Probs, SamplingParams, check_history, check_logits, is_int, is_real

F64 = npt.NDArray[np.float64]
Alive = npt.NDArray[np.bool_]


class LawParams(Protocol):
    """An ecosystem's params: validated, and written to the wire with every field present."""

    def validate(self, vocab_size: int | None = None) -> None: ...

    def to_json(self) -> dict[str, Any]: ...

    def legacy(self) -> SamplingParams:
        """The nearest llama.cpp-order :class:`SamplingParams`, for an engine that reads only those."""
        ...


LawFunction = Callable[[FloatArray, Sequence[int], Sequence[int], Any], Probs]


@dataclass(frozen=True)
class Profile:
    """One ecosystem's target law with its params bound: ``profile(logits, prompt_ids, output_ids)``."""

    name: str
    params: Any  # the profile module's Params
    law: LawFunction

    def __call__(self, logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> Probs:
        return self.law(logits, prompt_ids, output_ids, self.params)

    def to_json(self) -> dict[str, Any]:
        """The wire form: ``{"name": ..., "params": {...}}`` (spec/protocol.md, "The law profile")."""
        return {"name": self.name, "params": self.params.to_json()}

    @property
    def legacy(self) -> SamplingParams:
        return self.params.legacy()  # type: ignore[no-any-return]


# -----------------------------------------------------------------------------------------------
# checks


def checked_row(logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> F64:
    """The logits row as a float64 copy [V]; SamplingError on a bad row or an id outside [0, V)."""
    row = check_logits(logits).copy()
    check_history(list(prompt_ids) + list(output_ids), row.shape[0])
    return row


def require(ok: bool, message: str) -> None:
    if not ok:
        raise SamplingError(message)


def check_real(
    name: str, value: object, low: float, high: float, low_open: bool = False, high_open: bool = False
) -> None:
    """A finite real in [low, high] (an end open when told); SamplingError naming ``name``."""
    real = is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    number = float(value) if real else math.nan  # type: ignore[arg-type]
    above = number > low if low_open else number >= low
    below = number < high if high_open else number <= high
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    require(real and above and below, f"{name} must be a finite number in {left}{low}, {high}{right}, got {value!r}")


def check_int(name: str, value: object, low: int) -> None:
    require(is_int(value) and int(value) >= low, f"{name} must be an integer >= {low}, got {value!r}")  # type: ignore[call-overload]


def check_ids(name: str, ids: Collection[int], vocab_size: int | None) -> None:
    for token in ids:
        bound = vocab_size if vocab_size is not None else math.inf
        require(is_int(token) and 0 <= int(token) < bound, f"{name} holds {token!r}, not a token id")


def check_bias(bias: Mapping[int, float] | None, vocab_size: int | None) -> None:
    """The llama.cpp-order check of a logit bias (finite or -inf, ids in range): one rule for all."""
    SamplingParams(logit_bias=bias).validate(vocab_size)


def bias_json(bias: Mapping[int, float] | None) -> list[list[Any]]:
    return [[int(t), "-inf" if b == -math.inf else float(b)] for t, b in sorted((bias or {}).items())]


def bias_from_json(pairs: Sequence[Sequence[Any]] | None) -> dict[int, float]:
    return {int(t): (-math.inf if b == "-inf" else float(b)) for t, b in (pairs or [])}


# -----------------------------------------------------------------------------------------------
# the shared ops


def apply_counts(logits: F64, history: Sequence[int], frequency: float, presence: float) -> None:
    """l[t] -= count(t) * frequency + [count(t) > 0] * presence over ``history``."""
    if frequency == 0.0 and presence == 0.0:
        return
    for token, count in Counter(int(t) for t in history).items():
        logits[token] -= count * frequency + presence


def ban(logits: F64, ids: Collection[int]) -> None:
    """l[e] = -inf for each id of ``ids`` inside the vocabulary (min_tokens: end-of-generation)."""
    for token in ids:
        if 0 <= int(token) < logits.shape[0]:
            logits[int(token)] = -math.inf


def alive_of(logits: F64) -> Alive:
    """The finite entries; SamplingError when a bias overflowed to +inf or nothing is left."""
    if np.any(logits == np.inf):
        raise SamplingError(f"logit of token id {int(np.flatnonzero(logits == np.inf)[0])} overflows to +inf")
    alive = np.isfinite(logits)
    require(bool(alive.any()), "empty support: every token is banned")
    return alive


def one_hot_argmax(logits: F64, alive: Alive) -> Probs:
    """The greedy law: one-hot at the largest surviving logit, the lowest id on ties."""
    from verispec.reference.sampling import greedy_token

    probs = np.zeros(logits.shape[0], dtype=np.float64)
    probs[greedy_token(np.where(alive, logits, -np.inf))] = 1.0
    return probs


def top_k_keep_ties(logits: F64, alive: Alive, k: int) -> None:
    """Remove every survivor below the k-th largest surviving logit (ties with it stay)."""
    live = logits[alive]
    if k <= 0 or k >= live.shape[0]:
        return
    kth = float(np.sort(live)[::-1][k - 1])
    alive &= logits >= kth


def ascending(logits: F64, alive: Alive) -> npt.NDArray[np.intp]:
    """Surviving ids sorted by logit ascending, then id ascending (a stable ascending sort)."""
    ids = np.flatnonzero(alive)
    return ids[np.lexsort((ids, logits[ids]))]


def softmax_alive(logits: F64, alive: Alive) -> Probs:
    """softmax at temperature 1 over the survivors (reference.sampling's one softmax)."""
    from verispec.reference.sampling import softmax_over

    return softmax_over(logits, alive)


def top_p_ascending(logits: F64, alive: Alive, top_p: float, min_keep: int = 1) -> None:
    """Remove the ascending prefix whose running probability is <= 1 - top_p (never the last
    ``min_keep`` of the order, the most likely)."""
    if top_p >= 1.0:
        return
    order = ascending(logits, alive)
    cumulative = np.cumsum(softmax_alive(logits, alive)[order])
    remove = cumulative <= 1.0 - top_p
    remove[max(order.shape[0] - min_keep, 0) :] = False
    alive[order[remove]] = False


def min_p_relative(logits: F64, alive: Alive, min_p: float, min_keep: int = 1) -> None:
    """Remove p[t] < min_p * max p over the survivors (the ``min_keep`` most likely stay)."""
    if min_p <= 0.0:
        return
    probs = softmax_alive(logits, alive)
    keep = probs >= min_p * float(probs.max())
    order = np.lexsort((np.arange(probs.shape[0]), -probs))[:min_keep]
    keep[order] = True
    alive &= keep
