"""Argmax invariance: when a perturbation of the logits cannot change the top-1 token.

Notation: d are the exit (draft) logits, t the full model's logits, e = d - t the residual. The
exit's top-1 token is a with margin gamma (d_a - d_j >= gamma for every j != a; top-1 minus top-2
is the largest such gamma). argmax is taken with the lowest id winning ties, so "argmax t = a" is
implied by t_a > t_j for every j != a, which is what every obligation below concludes.

- ``pairwise_margin`` (n-independent): d_a - d_b >= gamma, |e_a| < tau, |e_b| < tau, 2 tau <= gamma
  => t_a > t_b. Applying it to each pair (a, j) is the whole proof for any vocabulary size;
  ``draft_margin[n]`` checks the vector statement directly for n = 2..8 and every choice of a.
- ``truth_margin*``: the seed's form, with the margin measured on the full logits t: then the exit's
  argmax equals the full argmax (useful when calibrating, where t is known; at serve time only d is).
- ``halfrange*`` (shift invariance): argmax ignores a common shift of all logits, so only the spread
  of e matters: max(e) - min(e) < gamma => argmax preserved. ``halfrange_tighter`` shows the
  sup-norm certificate implies it (max e - min e <= 2 ||e||_inf), so the half-range gate admits
  whenever the sup-norm gate does, and more.
- ``exact_gate_*``: the conformal event is non-strict (score <= Q), so the gate must be strict
  (2 Q < gamma) to yield the strict certificate: take tau = gamma / 2 > Q.
- Tightness (witnesses, must be satisfiable): with 2 tau > gamma a strict flip exists (and
  ``wide_gap_flip_everywhere`` constructs one for every gamma > 0 and every tau > gamma/2); with the
  non-strict bound |e_j| <= tau and 2 tau = gamma a flip exists when the exit's top-1 has the higher
  id (the tie then goes to the lower id); likewise max e - min e <= gamma for the half-range form.
"""

from __future__ import annotations

from functools import partial

import z3

from verispec.proofs.core import Obligation, implies, rabs, reals

SIZES = range(2, 9)
SUPNORM_CODE = ("verispec.reference.certificate.supnorm_admits",)
HALFRANGE_CODE = ("verispec.reference.certificate.halfrange_admits",)
MARGIN_CODE = ("verispec.reference.certificate.top2",)  # what the margin it returns buys


def _pairwise_margin() -> z3.BoolRef:
    da, db, ta, tb, tau, gamma = z3.Reals("d_a d_b t_a t_b tau gamma")
    hyps = [da - db >= gamma, rabs(da - ta) < tau, rabs(db - tb) < tau, 2 * tau <= gamma]
    return implies(hyps, ta > tb)


def _top_is(i: int, v: list[z3.ArithRef], gamma: z3.ArithRef) -> list[z3.BoolRef]:
    return [v[i] - v[j] >= gamma for j in range(len(v)) if j != i]


def _strict_top(i: int, v: list[z3.ArithRef]) -> z3.BoolRef:
    result: z3.BoolRef = z3.And(*[v[i] > v[j] for j in range(len(v)) if j != i])
    return result


def _draft_margin(n: int) -> z3.BoolRef:
    d, t = reals("d", n), reals("t", n)
    tau, gamma = z3.Reals("tau gamma")
    close = [rabs(d[j] - t[j]) < tau for j in range(n)] + [2 * tau <= gamma]
    claims = [implies(_top_is(i, d, gamma) + close, _strict_top(i, t)) for i in range(n)]
    result: z3.BoolRef = z3.And(*claims)
    return result


def _truth_margin_pairwise() -> z3.BoolRef:
    da, db, ta, tb, tau, gamma = z3.Reals("d_a d_b t_a t_b tau gamma")
    hyps = [ta - tb >= gamma, rabs(da - ta) < tau, rabs(db - tb) < tau, 2 * tau <= gamma]
    return implies(hyps, da > db)


def _truth_margin(n: int) -> z3.BoolRef:
    d, t = reals("d", n), reals("t", n)
    tau, gamma = z3.Reals("tau gamma")
    close = [rabs(d[j] - t[j]) < tau for j in range(n)] + [2 * tau <= gamma]
    claims = [implies(_top_is(i, t, gamma) + close, _strict_top(i, d)) for i in range(n)]
    result: z3.BoolRef = z3.And(*claims)
    return result


