"""Powered statistics: chi-square tests of a verifier's random draws against exact laws.

Exact laws (:mod:`spec.exact`) say what the law must be; these tests check that the real sampler
produces it, with sample sizes chosen by a power analysis instead of by habit.

Power. A test compares observed counts over C cells with an exact law p0 by Pearson's chi-square.
If the verifier's true law p1 is at total-variation distance delta from p0, the statistic is
asymptotically non-central chi-square with df = C - 1 and non-centrality
lambda = N * sum_c (p1_c - p0_c)^2 / p0_c >= N * (2 delta)^2 (Cauchy-Schwarz with sum p0 = 1).
So N with P(ncx2(df, 4 delta^2 N) > chi2_{1-alpha}(df)) >= power detects EVERY bias of size
>= delta, whatever its shape. We use delta = ``TV_BIAS`` = 0.005 and power = ``POWER`` = 0.99.
Cells of zero exact probability are not in the chi-square: any count there fails the test outright
(an impossible outcome is a certain bug); cells with expected count < 5 are pooled into one.

False alarms. The whole suite may raise a false alarm with probability at most ``SUITE_ALPHA`` =
1e-3: every test draws its alpha from ``ALPHA_BUDGET`` (the sum is asserted), and seeds are fixed,
so a CI run is reproducible; the budget is what a fresh seed would risk.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

TV_BIAS = 0.005  # smallest total-variation bias every statistical test must detect
POWER = 0.99  # ... with at least this probability
SUITE_ALPHA = 1e-3  # false-alarm probability of the whole statistical suite
MIN_EXPECTED = 5.0  # cells expected below this are pooled

# The alpha budget: one line per statistical test of the suite (spec/properties.py uses these
# names; tests/test_witness.py uses the witness line; the last two lines are the real-model
# decode test and the conformal coverage tests).
ALPHA_BUDGET: dict[str, float] = {
    "stat_verdict_law_k1": 1e-4,
    "stat_verdict_law_k2": 1e-4,
    "stat_verdict_law_k3": 1e-4,
    "stat_verdict_law_k5": 1e-4,
    "stat_verdict_law_k8": 1e-4,
    "stat_lossless_ar_k1": 1e-4,
    "stat_lossless_ar_k2": 1e-4,
    "stat_lossless_ar_k4": 1e-4,
    "stat_lossless_processed_k3": 1e-4,
    "witness_chi_square": 5e-5,
    # tests/test_spec_equivalence.py: law of the first two tokens with speculation on a real model
    "decode_first_two_tokens": 4e-5,
    # tests/spec/test_conformal_coverage.py: four tests at 1e-6 each (Beta law, mean coverage, ties, CRC)
    "conformal_coverage": 4e-6,
    # spec/strata.py: the stratified chi-square tests at LLM vocabulary sizes (the budget's remainder)
    "stat_strata_tail_v4099": 2.5e-6,
    "stat_strata_deep_k8": 2.5e-6,
}
assert sum(ALPHA_BUDGET.values()) <= SUITE_ALPHA + 1e-15, "alpha budget exceeds the suite's"


# -----------------------------------------------------------------------------------------------
# the chi-square distribution (no scipy at run time: the witness CLI uses it)


def chi2_sf(x: float, df: int) -> float:
    """P(chi2(df) > x): the regularized upper incomplete gamma Q(df/2, x/2).

    Series for x < a + 1, Lentz continued fraction otherwise (Numerical Recipes 6.2); relative
    accuracy ~1e-12, checked against scipy in tests/spec/test_statistics.py.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    log_prefactor = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1.0:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1.0
            term *= z / n
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    tiny = 1e-300
    b = z + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return min(1.0, math.exp(log_prefactor) * h)


# -----------------------------------------------------------------------------------------------
# power analysis (scipy, imported where used: only spec tests and the property runner need it)


def power_of(n: int, df: int, alpha: float, tv: float = TV_BIAS) -> float:
    """Worst-case power of a chi-square test with N samples against any TV bias >= tv."""
    from scipy.stats import chi2, ncx2

    critical = float(chi2.isf(alpha, df))
    return float(ncx2.sf(critical, df, 4.0 * tv * tv * n))


@lru_cache(maxsize=None)
def required_sample_size(df: int, alpha: float, tv: float = TV_BIAS, power: float = POWER) -> int:
    """Smallest N (rounded up to a multiple of 1,000) with :func:`power_of` >= power."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, ncx2

    critical = float(chi2.isf(alpha, df))
    lam = float(brentq(lambda nc: float(ncx2.sf(critical, df, nc)) - power, 1e-9, 1e5))
    n = math.ceil(lam / (4.0 * tv * tv) / 1000.0) * 1000
    while power_of(n, df, alpha, tv) < power:  # guard the rounding of brentq
        n += 1000
    return n


# -----------------------------------------------------------------------------------------------
# the test


@dataclass(frozen=True)
class ChiSquare:
    """Pearson chi-square of observed counts against an exact law."""

    statistic: float
    df: int
    p_value: float
    n: int
    impossible: int  # observations in cells of exact probability zero
    pooled_cells: int  # cells merged because their expected count was < MIN_EXPECTED
    max_abs_error: float  # max |observed freq - expected prob| over cells (for reports)

    def passed(self, alpha: float) -> bool:
        """No impossible outcome and p-value >= alpha."""
        return self.impossible == 0 and self.p_value >= alpha


def chi_square(counts: npt.NDArray[np.int64], probs: npt.NDArray[np.float64]) -> ChiSquare:
    """Chi-square of ``counts`` [C] against the exact cell probabilities ``probs`` [C].

    Cells with probability 0 are excluded (counts there are reported as ``impossible``); cells
    whose expected count is below 5 are pooled into one cell.
    """
    counts = np.asarray(counts, dtype=np.int64)
    probs = np.asarray(probs, dtype=np.float64)
    if counts.shape != probs.shape:
        raise ValueError(f"counts {counts.shape} and probs {probs.shape} differ in shape")
    n = int(counts.sum())
    if n == 0:
        raise ValueError("no observations")
    possible = probs > 0
    impossible = int(counts[~possible].sum())
    expected = probs[possible] * n
    observed = counts[possible].astype(np.float64)
    small = expected < MIN_EXPECTED
    pooled = int(small.sum())
    if pooled:
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    df = max(1, expected.shape[0] - 1)
    error = float(np.max(np.abs(counts / n - probs)))
    return ChiSquare(statistic, df, chi2_sf(statistic, df), n, impossible, pooled, error)


def counts_of(cells: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.int64]:
    """Histogram of integer cell ids in [0, size)."""
    return np.asarray(np.bincount(cells, minlength=size)[:size], dtype=np.int64)


def law_to_vector(law: Mapping[Any, Any], index: Mapping[Any, int], size: int) -> npt.NDArray[np.float64]:
    """Exact law (outcome -> Fraction) as a float vector over cell ids."""
    out = np.zeros(size, dtype=np.float64)
    for key, mass in law.items():
        out[index[key]] += float(mass)
    return out
