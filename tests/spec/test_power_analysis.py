"""The power analysis without scipy (spec/statistics.py: chi2_isf, ncx2_sf, required_sample_size)
agrees with scipy, and every sample size the suite asks for is the one scipy's root finder gave.

Tolerances come from the error model of each function (stated at each test), not from a run.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy.optimize import brentq
from scipy.stats import chi2, ncx2

import verispec.spec.properties.statistical as statistical_properties
from verispec.spec.properties import STATISTICAL, reference_results
from verispec.spec.statistics import POWER, TV_BIAS, chi2_isf, ncx2_sf, required_sample_size

EPS = 2.0**-52
CHI2_SF_REL = 1e-12  # chi2_sf's relative accuracy (its docstring; tests/spec/test_statistics.py)
SCIPY_REL = 1e-12  # scipy's own (Boost/Cephes) relative accuracy, on the same footing
BISECT_REL = 1e-14  # the bisection's final relative width


@pytest.mark.parametrize("df", [1, 2, 5, 12, 33, 63, 200, 500])
@pytest.mark.parametrize("alpha", [0.1, 1e-3, 1e-4, 4e-5, 1e-6, 1e-9])
def test_chi2_isf_matches_scipy(alpha: float, df: int) -> None:
    """An error r in the tail probability moves the root by r * cond in relative terms, with
    cond = sf / (x pdf) = |d log x / d log sf| (computed here); plus the bisection's width."""
    want = float(chi2.isf(alpha, df))
    cond = alpha / (want * float(chi2.pdf(want, df)))
    tolerance = (CHI2_SF_REL + SCIPY_REL) * cond + BISECT_REL
    assert abs(chi2_isf(alpha, df) - want) <= tolerance * want


@pytest.mark.parametrize("df", [1, 2, 5, 12, 33, 63, 200])
@pytest.mark.parametrize("nc", [0.01, 0.5, 3.0, 10.0, 50.0, 100.0, 300.0, 1000.0])
def test_ncx2_sf_matches_scipy(nc: float, df: int) -> None:
    """A sum of J + 1 nonnegative terms: each weight exp(-mu + j log mu - lgamma(j + 1)) has its
    argument off by ~eps * (3 mu + 30), each Q(a + j) carries chi2_sf's error plus one rounding per
    recurrence step (<= (J + 1) eps); relative errors of nonnegative terms bound the sum's. Values
    below 1e-10 are not compared (the power analysis lives near 1 - alpha and 0.99)."""
    mu = nc / 2.0
    steps = mu + 12.0 * math.sqrt(mu) + 31.0
    tolerance = CHI2_SF_REL + SCIPY_REL + EPS * (3.0 * mu + 30.0) + EPS * steps
    for x in (0.1, 1.0, 5.0, 20.0, 50.0, 100.0, 300.0, 800.0):
        want = float(ncx2.sf(x, df, nc))
        if want > 1e-10:
            assert abs(ncx2_sf(x, df, nc) - want) <= tolerance * want, (x, df, nc)


def _scipy_sample_size(df: int, alpha: float, tv: float) -> int:
    """The algorithm this module used before (scipy's brentq on ncx2.sf)."""
    critical = float(chi2.isf(alpha, df))
    lam = float(brentq(lambda nc: float(ncx2.sf(critical, df, nc)) - POWER, 1e-9, 1e5))
    n = math.ceil(lam / (4.0 * tv * tv) / 1000.0) * 1000
    while float(ncx2.sf(critical, df, 4.0 * tv * tv * n)) < POWER:
        n += 1000
    return n


def _sizes_the_properties_ask_for(monkeypatch: pytest.MonkeyPatch) -> set[tuple[int, float, float]]:
    """(df, alpha, tv) of every statistical property, recorded without drawing a sample."""
    asked: set[tuple[int, float, float]] = set()

    class Recorded(Exception):
        pass

    def record(df: int, alpha: float, tv: float = TV_BIAS, power: float = POWER) -> Any:
        asked.add((df, alpha, tv))
        raise Recorded

    monkeypatch.setattr(statistical_properties, "required_sample_size", record)
    reference_results(only=sorted(STATISTICAL))
    return asked


def test_every_sample_size_of_the_suite_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The properties' sizes, the real-model decode tests' (df 12, tv 0.05; single-path and tree), and neighbours."""
    asked = _sizes_the_properties_ask_for(monkeypatch)
    assert len(asked) >= len(STATISTICAL) // 2, asked  # the recorder saw the properties
    others = {(12, 4e-5, 0.05), (12, 2e-5, 0.05)} | {(df, 1e-4, TV_BIAS) for df in (1, 2, 5, 40, 100, 200)}
    for df, alpha, tv in sorted(asked | others):
        assert required_sample_size(df, alpha, tv) == _scipy_sample_size(df, alpha, tv), (df, alpha, tv)
