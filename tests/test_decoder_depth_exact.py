"""The depth test's statistics are exact at any count (spec/decoder/depth/law.py, spec/decoder/depth/power.py).

The log score and the PIT histogram are test-martingales (level by Ville's inequality at any
count); the PIT mean stays a z-test because its null law is exactly Irwin-Hall's, whose tails lie
below the normal's at every level the test uses. These tests check each claim exactly or by
simulation with fixed seeds, and the false alarm a z-test of the log score raised: one correct
but unlikely token at an early look.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import (
    BinSums,
    DepthCase,
    Sums,
    histogram_log_evidence,
    judge_look,
    look_alphas,
    martingale_alpha,
    pit_chi_square,
    score,
    two_sided_p,
)
from verispec.spec.decoder.depth.power import SCORE_LAMBDAS, score_terms

UNIFORM_WEIGHTS = np.full(SCORE_LAMBDAS.shape[0], -math.log(SCORE_LAMBDAS.shape[0]))


def test_each_tempering_ratio_has_mean_one_for_any_row() -> None:
    """sum_y p(y) e^(l(lambda, y)) = 1 for every lambda: rows with p = 1e-30, one token, uniform.
    float64 log-sum-exp over <= 20 terms: relative error a few ulp, so 1e-12 is loose."""
    rows = [
        np.array([1.0]),
        np.array([1.0 - 2e-30, 1e-30, 1e-30]),
        np.full(20, 0.05),
        np.array([0.9, 0.09, 0.009, 0.000999, 1e-6]),
    ]
    for p in rows:
        terms = score_terms(p / p.sum())
        assert np.all(np.isfinite(terms))
        assert np.allclose(np.exp(terms) @ (p / p.sum()), 1.0, rtol=0, atol=1e-12)
    assert np.all(score_terms(np.array([1.0])) == 0.0)  # a one-token row is no evidence either way


def test_one_unlikely_correct_token_at_an_early_look_does_not_fail() -> None:
    """A sharp row (the top token 0.999, 100 tokens of 1e-5), the correct decoder draws one of the
    rare ones (probability 1e-3 a token: it happens) among 20 ordinary tokens, judged at the first
    look's level of a 1e-3 test. The log-score z is about -30 (two-sided p ~ 1e-190: the z-test
    would fail this decoder); the test-martingale's evidence is a few units, far from 1/alpha."""
    row = np.log(np.array([0.999] + [1e-5] * 100))
    the_case = DepthCase((1, 2), SamplingParams(temperature=1.0), max_tokens=21)
    ids = [0] * 20 + [7]
    scored = score(lambda seq, n: np.tile(row, (len(seq) - n, 1)), the_case, ids, np.random.default_rng(0))
    sums = Sums()
    sums.add(tuple(ids), scored, None, 0.0, frozenset())
    alpha = look_alphas(1e-3)[0]
    z = sums.overall.z_log()
    assert z < -6 and two_sided_p(z) < alpha / 8  # the z-test's rejection (alpha / 8: an overall test's share)
    assert sums.overall.score_log_evidence(UNIFORM_WEIGHTS) < math.log(10.0)
    look = judge_look(sums, alpha, the_case, martingale_alpha(1e-3))
    assert not look.rejected, look.where


def test_the_log_score_martingale_keeps_its_level_by_simulation() -> None:
    """Null: 40 tokens a run, each from its own random skewed row (probabilities down to ~1e-12,
    every 13th row of one token), the evidence judged after every token (any look). P(ever >=
    1/a) <= a = 0.05 (Ville); 4,000 runs, binomial sd 0.0034, so 0.067 (5 sd) fails only a
    martingale whose terms do not have mean 1. The runs are vectorized; the product's
    ``score_terms`` and ``score_rejects`` are checked equal to the vectorized ones on the way."""
    rng = np.random.default_rng(20261201)
    runs = 4000
    total = np.zeros((runs, SCORE_LAMBDAS.shape[0]))
    crossed = np.zeros(runs, dtype=bool)
    bar = -math.log(0.05)
    for t in range(40):
        size = 1 if t % 13 == 0 else int(rng.integers(2, 12))
        p = np.exp(-rng.exponential(6.0, (runs, size)))
        p /= p.sum(axis=1, keepdims=True)
        x = (rng.random((runs, 1)) > np.cumsum(p, axis=1)).sum(axis=1).clip(max=size - 1)  # x ~ p, per run
        logs = np.log(p)
        scaled = (1.0 + SCORE_LAMBDAS)[None, :, None] * logs[:, None, :]  # [R, G, S]
        top = scaled.max(axis=2)
        normalizer = top + np.log(np.exp(scaled - top[..., None]).sum(axis=2))
        terms = SCORE_LAMBDAS[None, :] * logs[np.arange(runs), x][:, None] - normalizer  # [R, G]
        assert np.allclose(terms[0], score_terms(p[0])[:, x[0]], rtol=0, atol=1e-12)
        total += terms
        exponents = total + UNIFORM_WEIGHTS[None, :]
        top_e = exponents.max(axis=1)
        log_m = top_e + np.log(np.exp(exponents - top_e[:, None]).sum(axis=1))
        assert BinSums(score_log=total[0].copy()).score_rejects(0.05, UNIFORM_WEIGHTS) == (log_m[0] >= bar)
        crossed |= log_m >= bar
    assert crossed.mean() <= 0.067, crossed.mean()


