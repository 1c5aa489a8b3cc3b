"""Powered statistics: the machinery (chi-square, power analysis, alpha budget), then the
statistical tests of the reference sampler, one test function per line of the alpha budget.

Every statistical test below: fixed seed; its N is the power analysis' answer for its df and
alpha (asserted, so the docstring cannot drift); power is against ANY bias of total variation
>= 0.005 on the tested law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from verispec.spec.properties import PropertyResult, reference_results
from verispec.spec.statistics import (
    ALPHA_BUDGET,
    POWER,
    SUITE_ALPHA,
    TV_BIAS,
    chi2_sf,
    chi_square,
    power_of,
    required_sample_size,
)


@pytest.mark.parametrize("df", [1, 2, 5, 9, 33, 63, 200])
@pytest.mark.parametrize("x", [0.01, 0.5, 3.0, 10.0, 40.0, 120.0, 400.0])
def test_chi2_sf_matches_scipy(x: float, df: int) -> None:
    want = float(chi2.sf(x, df))
    got = chi2_sf(x, df)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_budget_sums_within_the_suite_alpha() -> None:
    assert math.fsum(ALPHA_BUDGET.values()) <= SUITE_ALPHA
    assert all(0 < alpha for alpha in ALPHA_BUDGET.values())


def test_required_sample_size_reaches_the_power_and_is_minimal() -> None:
    for df in (5, 33, 63):
        n = required_sample_size(df, 1e-4)
        assert power_of(n, df, 1e-4) >= POWER
        assert power_of(n - 1000, df, 1e-4) < POWER


def test_noncentrality_bound_holds_for_any_alternative() -> None:
    """The power analysis rests on sum (p1 - p0)^2 / p0 >= (2 TV)^2 (Cauchy-Schwarz); check it
    on random laws and random perturbations, and that a uniform two-cell shift nearly attains it."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        cells = int(rng.integers(2, 80))
        p0 = rng.dirichlet(np.ones(cells))
        p1 = rng.dirichlet(np.ones(cells))
        tv = 0.5 * float(np.abs(p1 - p0).sum())
        assert float(np.sum((p1 - p0) ** 2 / p0)) >= 4 * tv * tv * (1 - 1e-12)
    p0 = np.full(2, 0.5)
    p1 = p0 + np.array([TV_BIAS, -TV_BIAS])
    assert float(np.sum((p1 - p0) ** 2 / p0)) == pytest.approx(4 * TV_BIAS**2)


def test_chi_square_flags_impossible_outcomes_and_pools_small_cells() -> None:
    probs = np.array([0.5, 0.5 - 1e-6, 1e-6, 0.0])
    counts = np.array([500, 499, 0, 1])
    result = chi_square(counts, probs)
    assert result.impossible == 1 and not result.passed(1e-4)
    assert result.pooled_cells == 1 and result.df == 2  # two big cells + the pooled one
    clean = chi_square(np.array([500, 500, 0, 0]), probs)
    assert clean.impossible == 0 and clean.passed(1e-4)


def test_chi_square_detects_a_planted_bias_at_the_designed_n() -> None:
    """A sampler biased by TV 0.005 (worst shape) at N from the power analysis is caught."""
    rng = np.random.default_rng(1)
    cells = 33
    p0 = rng.dirichlet(np.ones(cells))
    p1 = p0.copy()
    big, small = int(np.argmax(p0)), int(np.argmin(p0))
    p1[big] -= TV_BIAS
    p1[small] += TV_BIAS
    n = required_sample_size(cells - 1, 1e-4)
    counts = rng.multinomial(n, p1)
    assert not chi_square(counts, p0).passed(1e-4)


# -----------------------------------------------------------------------------------------------
# the statistical tests of the reference sampler (one per budget line; the witness has its own)


@pytest.fixture(scope="module")
def stats() -> dict[str, PropertyResult]:
    return {r.name: r for r in reference_results(only=[n for n in ALPHA_BUDGET if n.startswith("stat_")])}


def check(stats: dict[str, PropertyResult], name: str, n: int) -> None:
    result = stats[name]
    assert result.n == n, f"{name}: the docstring's N ({n}) is stale; the power analysis says {result.n}"
    assert result.alpha == ALPHA_BUDGET[name]
    assert result.power >= POWER
    assert result.passed, result.detail
    assert "pooled=0" in result.detail  # the design keeps every expected count >= 5


def test_verdict_law_k1(stats: dict[str, PropertyResult]) -> None:
    """Verdict law (accepted, token, kind), k = 1, V = 6, position-dependent rows with zeros:
    N = 567,000, alpha = 1e-4, power >= 0.99 against TV >= 0.005 (df = 9)."""
    check(stats, "stat_verdict_law_k1", 567_000)


def test_verdict_law_k2(stats: dict[str, PropertyResult]) -> None:
    """Verdict law, k = 2, V = 6: N = 581,000, alpha = 1e-4, power >= 0.99 (df = 10)."""
    check(stats, "stat_verdict_law_k2", 581_000)


def test_verdict_law_k3(stats: dict[str, PropertyResult]) -> None:
    """Verdict law, k = 3, V = 6: N = 644,000, alpha = 1e-4, power >= 0.99 (df = 15)."""
    check(stats, "stat_verdict_law_k3", 644_000)


def test_verdict_law_k5(stats: dict[str, PropertyResult]) -> None:
    """Verdict law, k = 5, V = 6: N = 696,000, alpha = 1e-4, power >= 0.99 (df = 20)."""
    check(stats, "stat_verdict_law_k5", 696_000)


def test_verdict_law_k8(stats: dict[str, PropertyResult]) -> None:
    """Verdict law, k = 8, V = 6: N = 807,000, alpha = 1e-4, power >= 0.99 (df = 33)."""
    check(stats, "stat_verdict_law_k8", 807_000)


def test_lossless_autoregressive_k1(stats: dict[str, PropertyResult]) -> None:
    """First 3 emitted tokens of a Markov toy (V = 4, rows depend on position and last token)
    against the exact target law, k = 1: N = 997,000 sequences, alpha = 1e-4, power >= 0.99
    (df = 63)."""
    check(stats, "stat_lossless_ar_k1", 997_000)


def test_lossless_autoregressive_k2(stats: dict[str, PropertyResult]) -> None:
    """Same, k = 2: N = 997,000, alpha = 1e-4, power >= 0.99 (df = 63)."""
    check(stats, "stat_lossless_ar_k2", 997_000)


def test_lossless_autoregressive_k4(stats: dict[str, PropertyResult]) -> None:
    """Same, k = 4 (drafts run past m: the bonus lands beyond the tested window):
    N = 997,000, alpha = 1e-4, power >= 0.99 (df = 63)."""
    check(stats, "stat_lossless_ar_k4", 997_000)


def test_lossless_processed_k3(stats: dict[str, PropertyResult]) -> None:
    """Markov toy whose rows are target_distribution(logits) with temperature 0.8, top-k 3,
    top-p 0.95 (zeros from the filters), k = 3: N = 751,000, alpha = 1e-4, power >= 0.99 (df = 26)."""
    check(stats, "stat_lossless_processed_k3", 751_000)
