"""The power of the depth test (:mod:`spec.decoder.depth.law`): the deviation it must detect, N from it.

The deviation to detect. At a fraction ``f`` of the emitted positions (the design value: f = 0.1,
a bug that fires in the cycle after a full acceptance), the token is drawn from a law q_t at total
variation ``tv`` (0.05) from the target law p_t, and everywhere else from p_t. One draw per
context (every prefix is new after a few tokens) means no test sees an ARBITRARY q_t: a deviation
that swaps mass between two tokens of equal target probability leaves every function of
(p_t, x_t) unchanged, and one whose direction changes from context to context cancels in any
pooled statistic. So the design fixes the direction every law-changing bug of the catalogue takes
(temperature ignored or doubled, penalties counted too often or too rarely, processors dropped on
some rows, a token drawn from another row's law): the ENTROPY of the law moves. The family is

    q_t = p_t^beta / Z          on p_t's support, beta chosen per row so that TV(p_t, q_t) = tv,

sharpening (beta > 1) and flattening (beta < 1) both; a row that cannot reach ``tv`` either way
(near uniform, or near one-hot) gets the largest TV it can reach (a conservative design).

The statistics and their power. Two tests see this family.

The log-score test-martingale (the test of :mod:`spec.decoder.depth.law`). For each lambda of the
fixed grid :data:`SCORE_LAMBDAS` (both signs: lambda > 0 a sharper law, -1 < lambda < 0 a flatter
one), the token's term is

    l_t(lambda) = lambda log p_t(x_t) - A_t(lambda),    A_t(lambda) = log sum_y p_t(y)^(1 + lambda),

the log-likelihood ratio of the tempered row p^(1+lambda)/Z against p_t: E_p[e^l] = 1 for every
row, so prod_t e^(l_t) is a nonnegative martingale of mean 1 under the null (the chain rule), and
so is any fixed mixture M = sum_g w_g prod_t e^(l_t(lambda_g)) (weights summing to 1, fixed before
the test's draws). Ville's inequality: P(M ever >= 1/a) <= a, at any count and any look, however
skewed the terms (one token of p = 1e-30 is one term, not a 12-sigma z-score). The weights come
from the design: 0.4 on the grid's best lambda for each direction (sharpen, flatten) against
the design's alternative, the other 0.2 spread evenly over the whole grid (other deviations).
Its power: M >= w_g e^(S_g) for every g, so it rejects when S_g = sum_t l_t(lambda_g) >= log(1 /
(w_g a)) for some g; under the alternative S_g has mean n m_g and variance n v_g, both exact from
the pilot rows (:func:`score_effects`: per row the mixture (1 - f) p + f q), so

    power >= max_g Phi((n m_g - log(1 / (w_g a))) / sqrt(n v_g))     (:func:`martingale_power`),

and :func:`martingale_tokens` solves it for n. Against a z-test at the same level this costs
tokens (Markov's inequality is not a quantile: about 1.3-1.5x the z-test's n when the log score
alone decides); the test-martingale gets back part of it by needing no Bonferroni over the looks
(Ville's inequality holds over all of them at once, so its level is the sum of the looks' shares).

The randomized PIT, s_U = U - 1/2 in descending-probability order, is still a z-test (variance
1/12): under the null the U's are i.i.d. U(0,1) whatever the rows, so the sum's law is exactly
Irwin-Hall's, bounded (|z| <= sqrt(3 n): one token can never be a large z), with tails below the
normal's at every level the test uses (checked exactly in tests/test_decoder_depth_exact.py). For a
row the alternative shifts s_U by mu = E_q[s_U] and changes its variance to Var_q(s_U), exact
(:func:`row_effects`); with n tokens, S = sum s_U has mean n f mean(mu) and variance n v1,

    v1 = mean_t [(1 - f) Var_p(s) + f (Var_q(s) + mu_t^2) - f^2 mu_t^2],

and the two-sided z-test at level a rejects with probability >= Phi((n f |mean mu| - z_{a/2}
sqrt(n v0)) / sqrt(n v1)), v0 = 1/12:

    n = ((z_{a/2} sqrt(v0) + z_{0.99} sqrt(v1)) / (f |mean mu|))^2     (:func:`tokens_for`).

N is the smaller over the two tests (the depth test rejects if either does), the larger over the
two directions. The normal approximations hold by the central limit theorem under the
alternative; :func:`simulate_power` checks the design by simulating both tests on the same rows.

What the design assumes: the rows at the affected positions are like the pilot's rows (a bug
that fires only at rows of unusual entropy shifts the statistics by a different amount), and the
pilot is the engine's own decoding (its rows are the target law's given its own prefixes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import DeterministicLaw as DeterministicLaw  # re-exported: its old home

F64 = npt.NDArray[np.float64]

NORMAL = NormalDist()
BETA_RANGE = (1e-3, 1e3)


def support_sorted(p: F64) -> F64:
    """The positive probabilities of a row in descending order (the PIT's order; ties do not
    change the sorted values)."""
    live = np.asarray(p, dtype=np.float64)
    return np.sort(live[live > 0])[::-1]


def tempered(probs: F64, beta: float) -> F64:
    """probs^beta renormalized (``probs`` positive, any order)."""
    logs = beta * np.log(probs)
    weights = np.exp(logs - logs.max())
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def tv_of(p: F64, q: F64) -> float:
    return 0.5 * float(np.abs(p - q).sum())


def beta_at_tv(probs: F64, tv: float, sharpen: bool) -> float:
    """The beta of the tempered row at TV ``tv`` from ``probs`` (bisection in log beta; TV grows
    monotonically as beta leaves 1 either way); the range's end when ``tv`` is out of reach."""
    lo, hi = (0.0, math.log(BETA_RANGE[1])) if sharpen else (math.log(BETA_RANGE[0]), 0.0)
    end = hi if sharpen else lo
    logs = np.log(probs)  # tempered's log, taken once for the 61 steps (the same numbers)

    def tv_at(log_beta: float) -> float:
        scaled = math.exp(log_beta) * logs  # as tempered(probs, beta), step for step
        weights = np.exp(scaled - scaled.max())
        return tv_of(probs, np.asarray(weights / weights.sum(), dtype=np.float64))

    if tv_at(end) <= tv:
        return math.exp(end)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        far = tv_at(mid) > tv
        if sharpen:
            lo, hi = (lo, mid) if far else (mid, hi)
        else:
            lo, hi = (mid, hi) if far else (lo, mid)
    return math.exp(0.5 * (lo + hi))


