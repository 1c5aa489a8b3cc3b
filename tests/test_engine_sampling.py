"""engine.sampling vs reference.sampling: the same law and the same draw, bit for bit.

Tolerance: none. ``array_equal`` on the probabilities (float64) and equality of sampled ids, on
random logits with many exact ties (small integer logits), every processor and combination.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.engine import sampling as fast
from verispec.reference import sampling as ref
from verispec.reference.errors import SamplingError
from verispec.reference.sampling import SamplingParams


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, list[int], SamplingParams]:
    vocab = draw(st.integers(2, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        logits = rng.integers(-4, 4, size=vocab).astype(np.float32)  # many exact ties
    else:
        logits = (rng.standard_normal(vocab) * draw(st.sampled_from([0.1, 1.0, 10.0]))).astype(np.float32)
    history = [int(t) for t in rng.integers(0, vocab, size=draw(st.integers(0, 80)))]
    bias = None
    if draw(st.booleans()):
        banned = [int(t) for t in rng.integers(0, vocab, size=min(3, vocab - 1))]
        bias = {t: -np.inf for t in banned} | {int(rng.integers(0, vocab)): 1.5}
    params = SamplingParams(
        temperature=draw(st.sampled_from([0.0, 0.3, 0.8, 1.0, 2.0])),
        top_k=draw(st.sampled_from([0, 1, 2, 5, 40, 1000])),
        top_p=draw(st.sampled_from([1.0, 0.95, 0.5, 0.01])),
        min_p=draw(st.sampled_from([0.0, 0.05, 0.5])),
        repeat_penalty=draw(st.sampled_from([1.0, 1.1, 0.8])),
        repeat_last_n=draw(st.sampled_from([64, 0, -1, 3])),
        logit_bias=bias,
    )
    return logits, history, params


@settings(max_examples=examples(300), deadline=None)
@given(cases(), st.floats(0.0, 1.0, exclude_max=True))
def test_target_law_and_draw_bit_identical(case: tuple[np.ndarray, list[int], SamplingParams], u: float) -> None:
    logits, history, params = case
    try:
        want = ref.target_distribution(logits, history, params)
    except SamplingError as exc:
        with pytest.raises(SamplingError, match=re.escape(str(exc))):
            fast.target_distribution(logits, history, params)
        return
    got = fast.target_distribution(logits, history, params)
    np.testing.assert_array_equal(got, want)
    assert fast.sample_from(got, u) == ref.sample_from(want, u)


def test_top_k_ties_keep_the_lowest_ids() -> None:
    logits = np.array([1.0, 3.0, 3.0, 3.0, 0.0, 3.0], dtype=np.float32)
    params = SamplingParams(top_k=2)
    got = fast.target_distribution(logits, [], params)
    assert list(np.flatnonzero(got)) == [1, 2]
    np.testing.assert_array_equal(got, ref.target_distribution(logits, [], params))


def test_draw_edges_as_reference() -> None:
    probs = np.array([0.0, 0.25, 0.0, 0.75, 0.0])
    for u in [0.0, 0.2499999, 0.25, 0.9999999999]:
        assert fast.sample_from(probs, u) == ref.sample_from(probs, u)
    tiny = np.array([0.0, 5e-324, 5e-324, 0.0])  # subnormal total: the fallback branch
    assert fast.sample_from(tiny, 0.9999999) == ref.sample_from(tiny, 0.9999999)
    for bad in (np.zeros(3), np.array([0.5, np.nan]), np.array([-0.1, 1.0])):
        with pytest.raises(SamplingError):
            fast.sample_from(bad, 0.5)
    with pytest.raises(SamplingError, match="uniform"):
        fast.sample_from(probs, 1.0)
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    assert [fast.sample(probs, rng_a) for _ in range(20)] == [ref.sample(probs, rng_b) for _ in range(20)]


def _large_vocabulary_cases() -> list[tuple[np.ndarray, list[int], SamplingParams]]:
    """Rows of a real vocabulary's size, where the small-top-k path pools the vocabulary:
    ties at the cut (integer logits), penalised history ids moving across the cut, and -inf
    biases on every POOL_STRIDE-th id (the pool's sample all banned: the pool is the whole row)."""
    rng = np.random.default_rng(7)
    vocab = 49152
    out = []
    for trial in range(24):
        if trial % 2:
            logits = rng.integers(-6, 6, size=vocab).astype(np.float32)
        else:
            logits = (rng.standard_normal(vocab) * 3).astype(np.float32)
        top = [int(t) for t in np.argsort(-logits, kind="stable")[:8]]
        history = top[: trial % 5] + [int(t) for t in rng.integers(0, vocab, size=40)]
        bias: dict[int, float] | None = None
        if trial % 3 == 1:
            bias = {int(t): -np.inf for t in range(0, vocab, fast.POOL_STRIDE)}
        elif trial % 3 == 2:
            bias = {top[0]: -np.inf, top[1]: 2.0}
        params = SamplingParams(
            temperature=[1.0, 0.7, 2.0][trial % 3],
            top_k=[1, 4, 40, fast.SPARSE_TOP_K][trial % 4],
            top_p=[1.0, 0.9, 0.3][trial % 3],
            min_p=[0.0, 0.05][trial % 2],
            repeat_penalty=[1.5, 1.0, 0.8][trial % 3],
            logit_bias=bias,
        )
        out.append((logits, history, params))
    return out


@pytest.mark.parametrize("case", _large_vocabulary_cases())
def test_small_top_k_path_bit_identical_on_a_full_vocabulary(
    case: tuple[np.ndarray, list[int], SamplingParams],
) -> None:
    logits, history, params = case
    want = ref.target_distribution(logits, history, params)
    got = fast.target_distribution(logits, history, params)
    np.testing.assert_array_equal(got, want)
    assert fast.sample_from(got, 0.6180339887) == ref.sample_from(want, 0.6180339887)


def test_small_top_k_path_pool_exactly_k_alive() -> None:
    """The pool can hold exactly k live ids (all others banned): they are the law's support."""
    vocab = 4096
    logits = np.zeros(vocab, dtype=np.float32)
    keep = [3, 700, 701, 4000]
    bias = {t: -np.inf for t in range(vocab) if t not in keep + [9]}
    params = SamplingParams(top_k=4, logit_bias=bias)
    got = fast.target_distribution(logits, [], params)
    np.testing.assert_array_equal(got, ref.target_distribution(logits, [], params))
    assert list(np.flatnonzero(got)) == [3, 9, 700, 701]  # five live ids, all tied at 0: the four lowest


def test_the_law_does_not_write_into_a_float64_row() -> None:
    row = np.linspace(-3.0, 3.0, 5000)
    before = row.copy()
    fast.target_distribution(row, [4999, 4998], SamplingParams(top_k=4, repeat_penalty=1.5))
    fast.target_distribution(row, [4999, 4998], SamplingParams(top_k=0, repeat_penalty=1.5))
    np.testing.assert_array_equal(row, before)
