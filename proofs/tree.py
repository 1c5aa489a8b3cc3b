"""Token trees (recursive rejection sampling): the token leaving a node has the node's target law.

At a node with target law r_1 = p, siblings x_1..x_m are tried in order, x_j drawn from q_j:

    accept x_j with probability min(1, r_j(x_j) / q_j(x_j));
    on rejection r_{j+1} = (r_j - q_j)^+ / S_j,  S_j = sum_y (r_j(y) - q_j(y))^+;
    after m rejections the token is drawn from r_{m+1}.

Let L_j(y) be the probability that the token leaving the node is y, given that siblings 1..j-1
were rejected. Then L_{m+1} = r_{m+1} and

    L_j(y) = A(r_j(y), q_j(y)) + (1 - T_j) L_{j+1}(y),   T_j = sum_y min(r_j(y), q_j(y)),

(an accepted x_j IS the token; 1 - T_j is the rejection probability). Theorem: L_1 = p. By
downward induction on j it suffices that L_{j+1} = r_{j+1} implies L_j = r_j, which is the one-step
theorem of :mod:`proofs.lossless` at (r_j, q_j) once both are laws:

1. ``residual_in_simplex[n]``  r, q in simplex(n), S > 0  =>  (r - q)^+ / S in simplex(n)
                               (so r_{j+1} is again a law and the next sibling's step applies)
2. ``induction_step``          (fresh reals) A = M, M + X = P, S = 1 - T, 0 <= X <= S, and
                               (S > 0 => L = X / S)  =>  A + (1 - T) L = P
                               (the one-step identity with the residual replaced by the law after
                               the rejection; S = 0 leaves no rejection mass, whatever L is)
3. ``without_replacement[n]``  q in simplex(n), q_x < 1  =>  q with x removed, renormalized, is
                               in simplex(n) and has no mass on x (siblings drawn without
                               replacement are drawn from laws)
4. ``duplicate_rejected[n]``   r, q in simplex(n), r_x < q_x (x can be rejected)  =>
                               ((r - q)^+ / S)_x = 0 when S > 0 (a repeated token after its
                               rejection is rejected surely: duplicates need no special case,
                               but the residual is still updated for them)

The hypotheses of (2) at (P, M, X, A, S, T) = (r_j(y), min(r_j(y), q_j(y)), (r_j(y) - q_j(y))^+,
A(r_j(y), q_j(y)), S_j, T_j) are the lemmas coordinate_split, accept_mass, residual_total and
residual_bounds of proofs/lossless.py (for r_j, q_j laws, by (1) and (3)) plus the induction
hypothesis; its conclusion is L_j(y) = r_j(y). The accepted child's subtree is drawn given that
child, so the same argument applies one level down: the tree's emitted tokens follow the target's
autoregressive law. ``two_siblings[n=2]`` checks the two-sibling node directly as corroboration
(n = 3 exhausts a 40M rlimit). Exact Fractions over every small shape: spec/tree_exact.py.
"""

from __future__ import annotations

from functools import partial

import z3

from verispec.proofs.core import Obligation, implies, pos, reals, rmin
from verispec.proofs.lossless import accept_mass

SIZES = range(2, 7)
RELIED_ON_BY = ("verispec.reference.tree_speculative.verify_tree_sampled",)


def simplex_vars(name: str, n: int) -> tuple[list[z3.ArithRef], list[z3.BoolRef]]:
    xs = reals(name, n)
    return xs, [x >= 0 for x in xs] + [z3.Sum(xs) == 1]


def _residual_in_simplex(n: int) -> z3.BoolRef:
    r, hr = simplex_vars("r", n)
    q, hq = simplex_vars("q", n)
    s = z3.Sum([pos(a - b) for a, b in zip(r, q)])
    nxt = [pos(a - b) / s for a, b in zip(r, q)]
    return implies([*hr, *hq, s > 0], z3.And(*[v >= 0 for v in nxt], z3.Sum(nxt) == 1))


