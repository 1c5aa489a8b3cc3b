"""The early-exit certificate, executable: argmax invariance under the gates, in float64 and float32.

Every expected value here comes from exact arithmetic on the float values (``Fraction``) or from
a brute-force definition, never from the code under test. The gate properties are stated the way
the certificate is used: take exit logits d and full logits t (float values, compared exactly),
let the calibrated quantile Q be any value >= the token's computed score (Q = the score itself is
the hardest case), and require: if the gate admits, the full model's top-1 is the exit's top-1,
strictly (t_a > t_j for every j != a).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference import certificate as cert
from verispec.reference.errors import CertificateError

DTYPES: tuple[type[np.floating[Any]], ...] = (np.float32, np.float64)


def _exact(x: float | np.floating[Any]) -> Fraction:
    return Fraction(float(x))


def _strict_top(t: npt.NDArray[np.floating[Any]], a: int) -> bool:
    """t_a > t_j for every j != a (float comparisons are exact)."""
    others = np.delete(t, a)
    return bool(np.all(others < t[a]))


def _max_spread_ratio(d: npt.NDArray[np.floating[Any]], t: npt.NDArray[np.floating[Any]], a: int) -> float:
    """max_j (e_a - e_j) / (d_a - d_b), exactly (> 1 would be a flip): how close to the edge a case is."""
    e = [_exact(x) - _exact(y) for x, y in zip(d, t)]
    top = sorted((_exact(x) for x in d), reverse=True)
    gamma = top[0] - top[1]
    return float(max(e[a] - e[j] for j in range(len(e)) if j != a) / gamma)


# --- top2 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@settings(max_examples=examples(200))
@given(data=st.data())
def test_top2_is_lowest_id_argmax_and_exact_margin(dtype: type[np.floating[Any]], data: st.DataObject) -> None:
    # few distinct values, so ties at the top are common
    values = data.draw(st.lists(st.sampled_from([-3.5, -1.0, 0.0, 0.25, 2.0, 7.75, 1e30]), min_size=2, max_size=12))
    row = np.asarray(values, dtype=dtype)
    top_value = max(float(x) for x in row)
    expected_id = min(j for j, x in enumerate(row) if float(x) == top_value)
    ranked = sorted((float(x) for x in row), reverse=True)
    expected_margin = dtype(dtype(ranked[0]) - dtype(ranked[1]))
    token, margin = cert.top2(row)
    assert token == expected_id
    assert margin == float(expected_margin)
    assert (margin == 0) == (ranked[0] == ranked[1])


def test_top2_rows_matches_rowwise() -> None:
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(50, 33)).astype(np.float32)  # [T, V]
    rows[3, 5] = rows[3, 9] = rows[3].max() + 1  # a tie at the top
    ids, margins = cert.top2_rows(rows)
    assert ids.shape == (50,) and margins.dtype == np.float32
    for i in range(50):
        assert (int(ids[i]), float(margins[i])) == cert.top2(rows[i])
    assert ids[3] == 5 and margins[3] == 0


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0], dtype=np.float32),
        np.array([1.0, np.nan], dtype=np.float32),
        np.array([1.0, np.inf]),
        np.array([1, 2], dtype=np.int64),
        np.array([1.0, 2.0], dtype=np.float16),
        np.zeros((2, 3), dtype=np.float32),
        np.array([3e38, -3e38], dtype=np.float32),  # margin overflows
    ],
    ids=["one-logit", "nan", "inf", "int", "f16", "2d", "overflow"],
)
def test_top2_rejects_bad_logits(bad: npt.NDArray[Any]) -> None:
    with pytest.raises(CertificateError):
        cert.top2(bad)


# --- residual scores -------------------------------------------------------------------------------


def _logit_pair(
    dtype: type[np.floating[Any]], data: st.DataObject, v_max: int = 16
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    width: Literal[32, 64] = 32 if dtype == np.float32 else 64
    v = data.draw(st.integers(2, v_max), label="V")
    floats = st.floats(-1e4, 1e4, allow_nan=False, width=width)
    d = np.asarray(data.draw(st.lists(floats, min_size=v, max_size=v), label="d"), dtype=dtype)
    shift = data.draw(st.sampled_from([0.0, 1.0, -777.0, 3e5]), label="shift")
    noise = st.floats(-8, 8, allow_nan=False, width=width)
    e = np.asarray(data.draw(st.lists(noise, min_size=v, max_size=v), label="e"), dtype=dtype)
    t = np.asarray(d - (e + dtype(shift)), dtype=dtype)
    return d, t


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@settings(max_examples=examples(200))
@given(data=st.data())
def test_halfrange_residual_bounds_exact_halfrange(dtype: type[np.floating[Any]], data: st.DataObject) -> None:
    """h~ >= (max e - min e)/2 for the exact residual e = d - t of the float values
    (proofs.float32.halfrange_upper_bound), and h~ is not much larger than it."""
    d, t = _logit_pair(dtype, data)
    e = [_exact(x) - _exact(y) for x, y in zip(d, t)]
    exact_half = (max(e) - min(e)) / 2
    h = cert.halfrange_residual(d, t)
    assert dtype(h) == h
    assert _exact(h) >= exact_half
    u = Fraction(cert.unit_roundoff(dtype))
    big = max(abs(x) for x in e)
    assert _exact(h) <= exact_half * (1 + 4 * u) + 20 * u * big + Fraction(2) ** -140


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@settings(max_examples=examples(200))
@given(data=st.data())
def test_supnorm_residual_is_the_rounded_supnorm(dtype: type[np.floating[Any]], data: st.DataObject) -> None:
    """s~ = max_j |fl(d_j - t_j)|: within relative u of the exact sup-norm, from both sides."""
    d, t = _logit_pair(dtype, data)
    exact_sup = max(abs(_exact(x) - _exact(y)) for x, y in zip(d, t))
    s = _exact(cert.supnorm_residual(d, t))
    u = Fraction(cert.unit_roundoff(dtype))
    assert exact_sup * (1 - u) <= s <= exact_sup * (1 + u)


def test_residual_errors() -> None:
    d = np.zeros(4, dtype=np.float32)
    with pytest.raises(CertificateError):
        cert.supnorm_residual(d, np.zeros(4))  # dtypes differ
    with pytest.raises(CertificateError):
        cert.halfrange_residual(d, np.zeros(5, dtype=np.float32))
    with pytest.raises(CertificateError):
        cert.supnorm_residual(np.array([3e38, 0], dtype=np.float32), np.array([-3e38, 0], dtype=np.float32))
    with pytest.raises(CertificateError):
        cert.residual_rows("l2", d, d)  # type: ignore[arg-type]


# --- the slack -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@settings(max_examples=examples(200))
@given(q=st.floats(0, 1e30, allow_nan=False) | st.sampled_from([0.0, 5e-324, 1e-45, 1.17549435e-38, 2.0**-126]))
def test_slack_is_at_least_8u_q(dtype: type[np.floating[Any]], q: float) -> None:
    quantile = float(dtype(q))  # a value of the working dtype (what a calibration produces)
    slack = cert.rounding_slack(quantile, dtype)
    assert dtype(slack) == slack and slack > 0
    assert _exact(slack) >= 8 * Fraction(cert.unit_roundoff(dtype)) * _exact(quantile)
    tiniest = Fraction(float(np.finfo(dtype).smallest_subnormal))
    assert _exact(slack) <= 16 * Fraction(cert.unit_roundoff(dtype)) * _exact(quantile) + 8 * tiniest


def test_slack_edge_cases() -> None:
    assert cert.float32_slack(float("inf")) == float("inf")
    assert cert.float32_slack(1.0) == 8 * 2.0**-23  # 8 ulps of 1.0 in float32
    with pytest.raises(CertificateError):
        cert.float32_slack(-1.0)
    with pytest.raises(CertificateError):
        cert.float32_slack(0.1)  # 0.1 is not a float32 value


# --- the gates: argmax invariance ------------------------------------------------------------------


def _gate_case(dtype: type[np.floating[Any]], data: st.DataObject) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Exit logits d and full logits t = fl(d - e), with e pushed toward the certified edge."""
    width: Literal[32, 64] = 32 if dtype == np.float32 else 64
    v = data.draw(st.integers(2, 12), label="V")
    d = np.asarray(data.draw(st.lists(st.floats(-50, 50, width=width), min_size=v, max_size=v), label="d"), dtype=dtype)
    a, margin = cert.top2(d)
    half = margin / 2
    scale = data.draw(st.sampled_from([0.5, 0.999, 1.0, 1.001]) | st.floats(0, 1.2), label="scale")
    direction = st.sampled_from([-1.0, 1.0]) | st.floats(-1, 1)
    r = np.asarray(data.draw(st.lists(direction, min_size=v, max_size=v), label="r"))
    r[a] = data.draw(st.sampled_from([1.0, r[a]]), label="r_a")  # pushing the top-1 down is the danger
    shift = data.draw(st.sampled_from([0.0, 0.0, 3.0, -1000.0, 2.5e5]), label="shift")
    e = np.asarray(half * scale * r + shift, dtype=dtype)
    t = np.asarray(d - e, dtype=dtype)
    return d, t