@dataclass(frozen=True)
class RowEffect:
    """One row under one alternative: the PIT's null variance and the alternative's mean and
    variance of it."""

    var0_u: float
    mu_u: float
    var1_u: float


def alternative_row(p: F64, tv: float, sharpen: bool) -> tuple[F64, F64]:
    """(the row's positive probabilities descending, the tempered law at TV ``tv`` on them)."""
    probs = support_sorted(p)
    q = tempered(probs, beta_at_tv(probs, tv, sharpen)) if probs.shape[0] > 1 else probs
    return probs, q


def row_effects(p: F64, tv: float, sharpen: bool, alternative: tuple[F64, F64] | None = None) -> RowEffect:
    """The PIT's shift when the row ``p`` is tempered to TV ``tv`` (module docstring);
    ``alternative``: :func:`alternative_row` of these arguments when the caller has it."""
    probs, q = alternative_row(p, tv, sharpen) if alternative is None else alternative
    before = np.concatenate([[0.0], np.cumsum(probs)[:-1]])  # F(x - 1) in the PIT's order
    mean_u_given = before + probs / 2.0
    second_u_given = before**2 + before * probs + probs**2 / 3.0
    mu_u = float(q @ mean_u_given) - 0.5
    var1_u = float(q @ second_u_given) - (mu_u + 0.5) ** 2
    return RowEffect(1.0 / 12.0, mu_u, max(var1_u, 0.0))


# -----------------------------------------------------------------------------------------------
# the log-score test-martingale

