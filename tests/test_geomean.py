"""verispec/geomean.py: the one geometric mean of the benchmark summaries.

Tolerance, derived: log and exp are correctly rounded to within 1 ulp in CPython's libm; the mean
of n <= 4 logs of magnitude <= 3 carries an absolute error below 4 * 3 * 2^-52 ~ 3e-15, which exp
turns into a relative error of the same size (plus its own ulp): rel_tol = 1e-14 bounds it.
"""

from __future__ import annotations

import math

import pytest

from verispec.geomean import geomean

REL = 1e-14


@pytest.mark.parametrize(
    ("values", "expected"), [([2.0, 8.0], 4.0), ([0.5, 2.0], 1.0), ([3.0], 3.0), ([1.0, 2.0, 4.0, 8.0], 2.0**1.5)]
)
def test_geometric_mean_of_ratios(values: list[float], expected: float) -> None:
    assert math.isclose(geomean(values), expected, rel_tol=REL)


def test_non_positive_ratios_are_left_out() -> None:
    assert math.isclose(geomean([0.0, 2.0, -1.0, 8.0]), 4.0, rel_tol=REL)


def test_nothing_measured_is_zero() -> None:
    assert geomean([]) == 0.0
    assert geomean([0.0, 0.0]) == 0.0
