"""Float rounding in the early-exit gates: a counterexample without slack, and a slack proved sound.

The gates of :mod:`reference.certificate` compute margins, residual scores and thresholds in the
logits' dtype W (float32 on the engine's path). Two kinds of obligation:

FP-theory witnesses (z3's IEEE-754 sort Float32, round-to-nearest-even, every value finite):

- ``seed_gate_fooled``: the seed's gate as written, 2 Q <= gamma with no slack, in float32, with
  Q equal to the token's own computed sup-norm score (a quantile the calibration can produce):
  it admits, yet the full logits rank another token strictly first (t_1 > t_0 while the exit's
  top-1 is 0): the residual rounds down onto Q and the exact bound 2 ||e||_inf < gamma fails.
- ``naive_halfrange_fooled``: the half-range gate computed naively in float32 (max(e~) - min(e~)
  < gamma with e~ = fl(d - t), no allowance, no slack, strict) admits a strict flip: fl(d_j - t_j)
  errs relative to |e_j|, which can be far larger than the spread of e.

Real-arithmetic proofs under the standard rounding model (|fl(x) - x| <= u |x| for each listed
operation, u = 2^-24 for float32 and 2^-53 for float64; the operations are exactly those the
module docstring of reference.certificate lists as [M], [E_j], [R], [S], [B], [C]):

- ``supnorm_slack_sound[f32|f64]``: e~ rounded ([E]), s~ >= |e~_a|, |e~_j|, the conformal event
  s~ <= Q, margin rounded ([M]) from d_a - d_b with d_b >= d_j, threshold b~ = fl(Q + slack) [B],
  c~ = fl(b~ + b~) [C], slack >= 8 u Q, admitted c~ < margin  =>  t_a > t_j (exact, strict).
- ``halfrange_slack_sound[f32|f64]``: the same with hi >= e~_a, lo <= e~_j, big >= |e~_a|, |e~_j|,
  allowance A >= 8 u big, r~ = fl(hi - lo) [R], s~ = fl(r~ + A) [S], h~ >= s~/2 (halving rounded
  up), h~ <= Q  =>  t_a > t_j.
- ``halfrange_upper_bound[f32|f64]``: the computed half-range is an honest upper bound, without any
  gate: 2 h~ >= e_a - e_j for every pair, i.e. h~ >= (max e - min e)/2 exactly.

Both are pairwise (a = the exit's top-1, j any other id, b the runner-up), hence hold for every
vocabulary size. The ``*_needs_*`` witnesses show the model is not vacuous and the constants are
not arbitrary: the same hypotheses are satisfiable together with a flip when the slack is only
>= 4 u Q (sup-norm) or >= 2 u Q (half-range) instead of 8 u Q, and when the half-range allowance is
only >= u max|e~| instead of 8 u max|e~|. (Probing further, in the model the sup-norm gate needs
5 u Q, the half-range gate 3 u Q; the code's 8 keeps headroom, and the allowance of 8 u max|e~|
also makes h~ an upper bound of the exact half-range.)
The model is coarser than IEEE arithmetic: the strict sup-norm gate without slack may well be sound
in exact float32 (a grid argument suggests so), but the rounding model cannot see that, and a slack
of 2^-21 relative costs nothing.
"""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import z3

from verispec.proofs.core import Obligation, implies, rabs, rounded

U32 = Fraction(1, 2**24)
U64 = Fraction(1, 2**53)
SLACK_FACTOR = 8  # slack >= 8 u Q   (reference.certificate.SLACK_ULPS * spacing(Q) > 8 u Q)
ALLOWANCE_FACTOR = 8  # A >= 8 u max|e~|   (reference.certificate.ALLOWANCE_ULPS)

SUPNORM_CODE = (
    "verispec.reference.certificate.supnorm_admits",
    "verispec.reference.certificate.supnorm_residual_rows",
    "verispec.reference.certificate.rounding_slack",
    "verispec.reference.certificate.float32_slack",
    "verispec.reference.certificate.top2",
)
HALFRANGE_CODE = (
    "verispec.reference.certificate.halfrange_admits",
    "verispec.reference.certificate.halfrange_residual_rows",
    "verispec.reference.certificate.rounding_slack",
    "verispec.reference.certificate.float32_slack",
    "verispec.reference.certificate.top2",
)


def _real(x: Fraction) -> z3.ArithRef:
    result: z3.ArithRef = z3.RealVal(f"{x.numerator}/{x.denominator}")
    return result


def _gate(u: z3.ArithRef, slack_factor: int) -> tuple[list[z3.BoolRef], dict[str, z3.ArithRef]]:
    """Hypotheses shared by both gates: exact logits, margin [M], threshold [B], [C], admitted."""
    da, db, dj, ta, tj = z3.Reals("d_a d_b d_j t_a t_j")
    margin, quantile, slack, bound, doubled = z3.Reals("margin Q slack b c")
    hyps = [
        da >= db,
        db >= dj,  # b is the runner-up, j any id other than a (possibly b itself)
        rounded(da - db, margin, u),  # [M]
        quantile >= 0,
        slack >= slack_factor * u * quantile,
        rounded(quantile + slack, bound, u),  # [B]
        rounded(bound + bound, doubled, u),  # [C]
        doubled < margin,  # admitted
    ]
    names = {"d_a": da, "d_j": dj, "t_a": ta, "t_j": tj, "Q": quantile}
    return hyps, names


