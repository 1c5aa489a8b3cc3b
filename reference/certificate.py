"""The early-exit certificate: top-2 margin, residual scores, and the gates that admit an exit.

The claim. Let d be the exit logits at layer k, t the full model's logits, e = d - t, and let the
exit's top-1 token a have margin gamma = d_a - d_b (b the runner-up). If every pairwise spread of
e is below gamma -- in particular if ||e||_inf < gamma/2 (sup-norm form) or max(e) - min(e) < gamma
(half-range form, shift-invariant) -- then argmax t = a. t is unknown at serve time, so the score
(``supnorm_residual`` or ``halfrange_residual``) is replaced by a calibrated bound Q
(:mod:`reference.calibration`: prompt-level risk control on "fraction of a prompt's tokens whose
score exceeds Q", :func:`reference.conformal.prompt_risk_threshold`); the gate then admits when
2 (Q + slack) < gamma. What this module proves is the deterministic part (score <= Q and the gate
admits => no flip); the probability claim is the calibration's, over K depths: "expected flip
fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable".

Why the gates are strict. The conformal event is non-strict (score <= Q), and the certificate
needs a strict bound: at 2 Q = gamma a flip exists (proved: proofs.argmax.boundary_flip). The
seed wrote the gate as 2 Q <= gamma; here it is 2 (Q + slack) < gamma.

THE FLOAT COMPUTATION (exactly what proofs.float32 models). The working dtype W is the dtype of the
logits, float32 or float64, with unit roundoff u = 2^-24 or 2^-53; every arithmetic operation
below is performed in W, once, round-to-nearest-even, and every other step is exact:

    top2:       a = argmax d (lowest id on ties); b = runner-up        (comparisons: exact)
                [M] margin = fl(d_a - d_b)
    supnorm:    [E_j] e~_j = fl(d_j - t_j) for each j
                s~ = max_j |e~_j|                                       (abs, max: exact)
    halfrange:  [E_j] e~_j = fl(d_j - t_j);  hi = max e~, lo = min e~, big = max |e~|  (exact)
                A = 8 * spacing(big)            (exact; A > 8 u big: covers the rounding of the
                                                 e~_j, which is relative to |e|, not to the range)
                [R] r~ = fl(hi - lo);  [S] s~ = fl(r~ + A)
                h~ = s~ / 2 rounded UP          (exact unless s~ is subnormal; then the next float)
    gate:       [B] b~ = fl(Q + slack);  [C] c~ = fl(b~ + b~);  admit iff c~ < margin (exact)
    slack:      slack = 8 * spacing(Q)          (exact; slack > 8 u Q)

Each operation [X] satisfies |fl(x) - x| <= u |x| because every operand is a finite value of W, the
operation is + or -, and the result is checked finite (additions and subtractions are exact in the
subnormal range, so gradual underflow adds no error); a gate whose [B] or [C] overflows returns
False, which claims nothing. proofs.float32.supnorm_slack_sound and halfrange_slack_sound prove
that with this slack an admitted token cannot flip whenever its computed score is <= Q.
proofs.float32.seed_gate_fooled shows the seed's float32 gate (2 Q <= gamma, no slack) admitting a
token whose argmax flips.

The margin gate (``margin_admits``) needs no slack: its threshold is calibrated on the very same
float computation ([M]) it is compared with, and the flip it controls is judged exactly.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CertificateError

FloatArray = npt.NDArray[np.floating[Any]]
ResidualKind = Literal["supnorm", "halfrange"]
RESIDUAL_KINDS: tuple[ResidualKind, ...] = ("supnorm", "halfrange")

SLACK_ULPS = 8
"""slack = SLACK_ULPS * spacing(Q) > 8 u Q (proofs.float32: 8 u Q suffices; 4 u Q does not)."""

ALLOWANCE_ULPS = 8
"""halfrange allowance = ALLOWANCE_ULPS * spacing(max |e~|) > 8 u max |e~| (proofs.float32)."""


def working_dtype(*arrays: npt.ArrayLike) -> type[np.floating[Any]]:
    """The common float dtype of the arrays, float32 or float64; anything else is an error."""
    kinds = {np.asarray(a).dtype for a in arrays}
    if len(kinds) != 1:
        raise CertificateError(f"certificate inputs must share one dtype, got {sorted(map(str, kinds))}")
    (kind,) = kinds
    if kind == np.float32:
        return np.float32
    if kind == np.float64:
        return np.float64
    raise CertificateError(f"certificate inputs must be float32 or float64, got {kind}")


def unit_roundoff(dtype: type[np.floating[Any]]) -> float:
    """u = 2^-24 for float32, 2^-53 for float64 (half the machine epsilon)."""
    return float(np.finfo(dtype).eps) / 2


def _finite_rows(logits: npt.ArrayLike, name: str) -> FloatArray:
    rows = np.asarray(logits)
    working_dtype(rows)
    if rows.ndim < 1 or rows.shape[-1] < 2:
        raise CertificateError(f"{name} needs at least 2 logits per row, got shape {rows.shape}")
    if not bool(np.all(np.isfinite(rows))):
        raise CertificateError(f"{name} contains NaN or inf")
    return rows


def top2_rows(logits: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Top-1 ids and top-1 minus top-2 margins of logit rows [..., V], V >= 2, finite.

    ids: argmax with the lowest id winning ties; margins: fl(d_a - d_b) in the logits' dtype
    ([M] in the module docstring), 0 when the top value is tied. Returns ([...] int64, [...] W).
    """
    rows = _finite_rows(logits, "logits")  # [..., V]
    v = rows.shape[-1]
    ids = np.asarray(np.argmax(rows, axis=-1), dtype=np.int64)  # [...]: first occurrence = lowest id
    top = np.partition(rows, v - 2, axis=-1)  # [..., V]: [..., V-2] is the runner-up value
    with np.errstate(over="ignore"):  # an overflow is reported below as an error
        margins = np.asarray(top[..., v - 1] - top[..., v - 2], dtype=rows.dtype)  # [...] in W
    if not bool(np.all(np.isfinite(margins))):
        raise CertificateError("logit margin overflowed")
    return ids, margins


