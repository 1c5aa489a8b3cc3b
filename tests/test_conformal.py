"""Conformal calibration, exactly: the order-statistic index, the quantile, Bonferroni, and the
margin threshold of conformal risk control, each against a brute-force definition in Fractions."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference.conformal import (
    bonferroni,
    conformal_index,
    conformal_quantile,
    empirical_flip_risk,
    exact_level,
    margin_threshold,
)
from verispec.reference.errors import CalibrationError

levels = st.builds(Fraction, st.integers(1, 10_000), st.just(10_001)) | st.integers(2, 2_000).flatmap(
    lambda b: st.builds(Fraction, st.integers(1, b - 1), st.just(b))
)


def brute_index(n: int, q: Fraction) -> int | None:
    """The smallest rank k in 1..n whose level k/(n+1) reaches q, by enumeration; None if none."""
    for k in range(1, n + 1):
        if Fraction(k, n + 1) >= q:
            return k
    return None


@settings(max_examples=examples(500))
@given(n=st.integers(1, 400), q=levels)
def test_index_is_the_least_rank_reaching_q(n: int, q: Fraction) -> None:
    k = conformal_index(n, q)
    assert k == brute_index(n, q)
    assert conformal_index(n, str(q)) == k  # "a/b" strings are exact too
    if k is not None:  # proofs.conformal.index_covers / index_tight
        assert q <= Fraction(k, n + 1) < q + Fraction(1, n + 1)
    else:  # proofs.conformal.never_admits_iff
        assert q > Fraction(n, n + 1)


@settings(max_examples=examples(200))
@given(
    scores=st.lists(
        st.sampled_from([0.0, 0.5, 1.0, 2.5, 1e9, float("inf")]) | st.floats(0, 100), min_size=1, max_size=60
    ),
    q=levels,
)
def test_quantile_is_the_kth_smallest(scores: list[float], q: Fraction) -> None:
    expected_k = brute_index(len(scores), q)
    expected = float("inf") if expected_k is None else sorted(scores)[expected_k - 1]
    assert conformal_quantile(np.asarray(scores), q) == expected
    as_f32 = np.asarray(scores, dtype=np.float32)
    got32 = conformal_quantile(as_f32, q)
    assert got32 == float("inf") or got32 in as_f32.tolist()  # a float32 score, exactly


def _numpy_higher_rank(n: int, q: float) -> int:
    """The 1-based rank np.quantile(method="higher") returns: 0-based index ceil((n-1) q)."""
    scores = np.arange(1, n + 1, dtype=np.float64)  # rank r has value r
    return int(np.quantile(scores, q, method="higher"))


def test_numpy_higher_is_one_order_statistic_off() -> None:
    """The idiom np.quantile(s, q, method="higher") disagrees with the exact index: at n = 50,
    q = 0.95 it takes the 48th smallest, whose level 48/51 < 0.95 under-covers; the exact index is 49."""
    assert _numpy_higher_rank(50, 0.95) == 48
    assert conformal_index(50, "0.95") == 49
    assert Fraction(48, 51) < Fraction(95, 100) <= Fraction(49, 51)
    # at n = 10 the idiom returns the maximum where no order statistic is high enough
    assert _numpy_higher_rank(10, 0.95) == 10 and conformal_index(10, "0.95") is None
    # across n, the idiom is never above the exact index, and often one below
    below = 0
    for n in range(1, 300):
        k = conformal_index(n, "0.95")
        if k is not None:
            assert _numpy_higher_rank(n, 0.95) in (k, k - 1)
            below += _numpy_higher_rank(n, 0.95) == k - 1
    assert below > 50


def test_float_levels_mean_the_decimal_written() -> None:
    """0.9 is read as 9/10 (through repr), not as the double 0.900000000000000022...: at n = 9 the
    exact index is 9, the double's would be 10 > n (never admit)."""
    assert conformal_index(9, 0.9) == 9 == conformal_index(9, Fraction(9, 10))
    assert conformal_index(9, Fraction(0.9)) is None
    for n in range(1, 2000):
        assert conformal_index(n, 0.99) == conformal_index(n, Fraction(99, 100))