def _induction_step() -> z3.BoolRef:
    big_p, big_m, x, a, s, t, law = z3.Reals("P M X A S T L")
    hyps = [a == big_m, big_m + x == big_p, s == 1 - t, 0 <= x, x <= s, z3.Implies(s > 0, law == x / s)]
    return implies(hyps, a + (1 - t) * law == big_p)


def _without_replacement(n: int) -> z3.BoolRef:
    q, hq = simplex_vars("q", n)
    conclusions = []
    for x in range(n):
        rest = [z3.RealVal(0) if y == x else q[y] / (1 - q[x]) for y in range(n)]
        conclusions.append(z3.Implies(q[x] < 1, z3.And(*[v >= 0 for v in rest], z3.Sum(rest) == 1)))
    return implies(hq, z3.And(*conclusions))


def _duplicate_rejected(n: int) -> z3.BoolRef:
    r, hr = simplex_vars("r", n)
    q, hq = simplex_vars("q", n)
    s = z3.Sum([pos(a - b) for a, b in zip(r, q)])
    return implies([*hr, *hq, s > 0], z3.And(*[z3.Implies(r[x] < q[x], pos(r[x] - q[x]) / s == 0) for x in range(n)]))


def _two_siblings(n: int) -> z3.BoolRef:
    """Two siblings, drawn from q1 then q2 (any laws), directly: the token leaving the node ~ p."""
    p, hp = simplex_vars("p", n)
    q1, h1 = simplex_vars("q1", n)
    q2, h2 = simplex_vars("q2", n)
    s1 = z3.Sum([pos(a - b) for a, b in zip(p, q1)])
    t1 = z3.Sum([rmin(a, b) for a, b in zip(p, q1)])
    r2 = [z3.If(s1 == 0, a, pos(a - b) / s1) for a, b in zip(p, q1)]
    s2 = z3.Sum([pos(a - b) for a, b in zip(r2, q2)])
    t2 = z3.Sum([rmin(a, b) for a, b in zip(r2, q2)])
    r3 = [z3.If(s2 == 0, a, pos(a - b) / s2) for a, b in zip(r2, q2)]
    goal = [
        accept_mass(p[y], q1[y]) + (1 - t1) * (accept_mass(r2[y], q2[y]) + (1 - t2) * r3[y]) == p[y] for y in range(n)
    ]
    return implies([*hp, *h1, *h2], z3.And(*goal))


OBLIGATIONS: list[Obligation] = [
    *[
        Obligation(
            f"proofs.tree.residual_in_simplex[n={n}]",
            f"r, q in simplex(n={n}), S = sum (r-q)^+ > 0 => (r-q)^+/S in simplex   (the next sibling's target is a law)",
            partial(_residual_in_simplex, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    Obligation(
        "proofs.tree.induction_step",
        "A=M, M+X=P, S=1-T, 0<=X<=S, (S>0 => L=X/S) => A + (1-T)L = P   (fresh reals; sibling j+1 -> sibling j)",
        _induction_step,
        RELIED_ON_BY,
    ),
    *[
        Obligation(
            f"proofs.tree.without_replacement[n={n}]",
            f"q in simplex(n={n}), q_x < 1 => q without x, renormalized, is in simplex   (siblings without replacement)",
            partial(_without_replacement, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.tree.duplicate_rejected[n={n}]",
            f"r, q in simplex(n={n}), S > 0, r_x < q_x => ((r-q)^+/S)_x = 0   (a repeated rejected token is rejected again)",
            partial(_duplicate_rejected, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.tree.two_siblings[n={n}]",
            f"p, q1, q2 in simplex(n={n}) => the token leaving a two-sibling node ~ p   (monolithic, corroborates)",
            partial(_two_siblings, n),
            RELIED_ON_BY,
            rlimit=40_000_000,
        )
        for n in (2,)  # n = 3 exhausts a 40M rlimit: the lemmas above carry the general claim
    ],
]
