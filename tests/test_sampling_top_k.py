"""The partition top-k and prefix top-p of reference.sampling are the full sort's, bit for bit.

The law defines top-k as the k first ids in the order (logit descending, id ascending);
``first_k`` finds them with a partition and sorts only the candidates at or above the k-th
value; top-p sorts only a prefix long enough to reach top_p. Tolerance: none. ``array_equal`` on
the ids and on the whole law (float64) against the full-sort formulation, on rows of both real
vocabulary sizes (SmolLM2 49,152, Gemma-3 262,144) and small ones, with many exact ties at the
cut (integer logits), -inf biases, every processor.
Also the depth test's PIT mass over the support equals the same sums over the full row.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from verispec.reference import sampling as ref
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import pit_mass_before

VOCABS = (7, 300, 49_152, 262_144)


def full_sort_top_k(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], k: int) -> None:
    """The definition read literally: sort every survivor, drop all after the k-th."""
    if k <= 0 or k >= int(alive.sum()):
        return
    alive[ref.descending_order(logits, alive)[k:]] = False


def full_sort_top_p(logits: npt.NDArray[np.float64], alive: npt.NDArray[np.bool_], top_p: float) -> None:
    """The definition read literally: the cumulative sum over the whole sorted order."""
    if top_p >= 1.0:
        return
    order = ref.descending_order(logits, alive)
    cumulative = np.cumsum(ref.softmax_over(logits, alive)[order])
    reached = np.flatnonzero(cumulative >= top_p)
    keep = int(reached[0]) + 1 if reached.size else order.shape[0]
    alive[order[keep:]] = False


def full_sort_law(
    logits: npt.NDArray[np.float64], history: list[int], params: SamplingParams, monkeypatch: pytest.MonkeyPatch
) -> npt.NDArray[np.float64]:
    with monkeypatch.context() as patched:
        patched.setattr(ref, "apply_top_k", full_sort_top_k)
        patched.setattr(ref, "apply_top_p", full_sort_top_p)
        return ref.target_distribution(logits, history, params)


def row(rng: np.random.Generator, vocab: int, tied: bool) -> npt.NDArray[np.float64]:
    if tied:  # few distinct values: ties at every cut
        return rng.integers(-3, 3, size=vocab).astype(np.float64)
    return (rng.standard_normal(vocab) * 3.0).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("tied", [True, False])
def test_first_k_is_the_sorted_prefix(vocab: int, tied: bool) -> None:
    rng = np.random.default_rng(vocab + tied)
    for k in (1, 2, 4, 40, vocab - 1):
        logits = row(rng, vocab, tied)
        alive = rng.random(vocab) > 0.1  # some ids banned (a -inf bias)
        alive[int(rng.integers(vocab))] = True
        logits[~alive] = -math.inf
        if k >= int(alive.sum()):
            continue
        assert np.array_equal(ref.first_k(logits, alive, k), ref.descending_order(logits, alive)[:k])


@pytest.mark.parametrize("vocab", VOCABS)
def test_law_equals_the_full_sort_law(vocab: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1000 + vocab)
    settings = [
        SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5),
        SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repeat_penalty=1.3, repeat_last_n=-1),
        SamplingParams(temperature=1.3, top_k=1, top_p=0.5),
        SamplingParams(temperature=1.0, top_k=vocab - 1, min_p=0.2),
        SamplingParams(temperature=0.0, top_k=3),
        SamplingParams(temperature=1.0, top_p=0.9, repeat_penalty=1.5),  # top-p over the whole vocabulary
        SamplingParams(temperature=1.0, top_p=0.999999),  # a prefix longer than the first tries
        SamplingParams(temperature=0.5, top_p=0.3, min_p=0.01),
    ]
    for params in settings:
        for tied in (True, False):
            logits = row(rng, vocab, tied)
            history = [int(t) for t in rng.integers(0, vocab, size=70)]
            banned = {int(t): -math.inf for t in rng.integers(0, vocab, size=min(5, vocab - 2))}
            biased = SamplingParams(**{**params.__dict__, "logit_bias": banned | {int(history[-1]): 2.0}})
            for p in (params, biased):
                fast = ref.target_distribution(logits, history, p)
                assert np.array_equal(fast, full_sort_law(logits, history, p, monkeypatch))


@pytest.mark.parametrize("vocab", (300, 49_152))
def test_pit_mass_over_the_support_is_the_full_rows(vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    ids_all = np.arange(vocab)
    for _ in range(20):
        logits = rng.integers(-2, 2, size=vocab).astype(np.float64)  # equal probabilities: the id tie-break matters
        p = ref.target_distribution(logits, [], SamplingParams(top_k=int(rng.integers(1, 60))))
        support = np.flatnonzero(p > 0)
        x = int(rng.choice(support))
        px = float(p[x])
        full = float(p[p > px].sum() + p[(p == px) & (ids_all < x)].sum())
        assert pit_mass_before(p[support], support, px, x) == full