# lambda = +-2^(k/2): 2^-9 (a long run's slight tempering) to 2 (a law much sharper), and down to
# -1/2 (a much flatter law; lambda <= -1 is no tempering); a step of sqrt(2) keeps every lambda
# within 2^(1/4) of the best one, where exp(lambda S - lambda^2 V / 2) keeps >= 96% of its exponent.
SCORE_LAMBDAS = np.array(
    [2.0 ** (k / 2) for k in range(-18, 3)] + [-(2.0 ** (k / 2)) for k in range(-18, -1)], dtype=np.float64
)
DESIGN_WEIGHT = 0.4  # on the best lambda of each direction; the other 0.2 spread evenly over the grid


def log_normalizers(logs: F64) -> F64:
    """A(lambda) = log sum_y p(y)^(1 + lambda) for every grid lambda, from a row's log
    probabilities (its support): a log-sum-exp, exact in float64 for p down to the smallest
    normal double and for a row of one token (A = 0)."""
    scaled = (1.0 + SCORE_LAMBDAS)[:, None] * logs[None, :]  # [G, S]
    top = scaled.max(axis=1)
    return np.asarray(top + np.log(np.exp(scaled - top[:, None]).sum(axis=1)), dtype=np.float64)


def score_terms(probs: F64) -> npt.NDArray[np.float64]:
    """l(lambda, y) = lambda log p(y) - A(lambda) for every grid lambda and support token [G, S]."""
    logs = np.log(probs)
    return np.asarray(SCORE_LAMBDAS[:, None] * logs[None, :] - log_normalizers(logs)[:, None], dtype=np.float64)


@dataclass(frozen=True)
class ScoreMoments:
    """Per grid lambda, the mean and variance of one token's term under the design's alternative
    (a row drawn uniformly from the pilot's, its token from (1 - f) p + f q)."""

    mean: F64
    var: F64


def score_effects(
    rows: Sequence[F64],
    tv: float,
    fraction: float,
    sharpen: bool,
    alternatives: Sequence[tuple[F64, F64]] | None = None,
) -> ScoreMoments:
    """``alternatives``: :func:`alternative_row` of each row when the caller has them."""
    first = np.zeros(SCORE_LAMBDAS.shape[0])
    second = np.zeros(SCORE_LAMBDAS.shape[0])
    for i, p in enumerate(rows):
        probs, q = alternative_row(p, tv, sharpen) if alternatives is None else alternatives[i]
        terms = score_terms(probs)
        mixture = (1.0 - fraction) * probs + fraction * q
        first += terms @ mixture
        second += terms**2 @ mixture
    mean = first / len(rows)
    return ScoreMoments(mean, np.maximum(second / len(rows) - mean**2, 0.0))


def martingale_tokens(mean: float, var: float, threshold: float, power: float) -> float:
    """The n at which S (mean n ``mean``, variance n ``var``) exceeds ``threshold`` with
    probability ``power`` (normal approximation); inf when the alternative does not raise S."""
    if mean <= 0.0:
        return math.inf
    z_b = NORMAL.inv_cdf(power)
    root = (z_b * math.sqrt(var) + math.sqrt(z_b**2 * var + 4.0 * mean * threshold)) / (2.0 * mean)
    return root**2


def martingale_power(n: float, moments: ScoreMoments, log_weights: F64, alpha: float) -> float:
    """max_g P(S_g >= log(1 / (w_g alpha))) on n tokens: a lower bound on the mixture's power."""
    if n <= 0:
        return 0.0
    thresholds = -math.log(alpha) - log_weights
    z = (n * moments.mean - thresholds) / np.sqrt(np.maximum(n * moments.var, 1e-300))
    return NORMAL.cdf(float(z.max()))


