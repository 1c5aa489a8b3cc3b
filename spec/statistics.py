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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

TV_BIAS = 0.005  # smallest total-variation bias every statistical test must detect
POWER = 0.99  # ... with at least this probability
SUITE_ALPHA = 1e-3  # false-alarm probability of the whole statistical suite
MIN_EXPECTED = 5.0  # cells expected below this are pooled
# the properties' default seed: every statistical property derives its stream from it, so a run is
# reproducible from the report alone (spec.properties.run_properties, verispec check --seed)
PROPERTY_SEED = 20_240_531

# The alpha budget: one line per statistical test of the suite (spec/properties/ uses these
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
    "decode_first_two_tokens": 2e-5,
    # tests/test_tree_decode.py: the same law through the token-tree loop (half of the line above)
    "tree_decode_first_two_tokens": 2e-5,
    # tests/test_conformal_coverage.py: four tests at 1e-6 each (Beta law, mean coverage, ties, CRC)
    "conformal_coverage": 4e-6,
    # tests/spec/test_tree_statistics.py: the token-tree rule (a fixed tree's verdict law; the
    # first two tokens of rounds over randomly drawn trees)
    "tree_verdict_law": 2e-6,
    "tree_lossless_two_tokens": 2e-6,
    # spec/strata.py: the stratified chi-square tests at LLM vocabulary sizes (from the budget's remainder)
    "stat_strata_tail_v4099": 4e-7,
    "stat_strata_tail_v262144": 4e-7,  # half of tail_v4099's former 8e-7
    "stat_strata_deep_k8": 8e-7,
    # tests/test_heldout_early_exit.py: binomial test of held-out flips against the claimed alpha
    # (what the budget had left)
    "heldout_early_exit": 3e-7,
    # tests/test_check_decoder.py: the six check-decoder tests that must pass (our decoders against
    # our forward, their own logits, early EOG, a two-sample run, an engine of other numerics;
    # 8e-8 / 6 each; the budget's last remainder)
    "check_decoder": 8e-8,
    # tests/test_decoder_depth.py, tests/test_decoder_depth_ties.py: the three correct decoders and
    # the engine of noisy numerics that must pass the depth test (a quarter each)
    "decoder_depth": 1e-8,
    # tests/test_laws_decoder.py: a correct decoder of another ecosystem's law must pass that law
    # (first-m and depth: half each)
    "decoder_laws": 4e-9,
    # tests/test_decoder_depth_two_sample.py: the bug-free loop must pass two-sample mode at depth
    "decoder_depth_two_sample": 4e-9,
    # tests/test_check_decoder_ci.py: our decode loop must pass check-decoder's default mode
    # budget-led (first-m and depth tests inside it, split by the command); half the remainder
    "check_decoder_ci": 1e-9,
}
assert sum(ALPHA_BUDGET.values()) <= SUITE_ALPHA + 1e-15, "alpha budget exceeds the suite's"


# -----------------------------------------------------------------------------------------------
# the chi-square distributions (no scipy at run time: `verispec check` and `witness` use them)


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


def chi2_isf(alpha: float, df: int) -> float:
    """The critical value x with P(chi2(df) > x) = alpha, by bisection on :func:`chi2_sf`
    (decreasing in x) to a relative width of 1e-14."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    lo, hi = 0.0, float(df) + 10.0
    while chi2_sf(hi, df) > alpha:
        lo, hi = hi, 2.0 * hi
    return _bisect(lambda x: chi2_sf(x, df) > alpha, lo, hi)


def ncx2_sf(x: float, df: int, nc: float) -> float:
    """P(ncx2(df, nc) > x): the Poisson(nc / 2) mixture of central chi-square tails,

        sum_j  e^-mu mu^j / j!  *  Q(df / 2 + j, x / 2),   mu = nc / 2,

    with Q(a + 1, z) = Q(a, z) + z^a e^-z / Gamma(a + 1) (each step adds a positive term, so the
    upward recurrence is stable). Terms past j = mu + 12 sqrt(mu) + 30 are dropped: the Poisson
    mass there is below 1e-20 and each Q <= 1.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if nc < 0:
        raise ValueError(f"non-centrality must be >= 0, got {nc}")
    if x <= 0:
        return 1.0
    mu, a, z = nc / 2.0, df / 2.0, x / 2.0
    q = chi2_sf(x, df)  # Q(a, z)
    if mu == 0.0:
        return q
    log_z, log_mu = math.log(z), math.log(mu)
    total = 0.0
    for j in range(int(mu + 12.0 * math.sqrt(mu) + 30.0) + 1):
        total += math.exp(-mu + j * log_mu - math.lgamma(j + 1.0)) * q
        q = min(1.0, q + math.exp((a + j) * log_z - z - math.lgamma(a + j + 1.0)))  # Q(a + j + 1, z)
    return min(1.0, total)


def _bisect(below: Callable[[float], bool], lo: float, hi: float) -> float:
    """The boundary in [lo, hi] of a monotone predicate (true below it), to relative width 1e-14."""
    while hi - lo > 1e-14 * hi:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    return 0.5 * (lo + hi)


# -----------------------------------------------------------------------------------------------
# power analysis (the functions above: no scipy at run time, `verispec check` needs it)


def power_of(n: int, df: int, alpha: float, tv: float = TV_BIAS) -> float:
    """Worst-case power of a chi-square test with N samples against any TV bias >= tv."""
    return ncx2_sf(chi2_isf(alpha, df), df, 4.0 * tv * tv * n)


@cache
def required_sample_size(df: int, alpha: float, tv: float = TV_BIAS, power: float = POWER) -> int:
    """Smallest N (a multiple of 1,000) with :func:`power_of` >= power."""
    critical = chi2_isf(alpha, df)
    hi = 1.0  # the non-centrality reaching the power: bracket it (power grows with it), then bisect
    while ncx2_sf(critical, df, hi) < power:
        hi *= 2.0
    lam = _bisect(lambda nc: ncx2_sf(critical, df, nc) < power, 0.0, hi)
    n = max(1000, math.ceil(lam / (4.0 * tv * tv) / 1000.0) * 1000)
    while power_of(n, df, alpha, tv) < power:  # guard the rounding of the bisection
        n += 1000
    while n > 1000 and power_of(n - 1000, df, alpha, tv) >= power:
        n -= 1000
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