def _check_gate(kind: cert.ResidualKind, dtype: type[np.floating[Any]], data: st.DataObject) -> None:
    d, t = _gate_case(dtype, data)
    a, margin = cert.top2(d)
    score = float(cert.residual_rows(kind, d, t))
    ulps_above = data.draw(st.sampled_from([0, 0, 0, 1, 5]), label="Q ulps above the score")
    quantile = score
    for _ in range(ulps_above):
        quantile = float(np.nextafter(dtype(quantile), dtype(np.inf)))
    if cert.residual_admits(kind, margin, quantile, dtype=dtype):
        event("admitted")
        assert cert.top2(t)[0] == a and _strict_top(t, a)
        target(_max_spread_ratio(d, t, a), label="exact spread / margin among admitted")
    else:
        event("refused")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("kind", cert.RESIDUAL_KINDS)
@settings(max_examples=examples(300))
@given(data=st.data())
def test_admitted_tokens_keep_the_argmax(
    kind: cert.ResidualKind, dtype: type[np.floating[Any]], data: st.DataObject
) -> None:
    """proofs.float32.supnorm_slack_sound / halfrange_slack_sound, with the default slack."""
    _check_gate(kind, dtype, data)


def _boundary_batch(
    dtype: type[np.floating[Any]], rng: np.random.Generator, n: int, v: int, shift: float
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """n rows where the top-1 and runner-up are pushed toward each other by about gamma/2 each,
    within +-40 units of u of the exact edge (half of them flip, half do not)."""
    u = cert.unit_roundoff(dtype)
    d = rng.normal(0, 4, size=(n, v)).astype(dtype)  # [n, V]
    ids, margins = cert.top2_rows(d)
    runner = np.argsort(-d.astype(np.float64), axis=1, kind="stable")[:, 1]
    h = margins.astype(np.float64) / 2 * (1 + rng.integers(-40, 41, size=n) * u)  # [n]
    e = rng.uniform(-1, 1, size=(n, v)) * h[:, None] * 0.5
    e[np.arange(n), ids] = h
    e[np.arange(n), runner] = -h
    t = np.asarray(d - (e + shift).astype(dtype), dtype=dtype)
    return d, t


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("kind", cert.RESIDUAL_KINDS)
def test_boundary_batch_never_admits_a_flip(kind: cert.ResidualKind, dtype: type[np.floating[Any]]) -> None:
    """20,000 seeded cases at the edge of the certificate: no admitted flip, and the set is not
    vacuous (it holds flips, the gate admits a good share of the non-flips)."""
    rng = np.random.default_rng(2024)
    flips = admitted = admitted_flips = 0
    for shift in (0.0, 512.0):
        if kind == "supnorm" and shift:
            continue  # a common shift makes every sup-norm score huge: nothing to test
        d, t = _boundary_batch(dtype, rng, 10_000, 9, shift)
        ids, margins = cert.top2_rows(d)
        scores = cert.residual_rows(kind, d, t)
        for i in range(d.shape[0]):
            flipped = not _strict_top(t[i], int(ids[i]))
            ok = cert.residual_admits(kind, float(margins[i]), float(scores[i]), dtype=dtype)
            flips += flipped
            admitted += ok
            admitted_flips += ok and flipped
    assert admitted_flips == 0
    assert flips > 1000
    assert admitted > 1000


# --- zero slack: the seed's float32 gate is fooled -------------------------------------------------


def test_seed_gate_fooled_in_float32() -> None:
    """The witness of proofs.float32.seed_gate_fooled: 2 Q <= gamma in float32, Q the token's own
    score, admits a token whose full argmax flips; the certified gate refuses it."""
    d = np.array([1.0, 0.0], dtype=np.float32)
    t = np.array([0.5 - 2.0**-25, 0.5], dtype=np.float32)
    assert float(t[0]) == 0.5 - 2.0**-25  # exactly representable: the witness is a float32 pair
    token, margin = cert.top2(d)
    assert (token, margin) == (0, 1.0)
    assert float(t[1]) > float(t[0])  # exact: the full model's argmax is 1, not 0
    exact_sup = max(abs(_exact(x) - _exact(y)) for x, y in zip(d, t))
    assert 2 * exact_sup > _exact(margin)  # the certificate's hypothesis is false
    q = cert.supnorm_residual(d, t)
    assert q == 0.5  # ... but the float32 residual rounded onto gamma/2
    seed_admits = bool(np.float32(2) * np.float32(q) <= np.float32(margin))
    assert seed_admits
    assert not cert.supnorm_admits(margin, q)  # default slack
    assert not cert.supnorm_admits(margin, q, slack=0.0)  # strictness alone refuses it here


def test_naive_halfrange_fooled_in_float32() -> None:
    """The witness of proofs.float32.naive_halfrange_fooled: the spread of fl(d - t) with no
    allowance admits a flip; the certified half-range score refuses it."""
    d = np.array([1.0, 0.0], dtype=np.float32)
    t = np.array([-10473947 * 2.0**-45, -10384065 * 2.0**-45], dtype=np.float32)
    assert _exact(t[0]) == Fraction(-10473947, 2**45) and _exact(t[1]) == Fraction(-10384065, 2**45)
    token, margin = cert.top2(d)
    assert token == 0 and float(t[1]) > float(t[0])  # a flip
    e = (d - t).astype(np.float32)
    naive_spread = np.float32(e.max() - e.min())
    assert naive_spread < np.float32(margin)  # the naive gate admits
    h = cert.halfrange_residual(d, t)
    assert not cert.halfrange_admits(margin, h)
    assert not cert.halfrange_admits(margin, h, slack=0.0)  # the allowance alone refuses it here


# --- gate API --------------------------------------------------------------------------------------


def test_gate_contract() -> None:
    assert not cert.supnorm_admits(1.0, float("inf"))
    assert not cert.halfrange_admits(0.0, 0.0)  # margin 0 (a tie) never admits
    assert cert.supnorm_admits(1.0, 0.25) and not cert.supnorm_admits(1.0, 0.5)
    assert not cert.supnorm_admits(float(np.finfo(np.float32).max), float(np.finfo(np.float32).max))
    with pytest.raises(CertificateError):
        cert.supnorm_admits(0.1, 0.01)  # 0.1 is not a float32 value
    assert cert.supnorm_admits(0.1, 0.01, dtype=np.float64)
    with pytest.raises(CertificateError):
        cert.supnorm_admits(float("nan"), 0.0)
    with pytest.raises(CertificateError):
        cert.halfrange_admits(1.0, -0.25)
    with pytest.raises(CertificateError):
        cert.residual_admits("l2", 1.0, 0.25)  # type: ignore[arg-type]
    assert cert.margin_admits(1.0, 0.5) and not cert.margin_admits(0.5, 0.5)
    assert not cert.margin_admits(float("nan"), 0.5) and cert.margin_admits(0.0, float("-inf"))


# --- Tukey's bisquare ------------------------------------------------------------------------------


def _rho_exact(r: Fraction, c: Fraction) -> Fraction:
    if abs(r) > c:
        return c * c / 6
    return c * c / 6 * (1 - (1 - (r / c) ** 2) ** 3)


@settings(max_examples=examples(300))
@given(r=st.floats(-100, 100), c=st.floats(1e-3, 50))
def test_bisquare_matches_exact_and_bowl_is_sound(r: float, c: float) -> None:
    """rho and w against the exact formula; a computed rho < cap or w > 0 implies |r| < c exactly
    (proofs.tukey.rho_below_cap_iff_inside, weight_positive_iff_inside)."""
    rho = float(cert.bisquare_rho(r, c))
    w = float(cert.bisquare_weight(r, c))
    rx, cx = Fraction(r), Fraction(c)
    cap = c * c / 6
    # 1e-12 derived (float64, u = 2^-53): x = r/c, x^2, 1 - x^2 (|x| <= 1: off by <= 3u), its cube
    # (<= 11u), 1 - cube, and the cap c*c/6 (3 roundings) put rho within ~16u cap = 1.8e-15 cap and
    # w = (1 - x^2)^2 within 7u; 1e-12 is 500x above, far below any wrong formula's O(1) error.
    assert abs(Fraction(rho) - _rho_exact(rx, cx)) <= Fraction(1e-12) * Fraction(cap)
    exact_w = (1 - (rx / cx) ** 2) ** 2 if abs(rx) <= cx else Fraction(0)
    assert abs(Fraction(w) - exact_w) <= Fraction(1e-12)
    if rho < cap or w > 0:
        assert abs(rx) < cx
    if abs(rx) <= cx * Fraction(999, 1000):  # away from the rim the float values agree with the iff
        assert rho < cap and w > 0


@settings(max_examples=examples(200))
@given(data=st.data())
def test_inside_bowl_keeps_the_argmax(data: st.DataObject) -> None:
    """proofs.tukey.bowl_preserves_argmax, on dyadic logits where t = d - e is exact in float64."""
    v = data.draw(st.integers(2, 10))
    grid = st.integers(-(2**12), 2**12).map(lambda k: k / 2**6)
    d = np.asarray(data.draw(st.lists(grid, min_size=v, max_size=v)), dtype=np.float64)
    e = np.asarray(data.draw(st.lists(grid.map(lambda x: x / 16), min_size=v, max_size=v)), dtype=np.float64)
    t = d - e  # exact: all values are multiples of 2^-10 below 2^7
    assert all(_exact(ti) == _exact(di) - _exact(ei) for di, ei, ti in zip(d, e, t))
    a, margin = cert.top2(d)
    if cert.inside_bowl(e, margin):
        event("inside")
        assert _strict_top(t, a)