def design_weights(moments: tuple[ScoreMoments, ScoreMoments], alpha: float, power: float) -> F64:
    """The mixture's log weights: :data:`DESIGN_WEIGHT` on each direction's best lambda (the one
    needing the fewest tokens at that weight), the rest evenly over the grid."""
    grid = SCORE_LAMBDAS.shape[0]
    weights = np.full(grid, (1.0 - 2 * DESIGN_WEIGHT) / grid)
    threshold = -math.log(alpha * (DESIGN_WEIGHT + weights[0]))
    for m in moments:
        needed = [martingale_tokens(float(m.mean[g]), float(m.var[g]), threshold, power) for g in range(grid)]
        weights[int(np.argmin(needed))] += DESIGN_WEIGHT
    return np.asarray(np.log(weights), dtype=np.float64)


# -----------------------------------------------------------------------------------------------
# the PIT z-test


def tokens_for(var0: F64, mu: F64, var1: F64, fraction: float, alpha: float, power: float) -> float:
    """n for a two-sided z-test at ``alpha`` to reach ``power`` (module docstring); inf when the
    alternative does not move the statistic."""
    shift = fraction * float(mu.mean())
    if shift == 0.0:
        return math.inf
    v0 = float(var0.mean())
    v1 = float(((1 - fraction) * var0 + fraction * (var1 + mu**2) - fraction**2 * mu**2).mean())
    z_a, z_b = NORMAL.inv_cdf(1 - alpha / 2), NORMAL.inv_cdf(power)
    return ((z_a * math.sqrt(v0) + z_b * math.sqrt(max(v1, 0.0))) / abs(shift)) ** 2


def power_at(n: float, var0: F64, mu: F64, var1: F64, fraction: float, alpha: float) -> float:
    """The normal-approximation power of the z-test on n tokens."""
    if n <= 0:
        return 0.0
    shift = n * fraction * abs(float(mu.mean()))
    v0 = float(var0.mean())
    v1 = float(((1 - fraction) * var0 + fraction * (var1 + mu**2) - fraction**2 * mu**2).mean())
    z_a = NORMAL.inv_cdf(1 - alpha / 2)
    return NORMAL.cdf((shift - z_a * math.sqrt(n * v0)) / math.sqrt(max(n * v1, 1e-300)))


# -----------------------------------------------------------------------------------------------
# the design


@dataclass(frozen=True)
class PowerDesign:
    """Tokens needed for power ``power`` against TV ``tv`` on ``fraction`` of positions, per
    direction the smaller over the two tests, the larger over the directions. ``alpha``: the
    PIT z-test's level at the final look; ``martingale_alpha``: the log-score test-martingale's
    level over all looks; ``score_log_weights``: its mixture's log weights over
    :data:`SCORE_LAMBDAS` (uniform for a design without pilot rows)."""

    tokens: int
    tv: float
    fraction: float
    alpha: float
    power: float
    effects: tuple[tuple[RowEffect, ...], tuple[RowEffect, ...]]  # (sharpen, flatten) per pilot row
    martingale_alpha: float = 0.0
    score_moments: tuple[ScoreMoments, ...] = ()  # (sharpen, flatten)
    score_log_weights: F64 = field(
        default_factory=lambda: np.full(SCORE_LAMBDAS.shape[0], -math.log(SCORE_LAMBDAS.shape[0]))
    )

    def power_at(self, n: float) -> float:
        """Power reached on n tokens: the smaller over the directions of the larger over the tests
        (0 for a design without pilot rows)."""
        if not all(self.effects) or len(self.score_moments) != 2:
            return 0.0
        out = []
        for effects, moments in zip(self.effects, self.score_moments):
            var0, mu, var1 = _arrays(effects)
            pit = power_at(n, var0, mu, var1, self.fraction, self.alpha)
            out.append(max(pit, martingale_power(n, moments, self.score_log_weights, self.martingale_alpha)))
        return min(out)


def _arrays(effects: Sequence[RowEffect]) -> tuple[F64, F64, F64]:
    def col(name: str) -> F64:
        return np.array([getattr(e, name) for e in effects], dtype=np.float64)

    return col("var0_u"), col("mu_u"), col("var1_u")


