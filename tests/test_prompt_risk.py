"""Prompt-level conformal risk control, exactly: the threshold against its definition in Fractions.

The definition (reference.conformal, 3.): lambda^ = inf{lambda : (sum_i L_i(lambda) + 1)/(n+1) <=
alpha/K}, L_i(lambda) = #{t in prompt i : score_t > lambda, event_t} / T_i. Brute force: the loss is
a step function that only changes at the scores, so the infimum is -inf, +inf or one of the scores;
try them all in Fractions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference.conformal import min_prompts, prompt_losses, prompt_risk_threshold
from verispec.reference.errors import CalibrationError


def qualifies(scores: list[float], events: list[bool], prompts: list[int], lam: float, risk: Fraction) -> bool:
    n = max(prompts) + 1
    sizes = [prompts.count(i) for i in range(n)]
    total = sum((Fraction(1, sizes[p]) for s, e, p in zip(scores, events, prompts) if e and s > lam), Fraction(0))
    return (total + 1) / (n + 1) <= risk


def brute_threshold(scores: list[float], events: list[bool], prompts: list[int], risk: Fraction) -> float:
    for lam in [-math.inf] + sorted(set(scores)) + [math.inf]:
        if qualifies(scores, events, prompts, lam, risk):
            return lam
    return math.inf  # nothing qualifies, not even +inf (the budget is negative)


@st.composite
def calibration_sets(draw: st.DrawFn) -> tuple[list[float], list[bool], list[int]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=30))
    prompts = [i for i, size in enumerate(sizes) for _ in range(size)]
    scores = [float(draw(st.integers(0, 12))) / 2 for _ in prompts]  # ties on purpose
    events = [draw(st.booleans()) for _ in prompts]
    return scores, events, prompts


levels = st.integers(2, 400).flatmap(lambda b: st.builds(Fraction, st.integers(1, b - 1), st.just(b)))


@settings(max_examples=examples(400))
@given(data=calibration_sets(), alpha=levels, k=st.integers(1, 5))
def test_threshold_is_the_infimum_of_the_qualifying_lambdas(
    data: tuple[list[float], list[bool], list[int]], alpha: Fraction, k: int
) -> None:
    scores, events, prompts = data
    got = prompt_risk_threshold(np.asarray(scores, dtype=np.float32), np.asarray(events), np.asarray(prompts), alpha, k)
    assert got == brute_threshold(scores, events, prompts, alpha / k)
    n = max(prompts) + 1
    assert (got == math.inf) == (n < min_prompts(alpha, k))  # never admit iff the budget is negative
    if got != math.inf:  # the returned lambda qualifies: empirical prompt risk within the budget
        losses = prompt_losses(np.asarray(scores, dtype=np.float32), np.asarray(events), np.asarray(prompts), got)
        assert (sum(losses, Fraction(0)) + 1) / (n + 1) <= alpha / k


@settings(max_examples=examples(300))
@given(alpha=levels, k=st.integers(1, 20))
def test_min_prompts_is_the_least_n_with_a_nonnegative_budget(alpha: Fraction, k: int) -> None:
    m = min_prompts(alpha, k)
    assert (m + 1) * alpha / k >= 1  # proofs.conformal.min_prompts_iff
    assert m == 1 or m * alpha / k < 1
    assert min_prompts(str(alpha), k) == m


def test_a_long_prompt_weighs_as_much_as_a_short_one() -> None:
    """The exchangeable unit is the prompt: 99 flipped tokens of one prompt cost 1, not 99."""
    scores = np.asarray([5.0] * 99 + [1.0] * 9, dtype=np.float32)
    events = np.asarray([True] * 99 + [False] * 9)
    prompts = np.asarray([0] * 99 + list(range(1, 10)))  # n = 10 prompts
    # budget (n+1) alpha - 1 = 11 * 2/11 - 1 = 1: the whole first prompt (loss 1) fits
    assert prompt_risk_threshold(scores, events, prompts, Fraction(2, 11)) == -math.inf
    # at alpha = 1/10 the budget is 0.1: the flipped prompt must be refused (lambda = 5)
    assert prompt_risk_threshold(scores, events, prompts, Fraction(1, 10)) == 5.0
    assert min_prompts(Fraction(1, 10), 5) == 49 and min_prompts(Fraction(1, 100), 5) == 499
    assert prompt_risk_threshold(scores, events, prompts, Fraction(1, 20)) == math.inf  # n = 10 < 19


def test_bad_inputs_are_calibration_errors() -> None:
    ok = np.asarray([1.0, 2.0], dtype=np.float32)
    with pytest.raises(CalibrationError, match="prompt 1 has no tokens"):
        prompt_risk_threshold(ok, np.asarray([True, True]), np.asarray([0, 2]), "0.5")
    with pytest.raises(CalibrationError, match="bool array"):
        prompt_risk_threshold(ok, np.asarray([1, 0]), np.asarray([0, 1]), "0.5")
    with pytest.raises(CalibrationError, match="NaN"):
        prompt_risk_threshold(np.asarray([np.nan, 1.0]), np.asarray([True, True]), np.asarray([0, 1]), "0.5")
    with pytest.raises(CalibrationError, match="prompt indices"):
        prompt_risk_threshold(ok, np.asarray([True, True]), np.asarray([0.0, 1.0]), "0.5")
