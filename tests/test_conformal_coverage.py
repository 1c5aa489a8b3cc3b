"""Conformal guarantees, statistically: coverage over exchangeable draws matches the Beta law, and
the margin gate's flip risk stays within alpha.

All draws come from seeded generators, so every test is deterministic; the tolerances are still
stated as statistical tests so that a failure means something. Each test's false-alarm rate alpha
is stated in its docstring; together they spend < 1e-5. The power checks show each test would
catch the classic mistake (the np.quantile "higher" index, a missing Bonferroni correction).

Theory (Vovk 2012; Angelopoulos & Bates 2023, Sec. 3 & App. D): with n calibration scores and a
fresh score, all exchangeable and almost surely distinct, the k-th smallest calibration score Q
has coverage C = P(fresh <= Q | calibration) ~ Beta(k, n + 1 - k), so E[C] = k/(n+1) and
Var[C] = E[C](1 - E[C])/(n + 2). With k = ceil((n+1) q), E[C] lies in [q, q + 1/(n+1)).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from scipy import stats

from verispec.reference.conformal import conformal_index, conformal_quantile, margin_threshold

Z_TWO_SIDED_1E6 = float(stats.norm.isf(0.5e-6))  # 4.89
Z_ONE_SIDED_1E6 = float(stats.norm.isf(1e-6))  # 4.75


def _quantiles(calibration: npt.NDArray[np.float64], q: str) -> npt.NDArray[np.float64]:
    return np.array([conformal_quantile(row, q) for row in calibration])  # [R]


def _higher_quantiles(calibration: npt.NDArray[np.float64], q: float) -> npt.NDArray[np.float64]:
    return np.asarray(np.quantile(calibration, q, axis=1, method="higher"), dtype=np.float64)  # [R]


def test_conditional_coverage_is_beta() -> None:
    """Uniform scores make the conditional coverage equal to Q itself: R = 4,000 calibrations of
    n = 50 at q = 0.95 give Q ~ Beta(49, 2) (KS test, alpha = 1e-6). Power: the np.quantile
    "higher" quantile (the 48th smallest, Beta(48, 3)) is rejected by the same test."""
    rng = np.random.default_rng(11)
    n, q, reps = 50, "0.95", 4_000
    k = conformal_index(n, q)
    assert k == 49
    calibration = rng.random((reps, n))  # [R, n]
    law = stats.beta(k, n + 1 - k)
    assert stats.kstest(_quantiles(calibration, q), law.cdf).pvalue > 1e-6
    assert stats.kstest(_higher_quantiles(calibration, 0.95), law.cdf).pvalue < 1e-6


def _marginal_coverage(
    rng: np.random.Generator, n: int, fresh: int, reps: int, draw: str
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """[R, n] calibration and [R, fresh] test scores, exchangeable within each repetition."""
    if draw == "lognormal":
        return rng.lognormal(size=(reps, n)), rng.lognormal(size=(reps, fresh))
    return rng.integers(0, 6, size=(reps, n)).astype(np.float64), rng.integers(0, 6, size=(reps, fresh)).astype(
        np.float64
    )


def test_marginal_coverage_lands_in_the_guaranteed_interval() -> None:
    """R = 3,000 repetitions of n = 50 calibration scores and 50 fresh ones (lognormal, so ties have
    probability 0), q = 0.95: the mean coverage estimates E[C] = k/(n+1) = 49/51, which lies in
    [q, q + 1/(n+1)). Two-sided test at alpha = 1e-6 with the standard error of the Beta law
    (Var per repetition = Var[C] + E[C(1-C)]/50). Power: the np.quantile "higher" index (48/51)
    falls below q by more than the tolerance."""
    rng = np.random.default_rng(12)
    n, fresh, reps, q = 50, 50, 3_000, "0.95"
    k = conformal_index(n, q)
    assert k is not None
    mean_exact = Fraction(k, n + 1)
    assert Fraction(q) <= mean_exact < Fraction(q) + Fraction(1, n + 1)

    calibration, test = _marginal_coverage(rng, n, fresh, reps, "lognormal")
    covered = np.mean(test <= _quantiles(calibration, q)[:, None], axis=1)  # [R]
    mu = float(mean_exact)
    var_c = mu * (1 - mu) / (n + 2)
    se = math.sqrt((var_c + (mu * (1 - mu) - var_c) / fresh) / reps)
    tolerance = Z_TWO_SIDED_1E6 * se
    assert abs(float(np.mean(covered)) - mu) <= tolerance
    assert (
        float(Fraction(q)) - tolerance <= float(np.mean(covered)) < float(mean_exact + Fraction(1, n + 1)) + tolerance
    )

    higher = np.mean(test <= _higher_quantiles(calibration, 0.95)[:, None], axis=1)  # [R]
    assert float(np.mean(higher)) < float(Fraction(q)) - tolerance


def test_marginal_coverage_with_ties_still_reaches_q() -> None:
    """With ties (scores uniform on {0..5}) coverage is only bounded below: mean >= q - tolerance,
    one-sided at alpha = 1e-6, R = 3,000, n = 19, q = 0.9 (k = 18), 50 fresh scores each; the
    standard error is taken as the empirical one across repetitions."""
    rng = np.random.default_rng(13)
    n, fresh, reps, q = 19, 50, 3_000, "0.9"
    calibration, test = _marginal_coverage(rng, n, fresh, reps, "ties")
    covered = np.mean(test <= _quantiles(calibration, q)[:, None], axis=1)  # [R]
    se = float(np.std(covered, ddof=1)) / math.sqrt(reps)
    assert float(np.mean(covered)) >= 0.9 - Z_ONE_SIDED_1E6 * se


def _flip_model(
    rng: np.random.Generator, shape: tuple[int, ...], layers: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Exchangeable tokens with per-layer margins [..., L] and flips [..., L]: a shared token
    difficulty makes layers dependent; deeper layers have larger margins and flip less."""
    difficulty = rng.exponential(1.0, size=(*shape, 1))
    depth = np.arange(1, layers + 1) / layers  # [L]
    margins = difficulty * (0.5 + depth) + rng.exponential(0.3, size=(*shape, layers))
    flips = rng.random((*shape, layers)) < 0.7 * np.exp(-1.5 * margins)
    return margins, flips