def test_the_log_score_martingale_rejects_a_tempered_law() -> None:
    """Tokens drawn at temperature 1.5 from rows whose target is temperature 1 (flatter): 2,000
    tokens reach evidence 1e6 (the grid's flattening lambdas)."""
    rng = np.random.default_rng(3)
    b = BinSums()
    for _ in range(2000):
        logits = rng.normal(0.0, 2.0, 16)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        q = p ** (1 / 1.5)
        q /= q.sum()
        b.score_log += score_terms(p)[:, int(rng.choice(16, p=q))]
    assert b.score_rejects(1e-6, UNIFORM_WEIGHTS)


def test_the_histogram_martingale_is_exact_where_chi_square_is_not() -> None:
    """Five tokens in one bin: Pearson's chi-square says p = 9e-7 (statistic 45, df 9); the exact
    probability of any one bin taking all five is 10 * 0.1^5 = 1e-4, and the Bayes factor stays
    below 1e3 (it cannot reject at 1e-3). The Bayes factor is a likelihood-ratio mixture: its mean
    under the uniform law is exactly 1, checked here by summing it over every histogram of 6
    tokens with its multinomial probability (float64 over 5,005 histograms: 1e-9 is loose)."""
    five = np.array([5] + [0] * 9, dtype=np.int64)
    assert pit_chi_square(five)[1] < 1e-6
    assert math.exp(histogram_log_evidence(five)) < 1e3
    mean = 0.0
    for cells in _compositions(6, 10):
        counts = np.array(cells, dtype=np.int64)
        prob = math.factorial(6) / math.prod(math.factorial(c) for c in cells) * 0.1**6
        mean += prob * math.exp(histogram_log_evidence(counts))
    assert abs(mean - 1.0) < 1e-9
    skewed = np.array([400, 0, 0, 0, 0, 0, 0, 0, 0, 600], dtype=np.int64)
    assert histogram_log_evidence(skewed) > math.log(1e6)  # a U-shaped PIT is still caught


def _compositions(n: int, k: int) -> list[tuple[int, ...]]:
    if k == 1:
        return [(n,)]
    return [(first,) + rest for first in range(n + 1) for rest in _compositions(n - first, k - 1)]


def _irwin_hall_tail(n: int, x: Fraction) -> Fraction:
    """P(U_1 + .. + U_n >= x) exactly (rational x): 1 - F(x) = F(n - x), F the alternating sum."""
    y = n - x
    if y <= 0:
        return Fraction(0)
    total = sum((-1) ** k * math.comb(n, k) * (y - k) ** n for k in range(int(math.floor(y)) + 1))
    return Fraction(total, math.factorial(n))


def test_the_pit_sum_has_tails_below_the_normal() -> None:
    """The PIT mean's z-test is exact-or-conservative at any count: for n = 1..24 tokens and every
    z >= 2 on a grid of 1/8 (two-sided p <= 0.046, above every level the depth test uses), the
    exact Irwin-Hall tail P(sum U - n/2 >= z sqrt(n/12)) is below the normal's 1 - Phi(z).
    (At n = 1..60 the crossing lies below z = 1.875, computed the same way; for large n the
    Edgeworth term of the uniform's negative excess kurtosis, -1.2 / n, keeps the tail below the
    normal's beyond z = sqrt(3).) The threshold is lowered by 1e-12 before the exact tail, so
    the float rounding of z sqrt(n/12) only enlarges the tail compared."""
    for n in range(1, 25):
        z = 2.0
        while z * math.sqrt(n / 12.0) < n / 2.0:
            x = Fraction(n / 2.0 + z * math.sqrt(n / 12.0)) - Fraction(1, 10**12)
            assert float(_irwin_hall_tail(n, x)) <= 0.5 * math.erfc(z / math.sqrt(2.0)), (n, z)
            z += 0.125
