"""Tukey's bisquare with its scale tied to the certificate: c = gamma / 2.

    rho(r) = c^2/6 * (1 - (1 - (r/c)^2)^3)   if |r| <= c,   else c^2/6
    w(r)   = (1 - (r/c)^2)^2                 if |r| <= c,   else 0        (IRLS weight, psi(r)/r)

With c = gamma/2 the bisquare's "bowl" {r : rho(r) < c^2/6} is exactly the open interval where
the sup-norm certificate holds coordinate-wise, so a fit weighted by w (a tuned lens fit by
iteratively reweighted least squares, say) spends its effort on residuals that can still be
certified and none on residuals that cannot. The obligations:

- ``rho_branches_agree``: the two branches meet at |r| = c (rho is continuous);
- ``rho_below_cap_iff_inside``: rho(r) < c^2/6  <=>  |r| < c;
- ``weight_positive_iff_inside``: w(r) > 0  <=>  |r| < c;
- ``rho_monotone``: |r1| <= |r2|  =>  rho(r1) <= rho(r2);
- ``bowl_preserves_argmax`` (pairwise, any n): d_a - d_b >= gamma > 0, c = gamma/2,
  rho(e_a) < c^2/6, rho(e_b) < c^2/6  =>  t_a > t_b; with ``proofs.argmax.pairwise_margin`` applied
  to each j != a: every residual inside the bowl => the argmax is preserved.
"""

from __future__ import annotations

import z3

from verispec.proofs.core import Obligation, implies, rabs

RHO = "verispec.reference.certificate.bisquare_rho"
WEIGHT = "verispec.reference.certificate.bisquare_weight"
BOWL = "verispec.reference.certificate.inside_bowl"


def rho(r: z3.ArithRef, c: z3.ArithRef) -> z3.ArithRef:
    """Tukey's bisquare loss with scale c (> 0)."""
    x2 = (r / c) * (r / c)
    inner = 1 - x2
    result: z3.ArithRef = z3.If(rabs(r) <= c, c * c / 6 * (1 - inner * inner * inner), c * c / 6)
    return result


def weight(r: z3.ArithRef, c: z3.ArithRef) -> z3.ArithRef:
    """Tukey's bisquare IRLS weight with scale c (> 0)."""
    inner = 1 - (r / c) * (r / c)
    result: z3.ArithRef = z3.If(rabs(r) <= c, inner * inner, 0)
    return result


def _branches_agree() -> z3.BoolRef:
    r, c = z3.Reals("r c")
    inner = 1 - (r / c) * (r / c)
    return implies([c > 0, rabs(r) == c], c * c / 6 * (1 - inner * inner * inner) == c * c / 6)


def _below_cap_iff_inside() -> z3.BoolRef:
    r, c = z3.Reals("r c")
    return implies([c > 0], (rho(r, c) < c * c / 6) == (rabs(r) < c))


def _weight_positive_iff_inside() -> z3.BoolRef:
    r, c = z3.Reals("r c")
    return implies([c > 0], (weight(r, c) > 0) == (rabs(r) < c))


def _monotone() -> z3.BoolRef:
    r1, r2, c = z3.Reals("r1 r2 c")
    return implies([c > 0, rabs(r1) <= rabs(r2)], rho(r1, c) <= rho(r2, c))


def _bowl_preserves_argmax() -> z3.BoolRef:
    da, db, ta, tb, gamma = z3.Reals("d_a d_b t_a t_b gamma")
    c = gamma / 2
    cap = c * c / 6
    hyps = [gamma > 0, da - db >= gamma, rho(da - ta, c) < cap, rho(db - tb, c) < cap]
    return implies(hyps, ta > tb)


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.tukey.rho_branches_agree",
        "c > 0, |r| = c => c^2/6 (1 - (1 - (r/c)^2)^3) = c^2/6   (rho is continuous at the bowl's rim)",
        _branches_agree,
        (RHO,),
    ),
    Obligation(
        "proofs.tukey.rho_below_cap_iff_inside",
        "c > 0 => (rho(r) < c^2/6 <=> |r| < c)",
        _below_cap_iff_inside,
        (RHO, BOWL),
    ),
    Obligation(
        "proofs.tukey.weight_positive_iff_inside",
        "c > 0 => ((1 - (r/c)^2)^2 [|r| <= c, else 0] > 0 <=> |r| < c)",
        _weight_positive_iff_inside,
        (WEIGHT,),
    ),
    Obligation(
        "proofs.tukey.rho_monotone",
        "c > 0, |r1| <= |r2| => rho(r1) <= rho(r2)   (rho nondecreasing in |r|)",
        _monotone,
        (RHO,),
    ),
    Obligation(
        "proofs.tukey.bowl_preserves_argmax",
        "gamma > 0, c = gamma/2, d_a-d_b >= gamma, rho(d_a-t_a) < c^2/6, rho(d_b-t_b) < c^2/6 => t_a > t_b",
        _bowl_preserves_argmax,
        (BOWL,),
    ),
]