def _halfrange_pairwise() -> z3.BoolRef:
    da, db, ta, tb, gamma = z3.Reals("d_a d_b t_a t_b gamma")
    return implies([da - db >= gamma, (da - ta) - (db - tb) < gamma], ta > tb)


def _halfrange(n: int) -> z3.BoolRef:
    d, t = reals("d", n), reals("t", n)
    hi, lo, gamma = z3.Reals("hi lo gamma")
    spread = [hi >= d[j] - t[j] for j in range(n)] + [lo <= d[j] - t[j] for j in range(n)]
    spread.append(hi - lo < gamma)
    claims = [implies(_top_is(i, d, gamma) + spread, _strict_top(i, t)) for i in range(n)]
    result: z3.BoolRef = z3.And(*claims)
    return result


def _halfrange_tighter(n: int) -> z3.BoolRef:
    e = reals("e", n)
    hi, lo, tau = z3.Reals("hi lo tau")
    hyps = [rabs(x) < tau for x in e]
    hyps += [z3.Or(*[hi == x for x in e])] + [hi >= x for x in e]  # hi = max e
    hyps += [z3.Or(*[lo == x for x in e])] + [lo <= x for x in e]  # lo = min e
    return implies(hyps, hi - lo < 2 * tau)


def _exact_gate_supnorm() -> z3.BoolRef:
    da, db, ta, tb, quantile, gamma = z3.Reals("d_a d_b t_a t_b Q gamma")
    hyps = [da - db >= gamma, rabs(da - ta) <= quantile, rabs(db - tb) <= quantile]
    return implies(hyps + [2 * quantile < gamma], ta > tb)


def _exact_gate_halfrange() -> z3.BoolRef:
    da, db, ta, tb, quantile, gamma = z3.Reals("d_a d_b t_a t_b Q gamma")
    # the half-range score H = (max e - min e)/2 bounds every pairwise spread by 2H; H <= Q
    hyps = [da - db >= gamma, (da - ta) - (db - tb) <= 2 * quantile]
    return implies(hyps + [2 * quantile < gamma], ta > tb)


def _wide_gap_flip() -> z3.BoolRef:
    d, t = reals("d", 2), reals("t", 2)
    tau, gamma = z3.Reals("tau gamma")
    hyps = [d[0] - d[1] >= gamma, gamma > 0, 2 * tau > gamma]
    hyps += [rabs(d[j] - t[j]) < tau for j in range(2)]
    result: z3.BoolRef = z3.And(*hyps, t[1] > t[0])
    return result


def _wide_gap_flip_everywhere() -> z3.BoolRef:
    # for EVERY gamma > 0 and tau > gamma/2 an explicit flip: d = (gamma, 0), t = (gamma - m, m)
    # with m = (gamma/2 + tau)/2 strictly between gamma/2 and tau
    tau, gamma = z3.Reals("tau gamma")
    m = (gamma / 2 + tau) / 2
    d, t = [gamma, z3.RealVal(0)], [gamma - m, m]
    flip = [d[0] - d[1] >= gamma] + [rabs(d[j] - t[j]) < tau for j in range(2)] + [t[1] > t[0]]
    return implies([gamma > 0, 2 * tau > gamma], z3.And(*flip))


def _boundary_flip() -> z3.BoolRef:
    d, t = reals("d", 2), reals("t", 2)
    tau, gamma = z3.Reals("tau gamma")
    hyps = [d[1] - d[0] >= gamma, gamma > 0, 2 * tau == gamma]
    hyps += [rabs(d[j] - t[j]) <= tau for j in range(2)]
    result: z3.BoolRef = z3.And(*hyps, t[0] >= t[1])  # tie -> lowest id 0 wins: a flip
    return result


