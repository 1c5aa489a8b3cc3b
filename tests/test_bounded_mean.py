"""The betting bound on a mean of [0, 1] losses: coverage and level checked EXACTLY.

No simulation (and so no share of the suite's alpha budget): for small samples from discrete
distributions on [0, 1] every sequence is enumerated with its probability, and the exact
probability that the bound misses the true mean (or that the test rejects a true H0) must be at
most delta. The only float slack is the rounding of that sum of products: at most (terms x n
multiplications + terms additions) half-ulps of numbers <= 1, so 1e-12 covers 3^7 terms by far.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import pytest

from lab.bounded_mean import p_value_above, upper_bound

# Float64 slack of exact_probability: each term is a product of n <= 9 probabilities (relative
# error <= n u, u = 2^-53), and at most 3^6 = 729 terms (2^9 = 512 for two-point laws) are summed
# into a total <= 1, so |error| <= (n + terms) u <= 738 * 1.1e-16 ~ 8e-14; 1e-12 covers it.
ROUNDING = 1e-12


def exact_probability(support: list[float], probs: list[float], n: int, event: object) -> float:
    """P(event(sample)) for n i.i.d. draws from the discrete law (support, probs), by enumeration."""
    total = 0.0
    for idx in itertools.product(range(len(support)), repeat=n):
        if event([support[i] for i in idx]):  # type: ignore[operator]
            total += math.prod(probs[i] for i in idx)
    return total


LAWS = [
    ([0.0, 1.0], [0.9, 0.1]),  # Bernoulli(0.1): the worst case for a mean-only bound
    ([0.0, 1.0], [0.7, 0.3]),
    ([0.0, 0.25, 1.0], [0.6, 0.3, 0.1]),  # mean 0.175, flip-fraction-like: many zeros, a few partial
    ([0.0, 0.5, 1.0], [0.2, 0.6, 0.2]),
]


def _at_true_mean(support: list[float], probs: list[float], event: Callable[[Sequence[float], float], bool]) -> float:
    """P(event(xs, true mean)), exactly, over every sequence of n draws from the law (n = 9 for two
    support points, 6 for three: 512 or 729 sequences)."""
    mean = sum(s * p for s, p in zip(support, probs))
    n = 9 if len(support) == 2 else 6
    return exact_probability(support, probs, n, lambda xs: event(xs, mean))


@pytest.mark.parametrize("support,probs", LAWS)
@pytest.mark.parametrize("delta", [0.1, 0.3])
def test_upper_bound_covers_the_mean_with_probability_at_least_one_minus_delta(
    support: list[float],
    probs: list[float],
    delta: float,
) -> None:
    miss = _at_true_mean(support, probs, lambda xs, mean: upper_bound(xs, delta) < mean)
    assert miss <= delta + ROUNDING, (miss, delta)


@pytest.mark.parametrize("support,probs", LAWS)
@pytest.mark.parametrize("delta", [0.1, 0.3])
def test_the_test_of_mean_at_most_its_true_mean_rejects_with_probability_at_most_delta(
    support: list[float],
    probs: list[float],
    delta: float,
) -> None:
    reject = _at_true_mean(support, probs, lambda xs, mean: p_value_above(xs, mean, delta) <= delta)
    assert reject <= delta + ROUNDING, (reject, delta)


def test_the_bound_is_not_vacuous_and_uses_the_small_variance() -> None:
    # 30 flip fractions of mean 0.117 (near the alphas used) and small spread: the bound beats
    # Hoeffding's mean + sqrt(log(1/d)/2n) and the exact Clopper-Pearson bound for one drawn Bernoulli
    # step per prompt with the same mean (near a mean of 0 the drawn-step bound is the tighter one)
    xs = [0.1, 0.15, 0.05, 0.1, 0.2, 0.1] * 5
    mean, delta = sum(xs) / len(xs), 0.05
    hoeffding = mean + math.sqrt(math.log(1 / delta) / (2 * len(xs)))
    from scipy.stats import beta

    clopper_pearson = float(beta.ppf(1 - delta, round(mean * len(xs)) + 1, len(xs) - round(mean * len(xs))))
    bound = upper_bound(xs, delta)
    assert mean < bound < min(hoeffding, clopper_pearson), (bound, hoeffding, clopper_pearson)
    # a sample far above 0.1 is rejected against the bound 0.1; one far below is not
    assert p_value_above([0.5, 0.3, 0.4, 0.6] * 8, 0.1) < 1e-3
    assert p_value_above([0.0, 0.1, 0.0, 0.05, 0.0, 0.1] * 5, 0.1) == 1.0


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="delta"):
        upper_bound([0.1], 0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        upper_bound([1.5], 0.05)
    with pytest.raises(ValueError, match="bound"):
        p_value_above([0.1], 1.0)
    assert upper_bound([], 0.05) == 1.0 and p_value_above([], 0.5) == 1.0
