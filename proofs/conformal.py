"""The conformal order-statistic index k = ceil((n+1) q): its coverage level and its computation.

Split conformal prediction (Vovk et al. 2005; Lei et al. 2018; Angelopoulos & Bates 2023, "A
Gentle Introduction", Thm D.1): with n calibration scores and a fresh score exchangeable with
them, the k-th smallest calibration score Q satisfies P(score <= Q) >= k/(n+1) (the fresh
score's rank is uniform on 1..n+1 up to ties), with equality when ties have probability zero;
conditionally on the calibration draw the coverage is then Beta(k, n+1-k)-distributed (Vovk 2012,
"Conditional validity of inductive conformal predictors"). That probability fact is cited, not
proved here (z3 has no measure theory; tests/spec/test_conformal_coverage.py tests it statistically);
what is proved is the arithmetic that turns it into a level-q guarantee, over integers and
rationals:

- ``index_covers``: k = ceil((n+1) q) (encoded as k - 1 < (n+1) q <= k with k an integer)
  => k/(n+1) >= q: the guarantee reaches the asked level;
- ``index_tight``: same => k/(n+1) < q + 1/(n+1): the least conservative integer index;
- ``index_positive``: 0 < q => k >= 1 (the index names an order statistic);
- ``never_admits_iff``: k > n <=> q > n/(n+1): exactly then no order statistic reaches the level
  and the layer must never admit (Q = +inf);
- ``ceil_by_floor_division``: for integers m and b >= 1, k = -((-m) div b) satisfies
  k - 1 < m/b <= k: the ceiling the code computes with Python's floor division (z3's ``div``
  rounds down for a positive divisor, as Python's ``//`` does) with q = a/b and m = (n+1) a.
"""

from __future__ import annotations

import z3

from proofs.core import Obligation, implies

INDEX = ("reference.conformal.conformal_index",)
CODE = ("reference.conformal.conformal_index", "reference.conformal.conformal_quantile")


def _ceiling(n: z3.ArithRef, q: z3.ArithRef, k: z3.ArithRef) -> list[z3.BoolRef]:
    m = (z3.ToReal(n) + 1) * q
    return [n >= 1, q > 0, q < 1, z3.ToReal(k) - 1 < m, m <= z3.ToReal(k)]


def _symbols() -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
    n, k = z3.Ints("n k")
    q = z3.Real("q")
    return n, q, k


def _index_covers() -> z3.BoolRef:
    n, q, k = _symbols()
    return implies(_ceiling(n, q, k), z3.ToReal(k) / (z3.ToReal(n) + 1) >= q)


def _index_tight() -> z3.BoolRef:
    n, q, k = _symbols()
    nr = z3.ToReal(n) + 1
    return implies(_ceiling(n, q, k), z3.ToReal(k) / nr < q + 1 / nr)


def _index_positive() -> z3.BoolRef:
    n, q, k = _symbols()
    return implies(_ceiling(n, q, k), k >= 1)


def _never_admits_iff() -> z3.BoolRef:
    n, q, k = _symbols()
    nr = z3.ToReal(n)
    return implies(_ceiling(n, q, k), (k > n) == (q > nr / (nr + 1)))


def _ceil_by_floor_division() -> z3.BoolRef:
    m, b = z3.Ints("m b")
    k = -((-m) / b)  # z3 Int division: floor for b > 0, as Python's //
    return implies([b >= 1], z3.And(b * (k - 1) < m, m <= b * k))


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.conformal.index_covers",
        "n >= 1 int, 0 < q < 1, k int, k-1 < (n+1)q <= k => k/(n+1) >= q",
        _index_covers,
        CODE,
    ),
    Obligation(
        "proofs.conformal.index_tight",
        "n >= 1 int, 0 < q < 1, k int, k-1 < (n+1)q <= k => k/(n+1) < q + 1/(n+1)",
        _index_tight,
        INDEX,
    ),
    Obligation(
        "proofs.conformal.index_positive",
        "n >= 1 int, 0 < q < 1, k int, k-1 < (n+1)q <= k => k >= 1",
        _index_positive,
        INDEX,
    ),
    Obligation(
        "proofs.conformal.never_admits_iff",
        "n >= 1 int, 0 < q < 1, k = ceil((n+1)q) => (k > n <=> q > n/(n+1))",
        _never_admits_iff,
        CODE,
    ),
    Obligation(
        "proofs.conformal.ceil_by_floor_division",
        "m, b ints, b >= 1, k = -((-m) div b) => b(k-1) < m <= bk   (k = ceil(m/b))",
        _ceil_by_floor_division,
        INDEX,
    ),
]
