"""One-sided confidence bounds and tests for the mean of [0, 1]-valued losses, by betting.

The early-exit claim bounds the MEAN over prompts of a per-prompt loss in [0, 1] (the fraction of
that prompt's served tokens that flip). A mean-only bound (Hoeffding, Bentkus, or Clopper-Pearson
on one drawn Bernoulli step per prompt) must cover the worst [0, 1] variable with that mean, a
Bernoulli, and stays wide: about ±20 points at 30 prompts. Flip fractions have a far smaller
variance than a Bernoulli of the same mean, and a betting bound uses it (Waudby-Smith & Ramdas,
"Estimating means of bounded random variables by betting", JRSS B 2024), while staying exact in
the sense that matters: valid for every distribution on [0, 1], no asymptotics.

The construction, for i.i.d. (or merely: each conditional mean given the past ≥ m) losses x_1..x_n
in [0, 1] and a candidate mean m, is the capital of a gambler who bets that the mean is below m:

    K_t(m) = prod_{i <= t} (1 + lam_i (m - x_i)),   lam_i = min(lam_hat_i, c / (1 - m)),

with lam_hat_i >= 0 a function of x_1..x_{i-1} only (predictable), c = 3/4. Every factor is >= 0
(x_i <= 1, lam_i <= 1/(1 - m)) and, when the mean is >= m, has conditional expectation <= 1, so
K is a nonnegative supermartingale and Ville's inequality gives P(max_t K_t(m) >= 1/delta) <=
delta. Hence {m : max_t K_t(m) < 1/delta} covers the mean with probability >= 1 - delta. Every
factor is nondecreasing in m (lam_hat does not depend on m; see _factor), so that set is an
interval [0, u) and u is found by bisection; the bound returned is the bracket's upper end (never
below u). The test of H0: mean <= a mirrors it: capital prod (1 + lam_i (x_i - a)), lam_i <=
c / a, p-value min(1, 1 / max_t K_t) (valid by the same inequality).

lam_hat is the "predictable plug-in" of the paper for a fixed n: sqrt(2 log(1/delta) / (n
sigma2_{i-1})), sigma2 a running variance with a prior of 1/4 (one pseudo-observation). The
order of the losses must be fixed before they are seen (here: the held-out file's order).
``tests/test_bounded_mean.py`` checks coverage and test level EXACTLY (by enumerating every
sequence of small discrete samples), not by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

TRUNCATION = 0.75  # c: the largest fraction of the ruin-free bet ever staked
_BISECTIONS = 50


def _check(xs: Sequence[float], delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if any(not (0.0 <= x <= 1.0) for x in xs):
        raise ValueError("losses must lie in [0, 1]")


def _plug_in_bets(xs: Sequence[float], delta: float) -> list[float]:
    """lam_hat_i from x_1..x_{i-1}: sqrt(2 log(1/delta) / (n sigma2_{i-1})), sigma2 with a 1/4 prior."""
    n, log_term = len(xs), math.log(1.0 / delta)
    bets, total, squares = [], 0.0, 0.25
    for i, x in enumerate(xs):
        variance = squares / (i + 1)  # [0.25 + sum_{j<i} (x_j - mean_{j-1})^2] / (i + 1)
        bets.append(math.sqrt(2.0 * log_term / (n * variance)))
        mean_before = (0.5 + total) / (i + 1)
        squares += (x - mean_before) ** 2
        total += x
    return bets


def _max_log_capital(xs: Sequence[float], bets: Sequence[float], m: float, below: bool) -> float:
    """max_t log K_t for the bet "mean < m" (below) or "mean > m" (not below); -inf never occurs
    before ruin, ruin (a zero factor) ends the running maximum's growth."""
    log_k, best = 0.0, 0.0
    for x, lam_hat in zip(xs, bets):
        if below:
            lam = min(lam_hat, TRUNCATION / (1.0 - m)) if m < 1.0 else lam_hat
            factor = 1.0 + lam * (m - x)
        else:
            lam = min(lam_hat, TRUNCATION / m) if m > 0.0 else 0.0
            factor = 1.0 + lam * (x - m)
        if factor <= 0.0:
            return best
        log_k += math.log(factor)
        best = max(best, log_k)
    return best


def upper_bound(xs: Sequence[float], delta: float) -> float:
    """A (1 - delta) upper confidence bound on the mean of ``xs`` (each in [0, 1])."""
    _check(xs, delta)
    if not xs:
        return 1.0
    bets, threshold = _plug_in_bets(xs, delta), math.log(1.0 / delta)
    lo, hi = 0.0, 1.0  # K(1) can stay < 1/delta only if no bet wins; then 1 is the bound
    if _max_log_capital(xs, bets, 1.0, below=True) < threshold:
        return 1.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        if _max_log_capital(xs, bets, mid, below=True) >= threshold:
            hi = mid
        else:
            lo = mid
    return hi


def p_value_above(xs: Sequence[float], bound: float, delta: float = 0.05) -> float:
    """A p-value for H0: mean <= ``bound`` (small when the losses' mean exceeds it). ``delta`` only
    tunes the bets (the level the test is meant for); the p-value is valid at every level."""
    _check(xs, delta)
    if not 0.0 < bound < 1.0:
        raise ValueError(f"bound must be in (0, 1), got {bound}")
    if not xs:
        return 1.0
    return min(1.0, math.exp(-_max_log_capital(xs, _plug_in_bets(xs, delta), bound, below=False)))