def _supnorm_hyps(u: z3.ArithRef, slack_factor: int) -> tuple[list[z3.BoolRef], dict[str, z3.ArithRef]]:
    hyps, v = _gate(u, slack_factor)
    ea, ej, score = z3.Reals("e~_a e~_j s~")
    hyps += [
        rounded(v["d_a"] - v["t_a"], ea, u),  # [E_a]
        rounded(v["d_j"] - v["t_j"], ej, u),  # [E_j]
        score >= rabs(ea),
        score >= rabs(ej),  # s~ = max |e~| (at least these two)
        score <= v["Q"],  # the conformal event
    ]
    return hyps, v


def _halfrange_score(
    u: z3.ArithRef, allowance_factor: int, v: dict[str, z3.ArithRef]
) -> tuple[list[z3.BoolRef], z3.ArithRef]:
    """The half-range score's computation for the pair (a, j): hypotheses and the score h~."""
    ea, ej, hi, lo, big, allowance, spread, total, half = z3.Reals("e~_a e~_j hi lo big A r~ s~ h~")
    hyps = [
        rounded(v["d_a"] - v["t_a"], ea, u),  # [E_a]
        rounded(v["d_j"] - v["t_j"], ej, u),  # [E_j]
        hi >= ea,
        lo <= ej,
        hi >= lo,  # hi = max e~, lo = min e~
        big >= rabs(ea),
        big >= rabs(ej),  # big = max |e~|
        allowance >= allowance_factor * u * big,
        rounded(hi - lo, spread, u),  # [R]
        rounded(spread + allowance, total, u),  # [S]
        2 * half >= total,  # halving rounded up
    ]
    return hyps, half


def _halfrange_hyps(
    u: z3.ArithRef, slack_factor: int, allowance_factor: int
) -> tuple[list[z3.BoolRef], dict[str, z3.ArithRef]]:
    hyps, v = _gate(u, slack_factor)
    score_hyps, half = _halfrange_score(u, allowance_factor, v)
    return hyps + score_hyps + [half <= v["Q"]], v  # the conformal event


def _halfrange_upper_bound(u: Fraction) -> z3.BoolRef:
    # no gate, no ordering of the logits: the score alone bounds every exact pairwise spread
    v = dict(zip(["d_a", "t_a", "d_j", "t_j"], z3.Reals("d_a t_a d_j t_j")))
    hyps, half = _halfrange_score(_real(u), ALLOWANCE_FACTOR, v)
    return implies(hyps, 2 * half >= (v["d_a"] - v["t_a"]) - (v["d_j"] - v["t_j"]))


def _supnorm_sound(u: Fraction) -> z3.BoolRef:
    hyps, v = _supnorm_hyps(_real(u), SLACK_FACTOR)
    return implies(hyps, v["t_a"] > v["t_j"])


def _halfrange_sound(u: Fraction) -> z3.BoolRef:
    hyps, v = _halfrange_hyps(_real(u), SLACK_FACTOR, ALLOWANCE_FACTOR)
    return implies(hyps, v["t_a"] > v["t_j"])


def _supnorm_needs_slack() -> z3.BoolRef:
    hyps, v = _supnorm_hyps(_real(U32), 4)
    result: z3.BoolRef = z3.And(*hyps, v["t_a"] <= v["t_j"])
    return result


def _halfrange_needs_slack() -> z3.BoolRef:
    hyps, v = _halfrange_hyps(_real(U32), 2, ALLOWANCE_FACTOR)
    result: z3.BoolRef = z3.And(*hyps, v["t_a"] <= v["t_j"])
    return result


def _halfrange_needs_allowance() -> z3.BoolRef:
    hyps, v = _halfrange_hyps(_real(U32), SLACK_FACTOR, 1)
    result: z3.BoolRef = z3.And(*hyps, v["t_a"] <= v["t_j"])
    return result


# --- FP theory -----------------------------------------------------------------------------------

F32 = z3.Float32()


def _fp_logits() -> tuple[list[z3.FPRef], list[z3.FPRef], list[z3.BoolRef]]:
    d = [z3.FP(f"d{j}", F32) for j in range(2)]
    t = [z3.FP(f"t{j}", F32) for j in range(2)]
    finite = [z3.Not(z3.Or(z3.fpIsNaN(x), z3.fpIsInf(x))) for x in d + t]
    # the witness may pick d = (1, +0): a search hint that keeps the bit-blasted query small
    return d, t, finite + [d[0] == z3.FPVal(1.0, F32), d[1] == z3.FPVal(0.0, F32)]