def top2(logits: npt.ArrayLike) -> tuple[int, float]:
    """(top-1 id, margin) of one logit row [V]: lowest id on ties (margin 0 then).

    The margin is fl(top1 - top2) in the logits' dtype, returned as the exactly equal Python float.
    proved: proofs.argmax.pairwise_margin, proofs.argmax.halfrange_pairwise (what the margin buys);
    proofs.float32.supnorm_slack_sound, proofs.float32.halfrange_slack_sound (its rounding, [M]).
    """
    rows = np.asarray(logits)
    if rows.ndim != 1:
        raise CertificateError(f"top2 takes one row [V], got shape {rows.shape}")
    ids, margins = top2_rows(rows)
    return int(ids), float(margins)


def _residual_rows(d: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
    d_rows = _finite_rows(d, "exit logits")
    t_rows = _finite_rows(t, "full logits")
    working_dtype(d_rows, t_rows)
    if d_rows.shape != t_rows.shape:
        raise CertificateError(f"exit logits {d_rows.shape} and full logits {t_rows.shape} differ in shape")
    with np.errstate(over="ignore"):  # an overflow is reported below as an error
        e = np.asarray(d_rows - t_rows, dtype=d_rows.dtype)  # [..., V]: [E_j], in W
    if not bool(np.all(np.isfinite(e))):
        raise CertificateError("residual d - t overflowed")
    return e


def supnorm_residual_rows(d: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
    """s~ = max_j |fl(d_j - t_j)| per row of [..., V] logits; returns [...] in the working dtype.

    The computed sup-norm of the residual e = d - t (ops [E_j]; abs and max are exact).
    proved: proofs.float32.supnorm_slack_sound (the rounding of [E_j] is covered by the slack).
    """
    e = _residual_rows(d, t)  # [..., V]
    return np.asarray(np.max(np.abs(e), axis=-1), dtype=e.dtype)  # [...]


def supnorm_residual(d: npt.ArrayLike, t: npt.ArrayLike) -> float:
    """The computed sup-norm residual of one row pair [V] (see :func:`supnorm_residual_rows`)."""
    return float(supnorm_residual_rows(d, t))


def halfrange_residual_rows(d: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
    """h~ >= (max(e) - min(e)) / 2 per row of [..., V] logits, computed as in the module docstring.

    The half-range of e = d - t, with an allowance for the rounding of e itself: because argmax is
    shift-invariant only the spread of e matters, but fl(d_j - t_j) errs by up to u |e_j|, which a
    large common shift makes large relative to the spread, so h~ adds A = 8 spacing(max |e~|)
    before halving (rounding up). Guarantee: h~ >= (max(e) - min(e))/2 exactly, e the exact
    residual of the float values. Comparable to the sup-norm score ((max e - min e)/2 <= ||e||_inf).
    proved: proofs.float32.halfrange_upper_bound, proofs.float32.halfrange_slack_sound; why the allowance: proofs.float32.naive_halfrange_fooled
    (a half-range computed without it admits a flip in float32) and
    proofs.float32.halfrange_needs_allowance (1 u max|e~| is not enough in the rounding model).
    """
    e = _residual_rows(d, t)  # [..., V] in W
    w = e.dtype.type
    hi = np.max(e, axis=-1)  # [...]
    lo = np.min(e, axis=-1)  # [...]
    big = np.max(np.abs(e), axis=-1)  # [...]
    with np.errstate(over="ignore"):  # an overflow is reported below as an error
        allowance = np.asarray(np.spacing(big) * w(ALLOWANCE_ULPS), dtype=e.dtype)  # exact: power of 2
        spread = np.asarray(hi - lo, dtype=e.dtype)  # [R]
        total = np.asarray(spread + allowance, dtype=e.dtype)  # [S]
    if not bool(np.all(np.isfinite(total))):
        raise CertificateError("half-range residual overflowed")
    half = np.asarray(total * w(0.5), dtype=e.dtype)  # exact unless total is subnormal
    rounded_down = half + half < total
    half = np.where(rounded_down, np.nextafter(half, w(np.inf)), half)  # round the halving UP
    return np.asarray(half, dtype=e.dtype)


def halfrange_residual(d: npt.ArrayLike, t: npt.ArrayLike) -> float:
    """The computed half-range residual of one row pair [V] (see :func:`halfrange_residual_rows`)."""
    return float(halfrange_residual_rows(d, t))


def residual_rows(kind: ResidualKind, d: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
    """The residual score of ``kind`` ("supnorm" or "halfrange") per row [...] of [..., V] logits."""
    if kind == "supnorm":
        return supnorm_residual_rows(d, t)
    if kind == "halfrange":
        return halfrange_residual_rows(d, t)
    raise CertificateError(f"unknown residual kind {kind!r}; expected one of {RESIDUAL_KINDS}")


def _exact_in(value: float, dtype: type[np.floating[Any]], name: str) -> np.floating[Any]:
    if np.isnan(value):
        raise CertificateError(f"{name} is NaN")
    cast = dtype(value)
    if float(cast) != float(value):
        raise CertificateError(
            f"{name} {value!r} is not a {np.dtype(dtype).name} value: a gate must see exactly the "
            "numbers its working dtype computed (calibrate and serve in the same dtype)"
        )
    return cast


def rounding_slack(quantile: float, dtype: type[np.floating[Any]] = np.float32) -> float:
    """slack = 8 * spacing(Q) in ``dtype`` (exact), so slack > 8 u Q; +inf for Q = +inf.

    proved: proofs.float32.supnorm_slack_sound, proofs.float32.halfrange_slack_sound (any
    slack >= 8 u Q makes the gates sound under the float computation of the module docstring);
    why a slack at all: proofs.float32.seed_gate_fooled; why not less: proofs.float32.supnorm_needs_slack,
    proofs.float32.halfrange_needs_slack (4 u Q, resp. 2 u Q, is not enough in the rounding model).
    Q must be a non-negative value of ``dtype`` (a residual quantile).
    """
    q = _exact_in(quantile, dtype, "quantile")
    if q < 0:
        raise CertificateError(f"quantile {quantile!r} is negative; residual scores are >= 0")
    if np.isinf(q):
        return float("inf")
    with np.errstate(over="ignore"):  # spacing(max finite) is +inf: the gate then refuses
        return float(np.spacing(q) * dtype(SLACK_ULPS))


def float32_slack(quantile: float) -> float:
    """The float32 gate's slack for a float32 quantile Q: 8 * spacing(Q) > 8 * 2^-24 * Q.

    proved: proofs.float32.supnorm_slack_sound[f32], proofs.float32.halfrange_slack_sound[f32].
    """
    return rounding_slack(quantile, np.float32)


def _residual_gate(margin: float, quantile: float, slack: float | None, dtype: type[np.floating[Any]]) -> bool:
    gamma = _exact_in(margin, dtype, "margin")
    q = _exact_in(quantile, dtype, "quantile")
    if q < 0:
        raise CertificateError(f"quantile {quantile!r} is negative; residual scores are >= 0")
    s = _exact_in(rounding_slack(quantile, dtype) if slack is None else slack, dtype, "slack")
    if s < 0:
        raise CertificateError(f"slack {slack!r} is negative")
    with np.errstate(over="ignore"):  # an overflowing threshold is +inf: the gate then refuses
        bound = dtype(q + s)  # [B]
        doubled = dtype(bound + bound)  # [C]
    return bool(doubled < gamma)


def supnorm_admits(
    margin: float, quantile: float, slack: float | None = None, dtype: type[np.floating[Any]] = np.float32
) -> bool:
    """The sup-norm gate: admit iff fl(2 fl(Q + slack)) < margin, all in ``dtype`` ([B], [C]).

    Guarantee: if the token's computed sup-norm residual s~ (:func:`supnorm_residual`, same dtype)
    satisfies s~ <= Q and the gate admits with slack >= 8 u Q (the default,
    :func:`rounding_slack`), then the full model's argmax equals the exit's top-1 (unique, so no
    tie-breaking question). With Q calibrated at alpha/K per depth over prompts, a new prompt's
    expected fraction of tokens above Q at this depth is <= alpha/K (prompts exchangeable).
    proved: proofs.argmax.pairwise_margin, proofs.argmax.draft_margin, proofs.argmax.exact_gate_supnorm,
    proofs.float32.supnorm_slack_sound; the seed's form with the margin of the full logits t:
    proofs.argmax.truth_margin_pairwise, proofs.argmax.truth_margin; tightness (2 tau <= gamma
    cannot be relaxed, the gate must be strict): proofs.argmax.wide_gap_flip,
    proofs.argmax.wide_gap_flip_everywhere, proofs.argmax.boundary_flip; float32 without slack:
    proofs.float32.seed_gate_fooled.
    ``margin``, ``quantile`` and ``slack`` must be exact values of ``dtype``; Q = +inf never admits.
    """
    return _residual_gate(margin, quantile, slack, dtype)


def halfrange_admits(
    margin: float, quantile: float, slack: float | None = None, dtype: type[np.floating[Any]] = np.float32
) -> bool:
    """The half-range gate: admit iff fl(2 fl(Q + slack)) < margin, with Q a quantile of h~.

    Guarantee: if the token's computed half-range residual h~ (:func:`halfrange_residual`, same
    dtype) satisfies h~ <= Q and the gate admits with slack >= 8 u Q (the default), then the full
    model's argmax equals the exit's top-1. In exact arithmetic the half-range never exceeds the
    sup-norm, so at the same level its quantile is no larger and it admits at least as often, up to
    its rounding allowance of 8 ulps of max|e~|; it is unaffected by a common shift of the logits.
    proved: proofs.argmax.halfrange_pairwise, proofs.argmax.halfrange, proofs.argmax.exact_gate_halfrange,
    proofs.argmax.halfrange_tighter, proofs.float32.halfrange_slack_sound; tightness:
    proofs.argmax.halfrange_boundary_flip.
    """
    return _residual_gate(margin, quantile, slack, dtype)


def residual_admits(
    kind: ResidualKind,
    margin: float,
    quantile: float,
    slack: float | None = None,
    dtype: type[np.floating[Any]] = np.float32,
) -> bool:
    """:func:`supnorm_admits` or :func:`halfrange_admits` by ``kind``."""
    if kind == "supnorm":
        return supnorm_admits(margin, quantile, slack, dtype)
    if kind == "halfrange":
        return halfrange_admits(margin, quantile, slack, dtype)
    raise CertificateError(f"unknown residual kind {kind!r}; expected one of {RESIDUAL_KINDS}")


def margin_admits(margin: float, threshold: float) -> bool:
    """The margin gate: admit iff margin > threshold (strict; NaN never admits).

    Guarantee: with ``threshold`` from :func:`reference.conformal.prompt_risk_threshold` at
    alpha/K over K depths, a new prompt's expected fraction of tokens admitted here and flipped is
    <= alpha/K, and over the K depths: "expected flip fraction of a new prompt ≤ α, valid when
    prompts (not tokens) are exchangeable" (conformal risk control over prompts plus the union).
    proved: proofs.union.first_exit_event, proofs.union.bonferroni_joint,
    proofs.conformal.flip_fraction_union; cited: Angelopoulos et
    al., "Conformal Risk Control" (ICLR 2024), Thm 1. The comparison matches the loss used in
    calibration exactly (admitted iff margin > threshold), so no float slack is involved.
    """
    return bool(margin > threshold)


# --- Tukey's bisquare with c = gamma / 2: a robust loss whose bowl is the certificate -------------


def bisquare_rho(r: npt.ArrayLike, c: float) -> npt.NDArray[np.float64]:
    """Tukey's bisquare rho(r) = c^2/6 (1 - (1 - (r/c)^2)^3) for |r| <= c, else c^2/6 (float64).

    With c = gamma/2, rho(r) < c^2/6 iff |r| < c, so "every residual inside the bowl" is the
    sup-norm certificate. In float64 the branch test is exact and the outer branch returns the
    cap exactly, so a computed rho < cap still implies |r| < c (rounding can only push an inside
    residual up to the cap, never an outside one below it).
    proved: proofs.tukey.rho_branches_agree, proofs.tukey.rho_below_cap_iff_inside,
    proofs.tukey.rho_monotone.
    """
    if not c > 0:
        raise CertificateError(f"bisquare scale c must be > 0, got {c!r}")
    r64 = np.asarray(r, dtype=np.float64)
    cap = c * c / 6
    x = r64 / c
    inner = 1.0 - x * x
    inside = cap * (1.0 - inner * inner * inner)
    return np.asarray(np.where(np.abs(r64) <= c, inside, cap), dtype=np.float64)


def bisquare_weight(r: npt.ArrayLike, c: float) -> npt.NDArray[np.float64]:
    """Tukey's bisquare IRLS weight (1 - (r/c)^2)^2 for |r| <= c, else 0 (float64).

    Positive exactly inside the bowl |r| < c (a computed positive weight implies |r| < c).
    proved: proofs.tukey.weight_positive_iff_inside.
    """
    if not c > 0:
        raise CertificateError(f"bisquare scale c must be > 0, got {c!r}")
    r64 = np.asarray(r, dtype=np.float64)
    x = r64 / c
    inner = 1.0 - x * x
    return np.asarray(np.where(np.abs(r64) <= c, inner * inner, 0.0), dtype=np.float64)


def inside_bowl(residuals: npt.ArrayLike, margin: float) -> bool:
    """True iff rho(e_j) < c^2/6 for every residual e_j, with c = margin/2.

    If True (and margin is the exit's top-1 margin over the same logits), the full model's argmax
    equals the exit's top-1. proved: proofs.tukey.bowl_preserves_argmax,
    proofs.tukey.rho_below_cap_iff_inside, proofs.argmax.pairwise_margin.
    """
    c = margin / 2
    if not c > 0:
        return False
    return bool(np.all(bisquare_rho(residuals, c) < c * c / 6))