def _served_flip_rate(
    margins: npt.NDArray[np.float64], flips: npt.NDArray[np.bool_], thresholds: npt.NDArray[np.float64]
) -> tuple[float, float]:
    """Exit at the first layer whose margin exceeds its threshold; the flip rate and exit rate."""
    admitted = margins > thresholds  # [m, L]
    first = np.argmax(admitted, axis=1)  # [m]
    exits = admitted.any(axis=1)
    served_flip = exits & flips[np.arange(flips.shape[0]), first]
    return float(np.mean(served_flip)), float(np.mean(exits))


def test_margin_gate_flip_risk_within_alpha() -> None:
    """Conformal risk control for the margin gate, K = 3 dependent layers each at alpha/K with
    alpha = 0.1: over R = 1,000 repetitions (n = 300 calibration and 300 fresh tokens each), each
    layer's risk P(admitted and flipped) is <= alpha/K (the CRC guarantee itself; measured about
    0.033, i.e. tight), the served flip rate is <= alpha (measured about 0.06: the union bound is
    conservative for dependent layers), both one-sided at alpha_test = 1e-6 with the empirical
    standard error, and the
    gate is not vacuous (it exits early on > 20% of tokens). Power: calibrating each layer at
    alpha (no Bonferroni) exceeds alpha by more than the tolerance in this model."""
    rng = np.random.default_rng(14)
    layers, n, fresh, reps, alpha = 3, 300, 300, 1_000, Fraction(1, 10)
    rates, exit_rates, naive_rates, layer_risks = [], [], [], []
    for _ in range(reps):
        cal_m, cal_f = _flip_model(rng, (n,), layers)
        test_m, test_f = _flip_model(rng, (fresh,), layers)
        thresholds = np.array(
            [margin_threshold(cal_m[:, j], cal_f[:, j], alpha, n_layers=layers) for j in range(layers)]
        )
        naive = np.array([margin_threshold(cal_m[:, j], cal_f[:, j], alpha) for j in range(layers)])
        rate, exit_rate = _served_flip_rate(test_m, test_f, thresholds)
        rates.append(rate)
        exit_rates.append(exit_rate)
        naive_rates.append(_served_flip_rate(test_m, test_f, naive)[0])
        layer_risks.append(np.mean((test_m > thresholds) & test_f, axis=0))  # [L]: the CRC loss
    per_layer = np.asarray(layer_risks)  # [R, L]
    layer_se = np.std(per_layer, axis=0, ddof=1) / math.sqrt(reps)
    assert bool(np.all(np.mean(per_layer, axis=0) <= float(alpha) / layers + Z_ONE_SIDED_1E6 * layer_se))
    se = float(np.std(rates, ddof=1)) / math.sqrt(reps)
    assert float(np.mean(rates)) <= float(alpha) + Z_ONE_SIDED_1E6 * se
    assert float(np.mean(exit_rates)) > 0.2
    naive_se = float(np.std(naive_rates, ddof=1)) / math.sqrt(reps)
    assert float(np.mean(naive_rates)) > float(alpha) + Z_ONE_SIDED_1E6 * naive_se
