"""The power of the depth test (:mod:`spec.decoder_depth`): the deviation it must detect, N from it.

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

The statistics and their shift. Per token, the log-score s_L = log p(x) + H(p) (zero mean under
the null, variance Var_p(log p); the score statistic of beta, so the locally most powerful test
of this family) and the randomized PIT s_U = U - 1/2 in descending-probability order (variance
1/12). For a row, the alternative shifts s by mu = E_q[s] and changes its variance to Var_q(s),
both computed exactly from the row (:func:`row_effects`). With n tokens whose rows are like the
pilot's, S = sum s has mean n f mean(mu) and variance n v1,

    v1 = mean_t [(1 - f) Var_p(s) + f (Var_q(s) + mu_t^2) - f^2 mu_t^2],

and the two-sided z-test at level a rejects with probability >= Phi((n f |mean mu| - z_{a/2}
sqrt(n v0)) / sqrt(n v1)), v0 = mean Var_p(s). Solving for power 0.99 gives

    n = ((z_{a/2} sqrt(v0) + z_{0.99} sqrt(v1)) / (f |mean mu|))^2     (:func:`tokens_needed`),

the smaller over the two statistics (the test rejects if either does), the larger over the two
directions. The normal approximation holds by the martingale central limit theorem (the terms are
martingale differences under the null, bounded or with all moments); :func:`simulate_power`
checks it by simulation with fixed seeds on the same rows.

What the design assumes: the rows at the affected positions are like the pilot's rows (a bug
that fires only at rows of unusual entropy shifts the statistics by a different amount), and the
pilot is the engine's own decoding (its rows are the target law's given its own prefixes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

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
    if tv_of(probs, tempered(probs, math.exp(end))) <= tv:
        return math.exp(end)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        far = tv_of(probs, tempered(probs, math.exp(mid))) > tv
        if sharpen:
            lo, hi = (lo, mid) if far else (mid, hi)
        else:
            lo, hi = (mid, hi) if far else (lo, mid)
    return math.exp(0.5 * (lo + hi))


@dataclass(frozen=True)
class RowEffect:
    """One row under one alternative: null variances and the alternative's mean and variance of
    the log-score (``l``) and of the PIT (``u``)."""

    var0_l: float
    mu_l: float
    var1_l: float
    var0_u: float
    mu_u: float
    var1_u: float


def row_effects(p: F64, tv: float, sharpen: bool) -> RowEffect:
    """The shift of both statistics when the row ``p`` is tempered to TV ``tv`` (module docstring)."""
    probs = support_sorted(p)
    q = tempered(probs, beta_at_tv(probs, tv, sharpen)) if probs.shape[0] > 1 else probs
    logp = np.log(probs)
    entropy = -float(probs @ logp)
    var0_l = float(probs @ logp**2) - entropy**2
    mean_q = float(q @ logp)
    var1_l = float(q @ logp**2) - mean_q**2
    before = np.concatenate([[0.0], np.cumsum(probs)[:-1]])  # F(x - 1) in the PIT's order
    mean_u_given = before + probs / 2.0
    second_u_given = before**2 + before * probs + probs**2 / 3.0
    mu_u = float(q @ mean_u_given) - 0.5
    var1_u = float(q @ second_u_given) - (mu_u + 0.5) ** 2
    return RowEffect(max(var0_l, 0.0), mean_q + entropy, max(var1_l, 0.0), 1.0 / 12.0, mu_u, max(var1_u, 0.0))


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


@dataclass(frozen=True)
class PowerDesign:
    """Tokens needed for power ``power`` against TV ``tv`` on ``fraction`` of positions, per
    direction the smaller over the two statistics, the larger over the directions."""

    tokens: int
    tv: float
    fraction: float
    alpha: float  # the level of each overall z-test at the final look
    power: float
    effects: tuple[tuple[RowEffect, ...], tuple[RowEffect, ...]]  # (sharpen, flatten) per pilot row

    def power_at(self, n: float) -> float:
        """Power reached on n tokens: the smaller over the directions of the larger over the statistics
        (0 for a design without pilot rows)."""
        if not all(self.effects):
            return 0.0
        out = []
        for effects in self.effects:
            arrays = _arrays(effects)
            out.append(max(power_at(n, *arrays[0], self.fraction, self.alpha), power_at(n, *arrays[1], self.fraction, self.alpha)))
        return min(out)


def _arrays(effects: Sequence[RowEffect]) -> tuple[tuple[F64, F64, F64], tuple[F64, F64, F64]]:
    def col(name: str) -> F64:
        return np.array([getattr(e, name) for e in effects], dtype=np.float64)

    return (col("var0_l"), col("mu_l"), col("var1_l")), (col("var0_u"), col("mu_u"), col("var1_u"))


def design(rows: Sequence[F64], tv: float, fraction: float, alpha: float, power: float) -> PowerDesign:
    """The design from pilot rows (each a target-law row [V] at an emitted position)."""
    if not rows:
        raise ValueError("the power design needs at least one pilot row")
    per_direction = tuple(tuple(row_effects(p, tv, sharpen) for p in rows) for sharpen in (True, False))
    needed = 0.0
    for effects in per_direction:
        arrays = _arrays(effects)
        needed = max(needed, min(tokens_for(*arrays[0], fraction, alpha, power), tokens_for(*arrays[1], fraction, alpha, power)))
    if not math.isfinite(needed):
        raise ValueError("no pilot row can deviate by the design's TV along its entropy (every row one-hot)")
    return PowerDesign(int(math.ceil(needed)), tv, fraction, alpha, power, (per_direction[0], per_direction[1]))


def simulate_power(
    rows: Sequence[F64], design: PowerDesign, n: int, replications: int, seed: int, sharpen: bool
) -> float:
    """Fraction of ``replications`` in which the two overall z-tests (at ``design.alpha`` each)
    reject, each replication n tokens whose rows are drawn uniformly from ``rows`` and, with
    probability ``design.fraction``, whose token comes from the tempered law at TV ``design.tv``.
    The statistics depend on the (row, token) pairs only, not on how the prefixes chain, so a
    replication draws the counts of every (row, token) cell at once (multinomial over the mixture
    law) and each token's PIT uniform V apart: exact for this model, O(n) per replication."""
    rng = np.random.default_rng(seed)
    cells_p, cells_q, cells_row, cells_before = [], [], [], []
    var_rows = []
    for r, p in enumerate(rows):
        probs = support_sorted(p)
        q = tempered(probs, beta_at_tv(probs, design.tv, sharpen)) if probs.shape[0] > 1 else probs
        logp = np.log(probs)
        entropy = -float(probs @ logp)
        var_rows.append(max(float(probs @ logp**2) - entropy**2, 0.0))
        cells_p.append(probs)
        cells_q.append(q)
        cells_row.append(np.full(probs.shape[0], r))
        cells_before.append(np.cumsum(probs) - probs)
    p_cell, q_cell = np.concatenate(cells_p), np.concatenate(cells_q)
    row_of = np.concatenate(cells_row)
    before = np.concatenate(cells_before)
    entropies = np.array([-float(c @ np.log(c)) for c in cells_p])
    s_l = np.log(p_cell) + entropies[row_of]  # the log-score term of each (row, token) cell
    var_l = np.asarray(var_rows)[row_of]  # its row's null variance
    mixture = ((1 - design.fraction) * p_cell + design.fraction * q_cell) / len(rows)
    mixture /= mixture.sum()
    z_crit = NORMAL.inv_cdf(1 - design.alpha / 2)
    rejections = 0
    for _ in range(replications):
        counts = rng.multinomial(n, mixture)
        z_l = float(counts @ s_l) / math.sqrt(max(float(counts @ var_l), 1e-300))
        pit_sum = float(counts @ (before + 0.5 * p_cell)) + float(np.repeat(p_cell, counts) @ (rng.random(n) - 0.5))
        z_u = (pit_sum - 0.5 * n) / math.sqrt(n / 12.0)
        rejections += int(abs(z_l) > z_crit or abs(z_u) > z_crit)
    return rejections / replications
