"""The tree obligations have teeth: each plausible mistake in the tree rule, stated as a claim, is
refuted by the same runner (z3 finds a counterexample)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import z3

from verispec.proofs.core import Obligation, check, implies, pos, rmin
from verispec.proofs.lossless import accept_mass
from verispec.proofs.tree import simplex_vars


def _second_sibling_tested_against_p() -> z3.BoolRef:
    """Residual not updated between siblings: sibling 2 sees p again (n = 2)."""
    p, hp = simplex_vars("p", 2)
    q1, h1 = simplex_vars("q1", 2)
    q2, h2 = simplex_vars("q2", 2)
    t1 = z3.Sum([rmin(a, b) for a, b in zip(p, q1)])
    s2 = z3.Sum([pos(a - b) for a, b in zip(p, q2)])
    t2 = z3.Sum([rmin(a, b) for a, b in zip(p, q2)])
    r3 = [z3.If(s2 == 0, a, pos(a - b) / s2) for a, b in zip(p, q2)]
    goal = [
        accept_mass(p[y], q1[y]) + (1 - t1) * (accept_mass(p[y], q2[y]) + (1 - t2) * r3[y]) == p[y] for y in range(2)
    ]
    return implies([*hp, *h1, *h2], z3.And(*goal))


def _not_renormalised_without_replacement() -> z3.BoolRef:
    """Removing x from q without zeroing it (q / (1 - q_x)) is not a law (n = 3)."""
    q, hq = simplex_vars("q", 3)
    rest = [q[y] / (1 - q[0]) for y in range(3)]
    return implies([*hq, q[0] < 1], z3.Sum(rest) == 1)


def _induction_step_unnormalised() -> z3.BoolRef:
    """The law after a rejection taken as (r - q)^+ itself, not divided by S."""
    big_p, big_m, x, a, s, t, law = z3.Reals("P M X A S T L")
    hyps = [a == big_m, big_m + x == big_p, s == 1 - t, 0 <= x, x <= s, law == x]
    return implies(hyps, a + (1 - t) * law == big_p)


MUTANTS: list[tuple[str, Callable[[], z3.BoolRef]]] = [
    ("second_sibling_tested_against_p", _second_sibling_tested_against_p),
    ("not_renormalised_without_replacement", _not_renormalised_without_replacement),
    ("induction_step_unnormalised", _induction_step_unnormalised),
]


@pytest.mark.parametrize(("name", "build"), MUTANTS, ids=[n for n, _ in MUTANTS])
def test_tree_mutant_is_refuted(name: str, build: Callable[[], z3.BoolRef]) -> None:
    assert check(Obligation(f"mutant.tree.{name}", name, build)).status == "refuted"
