"""The target law (reference/sampling.py): processors, their order, validation, draws.

Expected values are computed by hand (math.exp on the few surviving logits), never by the code
under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference.errors import SamplingError
from verispec.reference.sampling import (
    SamplingParams,
    greedy_token,
    inverse_cdf,
    sample,
    sample_from,
    target_distribution,
    target_distributions,
)


def softmax_of(values: dict[int, float], vocab: int) -> list[float]:
    """Hand softmax over the given ids (zeros elsewhere)."""
    top = max(values.values())
    weights = {t: math.exp(v - top) for t, v in values.items()}
    total = sum(weights.values())
    return [weights.get(t, 0.0) / total for t in range(vocab)]


LOGITS = np.array([1.0, 3.0, 2.0, 0.5, -1.0], dtype=np.float32)
# rtol=1e-12 below, derived: the law and softmax_of are both float64 (u = 2^-53) over V = 5 logits
# (float32 logits convert exactly): a shift, a temperature or penalty division, exp (a few ulp, plus
# |x| u for an argument |x| <= 16), a 5-term sum and a division give a relative error below
# (4 + 16 + 5 + 3) u = 3.1e-15 per path; 1e-12 is 100x above both paths' sum, and an O(1) law
# error (a wrong filter, temperature or penalty) moves a probability by > 1e-3.


def test_plain_softmax() -> None:
    got = target_distribution(LOGITS, [], SamplingParams())
    want = softmax_of({t: float(v) for t, v in enumerate(LOGITS)}, 5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.dtype == np.float64


def test_temperature_scales_logits() -> None:
    got = target_distribution(LOGITS, [], SamplingParams(temperature=0.5))
    np.testing.assert_allclose(got, softmax_of({t: float(v) / 0.5 for t, v in enumerate(LOGITS)}, 5), rtol=1e-12)


def test_top_k_keeps_k_largest() -> None:
    got = target_distribution(LOGITS, [], SamplingParams(top_k=2))
    np.testing.assert_allclose(got, softmax_of({1: 3.0, 2: 2.0}, 5), rtol=1e-12)


def test_top_k_ties_keep_lowest_ids() -> None:
    logits = np.array([0.0, 2.0, 2.0, 2.0])
    got = target_distribution(logits, [], SamplingParams(top_k=2))
    np.testing.assert_allclose(got, [0.0, 0.5, 0.5, 0.0])


def test_top_p_keeps_shortest_prefix_reaching_p() -> None:
    # p = softmax(LOGITS) ~ [0.0844, 0.6236, 0.2294, 0.0512, 0.0114]; 0.6236 < 0.8 <= 0.6236 + 0.2294
    got = target_distribution(LOGITS, [], SamplingParams(top_p=0.8))
    np.testing.assert_allclose(got, softmax_of({1: 3.0, 2: 2.0}, 5), rtol=1e-12)
    only_top = target_distribution(LOGITS, [], SamplingParams(top_p=0.5))
    np.testing.assert_allclose(only_top, [0, 1, 0, 0, 0])


def test_top_p_exact_boundary_is_inclusive() -> None:
    # two equal logits: cumulative 0.5 reaches top_p = 0.5 exactly after one token
    got = target_distribution(np.array([0.0, 0.0]), [], SamplingParams(top_p=0.5))
    np.testing.assert_allclose(got, [1.0, 0.0])


def test_min_p_relative_to_max() -> None:
    # p_t / p_max = exp(l_t - 3): id 2 -> e^-1 = 0.368 (kept at min_p 0.3), id 0 -> e^-2 = 0.135 (dropped)
    got = target_distribution(LOGITS, [], SamplingParams(min_p=0.3))
    np.testing.assert_allclose(got, softmax_of({1: 3.0, 2: 2.0}, 5), rtol=1e-12)
    ties = target_distribution(np.array([1.0, 1.0, 0.0]), [], SamplingParams(min_p=1.0))
    np.testing.assert_allclose(ties, [0.5, 0.5, 0.0])


def test_filters_act_before_temperature() -> None:
    # llama.cpp order: top-p on temperature-1 probabilities, then temperature on the survivors
    got = target_distribution(LOGITS, [], SamplingParams(top_p=0.8, temperature=2.0))
    np.testing.assert_allclose(got, softmax_of({1: 1.5, 2: 1.0}, 5), rtol=1e-12)


def test_repeat_penalty_llama_rule() -> None:
    # positive logit divided, non-positive multiplied; each distinct token once; window = last n
    params = SamplingParams(repeat_penalty=2.0, repeat_last_n=3)
    got = target_distribution(LOGITS, [3, 1, 1, 4], params)  # window [1, 1, 4]: id 3 is outside
    want = softmax_of({0: 1.0, 1: 1.5, 2: 2.0, 3: 0.5, 4: -2.0}, 5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    whole = target_distribution(LOGITS, [3, 1], SamplingParams(repeat_penalty=2.0, repeat_last_n=-1))
    np.testing.assert_allclose(whole, softmax_of({0: 1.0, 1: 1.5, 2: 2.0, 3: 0.25, 4: -1.0}, 5), rtol=1e-12)
    off = target_distribution(LOGITS, [1], SamplingParams(repeat_penalty=2.0, repeat_last_n=0))
    np.testing.assert_allclose(off, target_distribution(LOGITS, [], SamplingParams()), rtol=0)


def test_logit_bias_adds_and_bans() -> None:
    got = target_distribution(LOGITS, [], SamplingParams(logit_bias={0: 2.5, 1: -math.inf}))
    np.testing.assert_allclose(got, softmax_of({0: 3.5, 2: 2.0, 3: 0.5, 4: -1.0}, 5), rtol=1e-12)


def test_bias_then_penalty_then_top_k() -> None:
    # bias lifts id 4 to 4.0, the penalty halves it to 2.0, top-2 keeps {1: 3.0, 2: 2.0} (id 2 < 4)
    params = SamplingParams(logit_bias={4: 5.0}, repeat_penalty=2.0, top_k=2)
    got = target_distribution(LOGITS, [4], params)
    np.testing.assert_allclose(got, softmax_of({1: 3.0, 2: 2.0}, 5), rtol=1e-12)


def test_greedy_is_one_hot_argmax_after_bias_and_penalty() -> None:
    got = target_distribution(LOGITS, [], SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(got, [0, 1, 0, 0, 0])
    penalized = target_distribution(LOGITS, [1], SamplingParams(temperature=0.0, repeat_penalty=2.0))
    np.testing.assert_array_equal(penalized, [0, 0, 1, 0, 0])  # 3.0 / 2 = 1.5 < 2.0
    ties = target_distribution(np.array([1.0, 5.0, 5.0]), [], SamplingParams(temperature=0.0))
    np.testing.assert_array_equal(ties, [0, 1, 0])
    banned = target_distribution(
        np.array([1.0, 5.0, 5.0]), [], SamplingParams(temperature=0.0, logit_bias={1: -math.inf})
    )
    np.testing.assert_array_equal(banned, [0, 0, 1])


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        (SamplingParams(temperature=-0.1), "temperature"),
        (SamplingParams(temperature=math.nan), "temperature"),
        (SamplingParams(temperature=math.inf), "temperature"),
        (SamplingParams(top_p=0.0), "top_p"),
        (SamplingParams(top_p=1.5), "top_p"),
        (SamplingParams(top_k=-1), "top_k"),
        (SamplingParams(min_p=-0.1), "min_p"),
        (SamplingParams(min_p=1.1), "min_p"),
        (SamplingParams(repeat_penalty=0.0), "repeat_penalty"),
        (SamplingParams(repeat_last_n=-2), "repeat_last_n"),
        (SamplingParams(logit_bias={9: 1.0}), "logit_bias"),
        (SamplingParams(logit_bias={0: math.inf}), "logit_bias"),
        (SamplingParams(logit_bias={0: math.nan}), "logit_bias"),
    ],
)
def test_invalid_params_are_one_line_errors(params: SamplingParams, needle: str) -> None:
    with pytest.raises(SamplingError, match=needle) as info:
        target_distribution(LOGITS, [], params)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_logits_name_the_id(bad: float) -> None:
    logits = LOGITS.astype(np.float64).copy()
    logits[3] = bad
    with pytest.raises(SamplingError, match="token id 3"):
        target_distribution(logits, [], SamplingParams())


def test_bad_history_and_shapes() -> None:
    with pytest.raises(SamplingError, match="history"):
        target_distribution(LOGITS, [5], SamplingParams())
    with pytest.raises(SamplingError, match="1-D"):
        target_distribution(np.zeros((2, 3)), [], SamplingParams())
    with pytest.raises(SamplingError, match="empty support"):
        target_distribution(np.zeros(2), [], SamplingParams(logit_bias={0: -math.inf, 1: -math.inf}))


def test_tiny_temperature_is_argmax_without_nan() -> None:
    got = target_distribution(np.array([1e10, 2e10, 0.0]), [], SamplingParams(temperature=1e-300))
    np.testing.assert_array_equal(got, [0.0, 1.0, 0.0])


def test_bias_overflow_is_an_error() -> None:
    with pytest.raises(SamplingError, match="token id 0 overflows"):
        target_distribution(np.array([1e308, 0.0]), [], SamplingParams(logit_bias={0: 1e308}))


def test_rows_form_uses_each_rows_history() -> None:
    logits = np.stack([LOGITS, LOGITS])
    params = SamplingParams(repeat_penalty=2.0)
    rows = target_distributions(logits, [[], [1]], params)
    np.testing.assert_array_equal(rows[0], target_distribution(LOGITS, [], params))
    np.testing.assert_array_equal(rows[1], target_distribution(LOGITS, [1], params))
    with pytest.raises(SamplingError, match="histories"):
        target_distributions(logits, [[]], params)


def test_inverse_cdf_exact_on_dyadic_rows() -> None:
    probs = np.array([0.0, 0.25, 0.0, 0.5, 0.25])
    # cells: id 1 [0, .25), id 3 [.25, .75), id 4 [.75, 1); a boundary belongs to the next id
    assert [sample_from(probs, u) for u in (0.0, 0.2499, 0.25, 0.7499, 0.75, 0.9999999)] == [1, 1, 3, 3, 4, 4]
    assert sample_from(probs, float(np.nextafter(1.0, 0.0))) == 4
    # unnormalized weights: the draw divides by its own running total
    assert inverse_cdf(np.array([0.0, 2.0, 6.0]), 0.25) == 2
    assert inverse_cdf(np.array([0.0, 2.0, 6.0]), 0.2499) == 1


def test_inverse_cdf_subnormal_total_stays_in_range() -> None:
    assert inverse_cdf(np.array([0.0, 5e-324, 0.0]), 0.9) == 1


@pytest.mark.parametrize("u", [-0.1, 1.0, math.nan])
def test_sample_from_rejects_bad_uniform(u: float) -> None:
    with pytest.raises(SamplingError, match="uniform"):
        sample_from(np.array([0.5, 0.5]), u)


def test_sample_from_rejects_bad_probs() -> None:
    with pytest.raises(SamplingError):
        sample_from(np.array([0.0, 0.0]), 0.5)
    with pytest.raises(SamplingError):
        sample_from(np.array([-0.5, 1.5]), 0.5)


def test_same_seed_same_tokens() -> None:
    probs = target_distribution(LOGITS, [], SamplingParams())
    first = [sample(probs, rng) for rng in [np.random.default_rng(7)] for _ in range(50)]
    second = [sample(probs, rng) for rng in [np.random.default_rng(7)] for _ in range(50)]
    assert first == second
    assert len(set(first)) > 1


def test_greedy_token_lowest_id_on_ties_and_nan() -> None:
    assert greedy_token(np.array([0.0, 2.0, 2.0])) == 1
    with pytest.raises(SamplingError, match="NaN at token id 1"):
        greedy_token(np.array([0.0, math.nan]))


@settings(max_examples=examples(200))
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
    top_k=st.integers(0, 13),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.01]),
    min_p=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    penalty=st.sampled_from([1.0, 0.5, 1.3]),
    history=st.lists(st.integers(0, 11), max_size=6),
)
def test_law_is_a_probability_vector_whose_support_holds_the_argmax(
    logits: list[float], temperature: float, top_k: int, top_p: float, min_p: float, penalty: float, history: list[int]
) -> None:
    row = np.array(logits)
    history = [t % len(logits) for t in history]
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=penalty)
    probs = target_distribution(row, history, params)
    assert probs.shape == row.shape and np.all(probs >= 0)
    assert abs(float(probs.sum()) - 1.0) < 1e-12
    greedy = target_distribution(row, history, SamplingParams(temperature=0.0, repeat_penalty=penalty))
    assert probs[int(np.argmax(greedy))] > 0  # the filters never remove the (penalized) argmax
