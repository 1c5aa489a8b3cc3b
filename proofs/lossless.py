"""Lossless speculative sampling: one verification step emits token i with probability p_i.

One step of sampled verification (Leviathan et al. 2023; Chen et al. 2023) drafts token i with
probability q_i, accepts it with probability min(1, p_i/q_i), and on rejection samples from the
residual normalize((p - q)^+). The probability that the step emits token i is therefore

    P(i) = A_i + R_i,
    A_i  = q_i * min(1, p_i / q_i)          (drafted and accepted; A_i = 0 when q_i = 0: never drafted)
    R_i  = (1 - sum_j min(p_j, q_j)) * (p_i - q_i)^+ / sum_j (p_j - q_j)^+
                                              (some draft rejected, then i drawn from the residual;
                                               R_i = 0 when sum_j (p_j - q_j)^+ = 0, i.e. p == q:
                                               then no draft is ever rejected)

and the theorem is P(i) = p_i for every i, for all p, q in the probability simplex.

A monolithic z3 query for the theorem proves at n <= 5 but exhausts its rlimit at n = 6 (see
``one_step_direct``: the sums couple every coordinate's case split). The proof therefore goes
through lemmas, each small:

1. ``coordinate_split``  (any reals a, b):      min(a, b) + (a - b)^+ = a
2. ``accept_mass``       (p >= 0, q >= 0):      A(p, q) = min(p, q)    (q > 0 and q = 0 both)
3. ``residual_total[n]`` (p, q in simplex):     sum_j (p_j - q_j)^+ = 1 - sum_j min(p_j, q_j)
4. ``residual_bounds[n]``(p, q in simplex):     0 <= (p_i - q_i)^+ <= sum_j (p_j - q_j)^+, all i
5. ``compose``           (fresh reals P, M, X, A, S, T):
       A = M,  M + X = P,  S = 1 - T,  0 <= X <= S   =>   A + ite(S = 0, 0, (1 - T) X / S) = P

Composition: for p, q in the simplex of size n and any i, instantiate (5) with P = p_i,
M = min(p_i, q_i), X = (p_i - q_i)^+, A = A(p_i, q_i), S = sum_j (p_j - q_j)^+,
T = sum_j min(p_j, q_j). Its four hypotheses are exactly the conclusions of (2), (1), (3) and (4)
at those terms, and its conclusion is exactly A_i + R_i = p_i. Instantiating universally
quantified reals with terms is sound, so (1)-(5) prove the theorem for every n = 2..6 proved in (3)
and (4) (and, since (1), (2), (5) do not mention n, for any n for which (3), (4) hold). The p == q
case is the S = 0 branch of (5); ``equal_rows[n]`` adds that S = 0 happens only when p == q.
``one_step[n]`` has z3 check that instantiation at each n = 2..6 (the lemma conclusions at the
actual terms are its hypotheses, for every coordinate i at once); ``one_step_direct[n]`` is the
monolithic query, kept at n = 2..4 as corroboration (n = 6 exhausts a 20M rlimit: see
proofs/test_core.py::test_monolithic_n6_exhausts_rlimit).
"""

from __future__ import annotations

from functools import partial

import z3

from verispec.proofs.core import Obligation, implies, pos, reals, rmin

SIZES = range(2, 7)
RELIED_ON_BY = ("verispec.reference.speculative.verify_sampled",)


def _simplex(name: str, n: int) -> tuple[list[z3.ArithRef], list[z3.BoolRef]]:
    xs = reals(name, n)
    return xs, [x >= 0 for x in xs] + [z3.Sum(xs) == 1]


def accept_mass(p: z3.ArithRef, q: z3.ArithRef) -> z3.ArithRef:
    """A(p, q) = q * min(1, p/q) when q > 0, else 0 (a token with q = 0 is never drafted)."""
    result: z3.ArithRef = z3.If(q > 0, q * rmin(1, p / q), 0)
    return result


def simplex_rows(n: int) -> tuple[list[z3.ArithRef], list[z3.ArithRef], list[z3.BoolRef]]:
    p, hp = _simplex("p", n)
    q, hq = _simplex("q", n)
    return p, q, hp + hq


def residual_sums(p: list[z3.ArithRef], q: list[z3.ArithRef]) -> tuple[z3.ArithRef, z3.ArithRef]:
    s_pos = z3.Sum([pos(a - b) for a, b in zip(p, q)])
    s_min = z3.Sum([rmin(a, b) for a, b in zip(p, q)])
    return s_pos, s_min


def _emitted(i: int, p: list[z3.ArithRef], q: list[z3.ArithRef]) -> z3.ArithRef:
    s_pos, s_min = residual_sums(p, q)
    residual = z3.If(s_pos == 0, 0, (1 - s_min) * pos(p[i] - q[i]) / s_pos)
    result: z3.ArithRef = accept_mass(p[i], q[i]) + residual
    return result