@pytest.mark.parametrize(
    ("n", "q"),
    [
        (0, "0.9"),
        (-3, "0.9"),
        (10, 0),
        (10, 1),
        (10, "1.5"),
        (10, -0.1),
        (10, float("nan")),
        (10, float("inf")),
        (10, True),
        (10, "ninety"),
        (10, "1/0"),
        (True, "0.9"),
        (2.0, "0.9"),
    ],
)
def test_index_rejects_bad_inputs(n: Any, q: Any) -> None:
    with pytest.raises(CalibrationError):
        conformal_index(n, q)


@pytest.mark.parametrize(
    "scores",
    [[], [1.0, float("nan")], [[1.0, 2.0]], np.array([1.0, 2.0], dtype=np.float16), ["a", "b"]],
    ids=["empty", "nan", "2d", "f16", "str"],
)
def test_quantile_rejects_bad_scores(scores: Any) -> None:
    with pytest.raises(CalibrationError):
        conformal_quantile(scores, "0.9")


@settings(max_examples=examples(200))
@given(q=levels, k=st.integers(1, 64))
def test_bonferroni_is_exact(q: Fraction, k: int) -> None:
    q_layer = bonferroni(q, k)
    assert k * (1 - q_layer) == 1 - q  # proofs.union.bonferroni_level
    assert q <= q_layer < 1
    with pytest.raises(CalibrationError):
        bonferroni(q, 0)


def brute_threshold(margins: list[float], flips: list[bool], alpha: Fraction, k: int) -> float:
    """inf{lambda : (n R(lambda) + 1)/(n + 1) <= alpha/K}, scanning every value the step function
    can change at (its jumps are at the margins; it is right-continuous), in Fractions."""
    n = len(margins)
    candidates = [float("-inf"), *sorted(set(margins)), float("inf")]
    for lam in candidates:
        loss = sum(1 for m, f in zip(margins, flips) if f and m > lam)
        if Fraction(loss + 1, n + 1) <= alpha / k:
            return lam
    return float("inf")


@settings(max_examples=examples(400))
@given(
    data=st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0]) | st.floats(0, 10), st.booleans()), min_size=1, max_size=40
    ),
    alpha=levels,
    k=st.integers(1, 4),
)
def test_margin_threshold_is_the_crc_infimum(data: list[tuple[float, bool]], alpha: Fraction, k: int) -> None:
    margins = [m for m, _ in data]
    flips = [f for _, f in data]
    lam = margin_threshold(np.asarray(margins), np.asarray(flips), alpha, n_layers=k)
    assert lam == brute_threshold(margins, flips, alpha, k)
    n = len(margins)
    admitted_flips = sum(1 for m, f in zip(margins, flips) if f and m > lam)
    if lam != float("inf"):
        assert Fraction(admitted_flips + 1, n + 1) <= alpha / k
    assert empirical_flip_risk(np.asarray(margins), np.asarray(flips), lam) == admitted_flips / n


def test_margin_threshold_rejects_bad_inputs() -> None:
    m = np.array([1.0, 2.0])
    with pytest.raises(CalibrationError):
        margin_threshold(m, np.array([1, 0]), "0.1")  # flips must be bool
    with pytest.raises(CalibrationError):
        margin_threshold(m, np.array([True]), "0.1")
    with pytest.raises(CalibrationError):
        margin_threshold(m, np.array([True, False]), 0)
    with pytest.raises(CalibrationError):
        margin_threshold(np.array([1.0, np.nan]), np.array([True, False]), "0.1")
    with pytest.raises(CalibrationError):
        margin_threshold(m, np.array([True, False]), "0.1", n_layers=0)


def test_exact_level_types() -> None:
    assert exact_level("99/100") == exact_level(0.99) == exact_level(Fraction(99, 100))
    with pytest.raises(CalibrationError):
        exact_level([0.5])  # type: ignore[arg-type]
