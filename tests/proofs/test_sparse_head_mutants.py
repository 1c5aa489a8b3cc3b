"""proofs/sparse_head.py has teeth: each plausible mistake in the sparse head's argument is refuted."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import z3

from verispec.proofs import sparse_head
from verispec.proofs.core import Obligation, check, implies, rabs, reals, rounded


def _radius_without_kernel_term() -> z3.BoolRef:  # the sketch's error alone, as if K were w.x
    k, s, wx, kappa, beta = z3.Reals("K S wx kappa beta")
    return implies([rabs(k - wx) <= kappa, rabs(s - wx) <= beta], rabs(k - s) <= beta)


def _interval_not_widened() -> z3.BoolRef:  # fl(S - B) <= K with no slack for the rounding
    k, s, b, lo = z3.Reals("K S B lo")
    return implies([b >= 0, rabs(k - s) <= b, rounded(s - b, lo, sparse_head.U64)], lo <= k)


def _tau_from_upper_bounds() -> z3.BoolRef:  # prune rows below the k-th largest UPPER bound
    k, s, b = reals("K", 2), reals("S", 2), reals("B", 2)
    tau = z3.Real("tau")
    inside = [z3.And(s[i] - b[i] <= k[i], k[i] <= s[i] + b[i]) for i in range(2)]
    return implies(inside + [s[1] + b[1] >= tau, s[0] + b[0] < tau], k[1] > k[0])


def _subset_missing_a_top_row() -> z3.BoolRef:  # first-k of rows that need not hold the top-k
    k = reals("K", 3)
    member = [z3.Bool(f"E{i}") for i in range(3)]
    same = [
        z3.Implies(member[i], (sparse_head.rank(k, i, member) < 1) == (sparse_head.rank(k, i) < 1)) for i in range(3)
    ]
    return z3.And(*same)


def _draw_without_the_previous_sum() -> z3.BoolRef:  # decide on c_lo[t] > t_hi alone
    c, c_lo, c_hi = reals("c", 3), reals("c_lo", 3), reals("c_hi", 3)
    thr, t_lo, t_hi = z3.Reals("thr t_lo t_hi")
    hyps = [c[0] <= c[1], c[1] <= c[2], t_lo <= thr, thr <= t_hi]
    hyps += [z3.And(c_lo[j] <= c[j], c[j] <= c_hi[j]) for j in range(3)]
    chosen = z3.Sum([z3.If(c[j] <= thr, 1, 0) for j in range(3)])
    return implies([*hyps, c_lo[2] > t_hi], chosen == 2)


MUTANTS: dict[str, Callable[[], z3.BoolRef]] = {
    "radius without the kernel's own error": _radius_without_kernel_term,
    "float64 interval not widened": _interval_not_widened,
    "tau from the k-th largest upper bound": _tau_from_upper_bounds,
    "evaluated rows need not hold the top-k": _subset_missing_a_top_row,
    "lazy draw without the previous running sum": _draw_without_the_previous_sum,
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutant_refuted(name: str) -> None:
    result = check(Obligation(f"mutant.{name}", name, MUTANTS[name], rlimit=20_000_000))
    assert result.status == "refuted", f"{name}: {result.status} ({result.reason})"