def _coordinate_split() -> z3.BoolRef:
    a, b = z3.Reals("a b")
    result: z3.BoolRef = rmin(a, b) + pos(a - b) == a
    return result


def _accept_mass() -> z3.BoolRef:
    p, q = z3.Reals("p q")
    return implies([p >= 0, q >= 0], accept_mass(p, q) == rmin(p, q))


def _residual_total(n: int) -> z3.BoolRef:
    p, q, hyps = simplex_rows(n)
    s_pos, s_min = residual_sums(p, q)
    return implies(hyps, s_pos == 1 - s_min)


def _residual_bounds(n: int) -> z3.BoolRef:
    p, q, hyps = simplex_rows(n)
    s_pos, _ = residual_sums(p, q)
    bounds = [z3.And(0 <= pos(a - b), pos(a - b) <= s_pos) for a, b in zip(p, q)]
    return implies(hyps, z3.And(*bounds))


def _compose() -> z3.BoolRef:
    big_p, big_m, x, a, s, t = z3.Reals("P M X A S T")
    goal = a + z3.If(s == 0, 0, (1 - t) * x / s) == big_p
    return implies([a == big_m, big_m + x == big_p, s == 1 - t, 0 <= x, x <= s], goal)


def _equal_rows(n: int) -> z3.BoolRef:
    p, q, hyps = simplex_rows(n)
    s_pos, s_min = residual_sums(p, q)
    same = z3.And(*[a == b for a, b in zip(p, q)])
    return implies(hyps, z3.And(s_pos == 0) == same)


def _one_step(n: int) -> z3.BoolRef:
    """The theorem at size n from the lemma conclusions instantiated at its terms (no re-proof)."""
    p, q, hyps = simplex_rows(n)
    s_pos, s_min = residual_sums(p, q)
    lemmas: list[z3.BoolRef] = [s_pos == 1 - s_min]  # residual_total[n]
    for a, b in zip(p, q):
        lemmas += [
            rmin(a, b) + pos(a - b) == a,  # coordinate_split
            accept_mass(a, b) == rmin(a, b),  # accept_mass
            0 <= pos(a - b),  # residual_bounds[n]
            pos(a - b) <= s_pos,
        ]
    return implies(hyps + lemmas, z3.And(*[_emitted(i, p, q) == p[i] for i in range(n)]))


def one_step_direct(n: int) -> z3.BoolRef:
    p, q, hyps = simplex_rows(n)
    return implies(hyps, z3.And(*[_emitted(i, p, q) == p[i] for i in range(n)]))


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.lossless.coordinate_split",
        "for all reals a, b: min(a,b) + (a-b)^+ = a",
        _coordinate_split,
        RELIED_ON_BY,
    ),
    Obligation(
        "proofs.lossless.accept_mass",
        "p >= 0, q >= 0 => [q>0 ? q*min(1,p/q) : 0] = min(p,q)   (q > 0 and the never-drafted q = 0)",
        _accept_mass,
        RELIED_ON_BY,
    ),
    *[
        Obligation(
            f"proofs.lossless.residual_total[n={n}]",
            f"p, q in simplex(n={n}) => sum (p-q)^+ = 1 - sum min(p,q)",
            partial(_residual_total, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.lossless.residual_bounds[n={n}]",
            f"p, q in simplex(n={n}) => 0 <= (p_i-q_i)^+ <= sum_j (p_j-q_j)^+ for all i",
            partial(_residual_bounds, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    Obligation(
        "proofs.lossless.compose",
        "A=M, M+X=P, S=1-T, 0<=X<=S => A + [S=0 ? 0 : (1-T)X/S] = P   (fresh reals; lemmas -> theorem)",
        _compose,
        RELIED_ON_BY,
    ),
    *[
        Obligation(
            f"proofs.lossless.equal_rows[n={n}]",
            f"p, q in simplex(n={n}) => (sum (p-q)^+ = 0 <=> p = q)   (the residual branch is dead iff p == q)",
            partial(_equal_rows, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.lossless.one_step[n={n}]",
            f"p, q in simplex(n={n}) => A_i + R_i = p_i for all i   (from the lemma instances above)",
            partial(_one_step, n),
            RELIED_ON_BY,
        )
        for n in SIZES
    ],
    *[
        Obligation(
            f"proofs.lossless.one_step_direct[n={n}]",
            f"p, q in simplex(n={n}) => A_i + R_i = p_i for all i   (monolithic, corroborates the lemmas)",
            partial(one_step_direct, n),
            RELIED_ON_BY,
            rlimit=20_000_000,
        )
        for n in range(2, 5)
    ],
]