def design(
    rows: Sequence[F64], tv: float, fraction: float, alpha: float, power: float, martingale_alpha: float | None = None
) -> PowerDesign:
    """The design from pilot rows (each a target-law row [V] at an emitted position): the PIT
    z-test at ``alpha``, the log-score test-martingale at ``martingale_alpha`` (default ``alpha``)."""
    if not rows:
        raise ValueError("the power design needs at least one pilot row")
    level = alpha if martingale_alpha is None else martingale_alpha
    # each row's tempered alternative (a 61-step bisection) once per direction, for both tests
    alternatives = {sharpen: [alternative_row(p, tv, sharpen) for p in rows] for sharpen in (True, False)}
    per_direction = tuple(
        tuple(row_effects(p, tv, sharpen, a) for p, a in zip(rows, alternatives[sharpen])) for sharpen in (True, False)
    )
    moments = (
        score_effects(rows, tv, fraction, True, alternatives[True]),
        score_effects(rows, tv, fraction, False, alternatives[False]),
    )
    log_weights = design_weights(moments, level, power)
    thresholds = -math.log(level) - log_weights
    needed = 0.0
    for effects, m in zip(per_direction, moments):
        pit = tokens_for(*_arrays(effects), fraction, alpha, power)
        score = min(
            martingale_tokens(float(m.mean[g]), float(m.var[g]), float(thresholds[g]), power)
            for g in range(len(thresholds))
        )
        needed = max(needed, min(pit, score))
    if not math.isfinite(needed):
        raise DeterministicLaw("no pilot row can deviate by the design's TV along its entropy (every row one-hot)")
    return PowerDesign(
        int(math.ceil(needed)),
        tv,
        fraction,
        alpha,
        power,
        (per_direction[0], per_direction[1]),
        level,
        moments,
        log_weights,
    )


def mixture_log_evidence(log_terms: F64, log_weights: F64) -> float:
    """log M = log sum_g w_g exp(S_g) (log-sum-exp; S_g the summed terms of lambda_g)."""
    exponents = log_terms + log_weights
    top = float(exponents.max())
    return top + math.log(float(np.exp(exponents - top).sum()))


def simulate_power(
    rows: Sequence[F64], design: PowerDesign, n: int, replications: int, seed: int, sharpen: bool
) -> float:
    """Fraction of ``replications`` in which the depth test's two overall tests reject at the
    final look (the PIT z-test at ``design.alpha``, the log-score test-martingale at
    ``design.martingale_alpha`` with the design's weights), each replication n tokens whose rows
    are drawn uniformly from ``rows`` and, with probability ``design.fraction``, whose token comes
    from the tempered law at TV ``design.tv``. The statistics depend on the (row, token) pairs
    only, not on how the prefixes chain, so a replication draws the counts of every (row, token)
    cell at once (multinomial over the mixture law) and each token's PIT uniform V apart: exact
    for this model, O(n) per replication."""
    rng = np.random.default_rng(seed)
    cells_p, cells_q, cells_before, cells_terms = [], [], [], []
    for p in rows:
        probs, q = alternative_row(p, design.tv, sharpen)
        cells_p.append(probs)
        cells_q.append(q)
        cells_before.append(np.cumsum(probs) - probs)
        cells_terms.append(score_terms(probs))
    p_cell, q_cell = np.concatenate(cells_p), np.concatenate(cells_q)
    before = np.concatenate(cells_before)
    terms = np.concatenate(cells_terms, axis=1)  # [G, cells]
    mixture = ((1 - design.fraction) * p_cell + design.fraction * q_cell) / len(rows)
    mixture /= mixture.sum()
    z_crit = NORMAL.inv_cdf(1 - design.alpha / 2)
    log_bar = -math.log(design.martingale_alpha)
    rejections = 0
    for _ in range(replications):
        counts = rng.multinomial(n, mixture)
        martingale = mixture_log_evidence(terms @ counts, design.score_log_weights) >= log_bar
        pit_sum = float(counts @ (before + 0.5 * p_cell)) + float(np.repeat(p_cell, counts) @ (rng.random(n) - 0.5))
        z_u = (pit_sum - 0.5 * n) / math.sqrt(n / 12.0)
        rejections += int(martingale or abs(z_u) > z_crit)
    return rejections / replications