def _halfrange_boundary_flip() -> z3.BoolRef:
    d, t = reals("d", 2), reals("t", 2)
    gamma = z3.Real("gamma")
    e = [d[j] - t[j] for j in range(2)]
    hyps = [d[1] - d[0] >= gamma, gamma > 0, rabs(e[1] - e[0]) <= gamma]
    result: z3.BoolRef = z3.And(*hyps, t[0] >= t[1])
    return result


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.argmax.pairwise_margin",
        "d_a-d_b >= gamma, |d_a-t_a| < tau, |d_b-t_b| < tau, 2tau <= gamma => t_a > t_b   (any n)",
        _pairwise_margin,
        SUPNORM_CODE + MARGIN_CODE,
    ),
    *[
        Obligation(
            f"proofs.argmax.draft_margin[n={n}]",
            f"n={n}, every a: d_a-d_j >= gamma (j!=a), ||d-t||_inf < tau, 2tau <= gamma => t_a > t_j (j!=a)",
            partial(_draft_margin, n),
            SUPNORM_CODE,
        )
        for n in SIZES
    ],
    Obligation(
        "proofs.argmax.truth_margin_pairwise",
        "t_a-t_b >= gamma, |d_a-t_a| < tau, |d_b-t_b| < tau, 2tau <= gamma => d_a > d_b   (seed's form)",
        _truth_margin_pairwise,
        SUPNORM_CODE,
    ),
    *[
        Obligation(
            f"proofs.argmax.truth_margin[n={n}]",
            f"n={n}, every a: t_a-t_j >= gamma (j!=a), ||d-t||_inf < tau, 2tau <= gamma => d_a > d_j (j!=a)",
            partial(_truth_margin, n),
            SUPNORM_CODE,
        )
        for n in SIZES
    ],
    Obligation(
        "proofs.argmax.halfrange_pairwise",
        "d_a-d_b >= gamma, (d_a-t_a)-(d_b-t_b) < gamma => t_a > t_b   (shift-invariant, any n)",
        _halfrange_pairwise,
        HALFRANGE_CODE + MARGIN_CODE,
    ),
    *[
        Obligation(
            f"proofs.argmax.halfrange[n={n}]",
            f"n={n}, every a: d_a-d_j >= gamma (j!=a), lo <= d-t <= hi, hi-lo < gamma => t_a > t_j (j!=a)",
            partial(_halfrange, n),
            HALFRANGE_CODE,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.argmax.halfrange_tighter[n={n}]",
            f"n={n}: ||e||_inf < tau => max(e) - min(e) < 2tau   (half-range gate admits whatever sup-norm admits)",
            partial(_halfrange_tighter, n),
            HALFRANGE_CODE,
        )
        for n in SIZES
    ],
    Obligation(
        "proofs.argmax.exact_gate_supnorm",
        "d_a-d_b >= gamma, |e_a| <= Q, |e_b| <= Q, 2Q < gamma => t_a > t_b   (strict gate, non-strict score)",
        _exact_gate_supnorm,
        SUPNORM_CODE,
    ),
    Obligation(
        "proofs.argmax.exact_gate_halfrange",
        "d_a-d_b >= gamma, e_a-e_b <= 2Q, 2Q < gamma => t_a > t_b   (half-range score <= Q, strict gate)",
        _exact_gate_halfrange,
        HALFRANGE_CODE,
    ),
    Obligation(
        "proofs.argmax.wide_gap_flip",
        "SAT: d_0-d_1 >= gamma > 0, |d_j-t_j| < tau, 2tau > gamma, t_1 > t_0   (2tau > gamma is not enough)",
        _wide_gap_flip,
        SUPNORM_CODE,
        kind="witness",
    ),
    Obligation(
        "proofs.argmax.wide_gap_flip_everywhere",
        "every gamma > 0, 2tau > gamma: d=(gamma,0), t=(gamma-m,m), m=(gamma/2+tau)/2 has |e_j| < tau and t_1 > t_0",
        _wide_gap_flip_everywhere,
        SUPNORM_CODE,
    ),
    Obligation(
        "proofs.argmax.boundary_flip",
        "SAT: d_1-d_0 >= gamma > 0, |d_j-t_j| <= tau, 2tau = gamma, t_0 >= t_1   (non-strict bound flips via tie)",
        _boundary_flip,
        SUPNORM_CODE,
        kind="witness",
    ),
    Obligation(
        "proofs.argmax.halfrange_boundary_flip",
        "SAT: d_1-d_0 >= gamma > 0, |e_1-e_0| <= gamma, t_0 >= t_1   (non-strict half-range bound flips)",
        _halfrange_boundary_flip,
        HALFRANGE_CODE,
        kind="witness",
    ),
]