def _seed_gate_fooled() -> z3.BoolRef:
    rne = z3.RNE()
    d, t, hyps = _fp_logits()
    e = [z3.fpSub(rne, d[j], t[j]) for j in range(2)]
    score = z3.fpMax(z3.fpAbs(e[0]), z3.fpAbs(e[1]))  # s~, and Q := s~
    margin = z3.fpSub(rne, d[0], d[1])  # [M]
    doubled = z3.fpAdd(rne, score, score)  # 2 Q
    finite = [z3.Not(z3.Or(z3.fpIsNaN(x), z3.fpIsInf(x))) for x in [*e, margin, doubled]]
    admitted = z3.fpLEQ(doubled, margin)  # the seed's 2 Q <= gamma
    result: z3.BoolRef = z3.And(*hyps, *finite, z3.fpGT(d[0], d[1]), admitted, z3.fpGT(t[1], t[0]))
    return result


def _naive_halfrange_fooled() -> z3.BoolRef:
    rne = z3.RNE()
    d, t, hyps = _fp_logits()
    e = [z3.fpSub(rne, d[j], t[j]) for j in range(2)]
    spread = z3.fpSub(rne, z3.fpMax(e[0], e[1]), z3.fpMin(e[0], e[1]))  # max e~ - min e~
    margin = z3.fpSub(rne, d[0], d[1])
    finite = [z3.Not(z3.Or(z3.fpIsNaN(x), z3.fpIsInf(x))) for x in [*e, spread, margin]]
    admitted = z3.fpLT(spread, margin)  # strict, zero slack, no allowance
    result: z3.BoolRef = z3.And(*hyps, *finite, z3.fpGT(d[0], d[1]), admitted, z3.fpGT(t[1], t[0]))
    return result


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.float32.seed_gate_fooled",
        "SAT (Float32, RNE): Q = s~ = max|fl(d-t)|, fl(2Q) <= fl(d_0-d_1), d_0 > d_1, yet t_1 > t_0",
        _seed_gate_fooled,
        ("verispec.reference.certificate.supnorm_admits", "verispec.reference.certificate.rounding_slack"),
        kind="witness",
        rlimit=20_000_000,
    ),
    Obligation(
        "proofs.float32.naive_halfrange_fooled",
        "SAT (Float32, RNE): fl(max e~ - min e~) < fl(d_0-d_1), e~ = fl(d-t), d_0 > d_1, yet t_1 > t_0",
        _naive_halfrange_fooled,
        ("verispec.reference.certificate.halfrange_residual_rows",),
        kind="witness",
        rlimit=20_000_000,
    ),
    *[
        Obligation(
            f"proofs.float32.supnorm_slack_sound[{tag}]",
            f"u = {u}: [E],[M],[B],[C] rounded, s~ <= Q, slack >= 8uQ, fl(2 fl(Q+slack)) < margin => t_a > t_j",
            partial(_supnorm_sound, u),
            SUPNORM_CODE,
        )
        for tag, u in (("f32", U32), ("f64", U64))
    ],
    *[
        Obligation(
            f"proofs.float32.halfrange_slack_sound[{tag}]",
            f"u = {u}: [E],[R],[S],[M],[B],[C] rounded, A >= 8u max|e~|, h~ >= s~/2, h~ <= Q, slack >= 8uQ, "
            "admitted => t_a > t_j",
            partial(_halfrange_sound, u),
            HALFRANGE_CODE,
        )
        for tag, u in (("f32", U32), ("f64", U64))
    ],
    *[
        Obligation(
            f"proofs.float32.halfrange_upper_bound[{tag}]",
            f"u = {u}: [E],[R],[S] rounded, A >= 8u max|e~|, h~ >= s~/2 => 2 h~ >= e_a - e_j (exact, any a, j)",
            partial(_halfrange_upper_bound, u),
            ("verispec.reference.certificate.halfrange_residual_rows",),
        )
        for tag, u in (("f32", U32), ("f64", U64))
    ],
    Obligation(
        "proofs.float32.supnorm_needs_slack",
        "SAT (u = 2^-24): the sup-norm hypotheses with slack >= 4uQ only (not 8uQ), and t_a <= t_j",
        _supnorm_needs_slack,
        ("verispec.reference.certificate.rounding_slack",),
        kind="witness",
    ),
    Obligation(
        "proofs.float32.halfrange_needs_slack",
        "SAT (u = 2^-24): the half-range hypotheses with slack >= 2uQ only (not 8uQ), and t_a <= t_j",
        _halfrange_needs_slack,
        ("verispec.reference.certificate.rounding_slack",),
        kind="witness",
    ),
    Obligation(
        "proofs.float32.halfrange_needs_allowance",
        "SAT (u = 2^-24): the half-range hypotheses with allowance A >= 1u max|e~| only (not 8u), and t_a <= t_j",
        _halfrange_needs_allowance,
        ("verispec.reference.certificate.halfrange_residual_rows",),
        kind="witness",
    ),
]
