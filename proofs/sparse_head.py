"""An exact sparse head: a row pruned by the certified bound is in no exact top-k.

Setting (engine/sparse_head.py): ``K_i`` is the full head's logit of row i (the kernel's
value), ``S_i`` a sketch of it, ``B_i`` a radius. The order is the full path's: logit
descending, id ascending, so row i is in the top-k iff ``rank_i < k`` with
``rank_i = #{j : K_j > K_i or (K_j = K_i and j < i)}``. The candidates are the rows with
``U_i = S_i + B_i >= tau``, ``tau`` the k-th largest ``L_j = S_j - B_j``.

Lemmas:

1. Bound soundness.
   - ``holder_block[n]`` (n = 2, 3): ``|sum_j e_j x_j| <= (sum_j |e_j|) max_j |x_j|`` -- the
     per-block Hoelder bound of the sketch error and of the activation's rounding
     (``|w . (x~ - x)| <= ||w||_1 a`` when every ``|x~_j - x_j| <= a``).
   - ``cauchy_schwarz_block[n]`` (n = 2, 3): ``(sum e_j x_j)^2 <= (sum e_j^2)(sum x_j^2)``, the
     other per-block form (the code takes the smaller of the two a block).
   - ``block_sum``: per-block bounds add: ``|t_1| <= b_1, |t_2| <= b_2 => |t_1 + t_2| <= b_1 + b_2``.
   - ``radius_composes``: ``|K - w.x| <= kappa`` (the kernel's error model) and
     ``|S - w.x| <= beta`` (the sketch's) give ``|K - S| <= beta + kappa``.
   - ``rounded_interval``: the interval as the code computes it in float64 (every operation
     rounded, relative error u = 2^-53), widened by eps = 2^-30 (``W = B (1 + eps) + |S| eps``),
     still holds K: ``fl(S - W) <= K <= fl(S + W)``.
2. Pruning soundness.
   - ``pairwise_prune`` (any vocabulary size): ``K_j >= L_j >= tau > U_i >= K_i => K_j > K_i``.
   - ``pruned_outside_top_k[n]`` (n = 2..5, every k < n, every set T of k rows and every row i
     outside it): if ``L_j >= tau`` on T, ``U_i < tau`` and every ``K`` lies in its interval, then
     ``rank_i >= k``: k rows are STRICTLY above i, so no tie rule can admit it.
3. Tie handling.
   - ``superset_first_k[n]`` (n = 2..5, every k < n): on any subset E that holds every row of the
     full top-k, a row of E is in E's top-k iff it is in the full top-k (same order, same ties):
     the evaluated chunks give the full head's answer, exact ties at the cut included.
   - ``nonstrict_prune_flips`` (witness, must be SAT): pruning rows with ``U_i <= tau`` (not
     ``<``) is wrong -- a row tied at the cut with the lower id belongs in the top-k.

4. The head mode's decision rows.
   - ``decision_rows_first_k[n]`` (n = 2..5, every k < n, every k-set T): the law's processed
     values of the decision row (the full head's logit on the evaluated rows, float32's lowest
     value elsewhere) and of the full head's row have the same first k rows with the same
     values, given processed bounds that hold the processed logits, ``lo >= tau`` on T and
     ``hi < tau`` off the evaluated rows, and a pruned row's processed fill at most its ``hi``.
     That the processed bounds and fill satisfy these is the monotonicity of the processing
     (``fl(l + b)``; ``fl(l / r)`` for l > 0, ``fl(l r)`` otherwise, r > 0): a correctly rounded
     IEEE 754 operation is monotone in each argument (assumed, not proved here: z3's
     floating-point theory does not settle it within the rlimit).
   - ``fill_above_bound_flips`` (witness, must be SAT): without ``M_i <= hi_i`` off the evaluated
     rows a pruned row can come first.

5. Lazy sampling.
   - ``lazy_draw_crossing[n]`` (n = 2..6, every t): a non-decreasing running sum known within
     ``[c_lo, c_hi]`` and a threshold within ``[t_lo, t_hi]``: ``c_lo[t] > t_hi`` and
     ``c_hi[t-1] <= t_lo`` make the protocol's draw (the count of ``c_j <= threshold``) equal t.
     That the intervals hold the reference's float64 values is the written argument of
     ``engine.sparse_head.lazy_draw`` (rounding is monotone; relative error bounds per operation).

Composition: (1) makes ``[L_i, U_i]`` hold ``K_i`` for every row as computed; (2) then says
every pruned row has rank >= k in the full order, so the candidates hold the full top-k;
(3) says the top-k of the evaluated rows (a superset of the candidates) is the full top-k,
ties included. The kernel's error model itself is an assumption about ``MatMulNBits``, stated in
``engine.sparse_head.kernel_error_bound`` and tested against the kernel (tests/test_sparse_head.py).
"""

from __future__ import annotations

from functools import partial
from itertools import combinations

import z3

from verispec.proofs.core import Obligation, implies, rabs, reals, rounded

RELIED_ON_BY = ("verispec.engine.sparse_head.head_top_k", "verispec.engine.sparse_head.SparseHead.decision_rows")
BOUND_CODE = ("verispec.engine.sparse_head.kernel_error_bound",)
INTERVAL_CODE = ("verispec.engine.sparse_head.candidates",)
U64 = z3.RealVal(2) ** -53
EPS = z3.RealVal(2) ** -30


def _holder_block(n: int) -> z3.BoolRef:
    e, x = reals("e", n), reals("x", n)
    m = z3.Real("m")
    hyps = [rabs(xj) <= m for xj in x]
    return implies(hyps, rabs(z3.Sum([a * b for a, b in zip(e, x)])) <= z3.Sum([rabs(a) for a in e]) * m)


def _cauchy_schwarz_block(n: int) -> z3.BoolRef:
    e, x = reals("e", n), reals("x", n)
    dot = z3.Sum([a * b for a, b in zip(e, x)])
    result: z3.BoolRef = dot * dot <= z3.Sum([a * a for a in e]) * z3.Sum([b * b for b in x])
    return result


def _block_sum() -> z3.BoolRef:
    t1, t2, b1, b2 = z3.Reals("t1 t2 b1 b2")
    return implies([rabs(t1) <= b1, rabs(t2) <= b2], rabs(t1 + t2) <= b1 + b2)


def _radius_composes() -> z3.BoolRef:
    k, s, wx, kappa, beta = z3.Reals("K S wx kappa beta")
    return implies([rabs(k - wx) <= kappa, rabs(s - wx) <= beta], rabs(k - s) <= beta + kappa)


def _rounded_interval() -> z3.BoolRef:
    k, s, b = z3.Reals("K S B")
    w1, w2, w, lo, hi = z3.Reals("w1 w2 W lo hi")  # each the float64 result of one operation
    abs_s = rabs(s)  # |S| is exact in floating point
    hyps = [
        b >= 0,
        rabs(k - s) <= b,
        rounded(b * (1 + EPS), w1, U64),  # 1 + 2^-30 is a float64
        rounded(abs_s * EPS, w2, U64),
        rounded(w1 + w2, w, U64),
        rounded(s - w, lo, U64),
        rounded(s + w, hi, U64),
    ]
    return implies(hyps, z3.And(lo <= k, k <= hi))


def _pairwise_prune() -> z3.BoolRef:
    kj, lj, ki, ui, tau = z3.Reals("K_j L_j K_i U_i tau")
    return implies([kj >= lj, lj >= tau, tau > ui, ui >= ki], kj > ki)


def _above(k: list[z3.ArithRef], j: int, i: int) -> z3.BoolRef:
    """Row j precedes row i in the order (logit descending, id ascending)."""
    result: z3.BoolRef = z3.Or(k[j] > k[i], z3.And(k[j] == k[i], z3.BoolVal(j < i)))
    return result


def rank(k: list[z3.ArithRef], i: int, members: list[z3.BoolRef] | None = None) -> z3.ArithRef:
    """Row i's position in the order (logit descending, id ascending): the rows before it (only
    those of ``members`` when given); row i is in the top-k iff its rank is < k."""
    n = len(k)
    terms = [
        z3.If(z3.And(_above(k, j, i), members[j]) if members is not None else _above(k, j, i), 1, 0)
        for j in range(n)
        if j != i
    ]
    result: z3.ArithRef = z3.Sum(terms) if terms else z3.IntVal(0)
    return result


def _pruned_outside_top_k(n: int) -> z3.BoolRef:
    k, s, b = reals("K", n), reals("S", n), reals("B", n)
    tau = z3.Real("tau")
    inside = [z3.And(s[i] - b[i] <= k[i], k[i] <= s[i] + b[i]) for i in range(n)]
    claims = []
    for size in range(1, n):
        for top in combinations(range(n), size):
            for i in range(n):
                if i in top:
                    continue
                hyps = inside + [s[j] - b[j] >= tau for j in top] + [s[i] + b[i] < tau]
                claims.append(implies(hyps, rank(k, i) >= size))
    result: z3.BoolRef = z3.And(*claims)
    return result


def _superset_first_k(n: int) -> z3.BoolRef:
    k = reals("K", n)
    member = [z3.Bool(f"E{i}") for i in range(n)]
    claims = []
    for size in range(1, n):
        holds_top = [z3.Implies(rank(k, i) < size, member[i]) for i in range(n)]
        same = [z3.Implies(member[i], (rank(k, i, member) < size) == (rank(k, i) < size)) for i in range(n)]
        claims.append(implies(holds_top, z3.And(*same)))
    result: z3.BoolRef = z3.And(*claims)
    return result


def _lazy_draw_crossing(n: int) -> z3.BoolRef:
    c, c_lo, c_hi = reals("c", n), reals("c_lo", n), reals("c_hi", n)
    thr, t_lo, t_hi = z3.Reals("thr t_lo t_hi")
    hyps = [c[j] <= c[j + 1] for j in range(n - 1)]  # a running sum of non-negative terms
    hyps += [z3.And(c_lo[j] <= c[j], c[j] <= c_hi[j]) for j in range(n)] + [t_lo <= thr, thr <= t_hi]
    chosen = z3.Sum([z3.If(c[j] <= thr, 1, 0) for j in range(n)])  # searchsorted(side="right")
    claims = []
    for t in range(n):
        decided = [c_lo[t] > t_hi] + ([c_hi[t - 1] <= t_lo] if t > 0 else [])
        claims.append(implies(hyps + decided, chosen == t))
    result: z3.BoolRef = z3.And(*claims)
    return result


def _decision_rows_first_k(n: int) -> z3.BoolRef:
    """The sparse head mode's decision rows (engine.sparse_head.SparseHead.decision_rows): row i's
    processed value is P_i in the full head's row and M_i in the decision row; evaluated rows
    (``E``) carry the full head's logit (M_i = P_i), pruned rows the fill value, whose processed
    value is at most the row's processed upper end (M_i <= hi_i: the fill is below every logit
    and the processing is monotone). With the processed bounds holding P, the k-set T reaching
    tau and every pruned row's upper end below tau: the first k rows of both rows are the same
    rows, with the same values."""
    p, m, lo, hi = reals("P", n), reals("M", n), reals("lo", n), reals("hi", n)
    member = [z3.Bool(f"E{i}") for i in range(n)]
    tau = z3.Real("tau")
    base = [z3.And(lo[i] <= p[i], p[i] <= hi[i]) for i in range(n)]
    base += [z3.Implies(member[i], m[i] == p[i]) for i in range(n)]
    base += [z3.Implies(z3.Not(member[i]), z3.And(m[i] <= hi[i], hi[i] < tau)) for i in range(n)]
    claims = []
    for size in range(1, n):
        for top in combinations(range(n), size):
            hyps = base + [lo[j] >= tau for j in top] + [member[j] for j in top]
            same = [(rank(m, i) < size) == (rank(p, i) < size) for i in range(n)]
            values = [z3.Implies(rank(p, i) < size, m[i] == p[i]) for i in range(n)]
            claims.append(implies(hyps, z3.And(*same, *values)))
    result: z3.BoolRef = z3.And(*claims)
    return result


def _fill_above_bound_flips() -> z3.BoolRef:
    """Witness: a fill whose processed value may exceed the row's upper end (a positive bias
    added to the fill but not to the bounds) can put a pruned row first."""
    p, m, lo, hi = reals("P", 2), reals("M", 2), reals("lo", 2), reals("hi", 2)
    tau = z3.Real("tau")
    result: z3.BoolRef = z3.And(
        *[z3.And(lo[i] <= p[i], p[i] <= hi[i]) for i in range(2)],
        m[1] == p[1],
        lo[1] >= tau,
        hi[0] < tau,  # row 0 pruned, its fill unconstrained
        rank(m, 0) < 1,
    )
    return result


def _nonstrict_prune_flips() -> z3.BoolRef:
    k, s, b = reals("K", 2), reals("S", 2), reals("B", 2)
    tau = z3.Real("tau")
    inside = [z3.And(s[i] - b[i] <= k[i], k[i] <= s[i] + b[i]) for i in range(2)]
    # k = 1, T = {1}; row 0 "pruned" by U_0 <= tau, yet it is the first row of the order
    result: z3.BoolRef = z3.And(*inside, s[1] - b[1] >= tau, s[0] + b[0] <= tau, rank(k, 0) < 1)
    return result


OBLIGATIONS: list[Obligation] = [
    *[
        Obligation(
            f"proofs.sparse_head.holder_block[n={n}]",
            "|x_j| <= m for all j => |sum e_j x_j| <= (sum |e_j|) m   (per-block Hoelder)",
            partial(_holder_block, n),
            BOUND_CODE,
            rlimit=20_000_000,
        )
        for n in (2, 3)
    ],
    *[
        Obligation(
            f"proofs.sparse_head.cauchy_schwarz_block[n={n}]",
            "(sum e_j x_j)^2 <= (sum e_j^2)(sum x_j^2)   (per-block Cauchy-Schwarz)",
            partial(_cauchy_schwarz_block, n),
            BOUND_CODE,
            rlimit=20_000_000,
        )
        for n in (2, 3)
    ],
    Obligation(
        "proofs.sparse_head.block_sum",
        "|t1| <= b1, |t2| <= b2 => |t1 + t2| <= b1 + b2   (per-block bounds add)",
        _block_sum,
        BOUND_CODE,
    ),
    Obligation(
        "proofs.sparse_head.radius_composes",
        "|K - w.x| <= kappa, |S - w.x| <= beta => |K - S| <= beta + kappa",
        _radius_composes,
        RELIED_ON_BY,
    ),
    Obligation(
        "proofs.sparse_head.rounded_interval",
        "|K-S| <= B, W = fl(fl(B(1+2^-30)) + fl(|S| 2^-30)) => fl(S-W) <= K <= fl(S+W)   (float64, u=2^-53)",
        _rounded_interval,
        INTERVAL_CODE,
    ),
    Obligation(
        "proofs.sparse_head.pairwise_prune",
        "K_j >= L_j >= tau > U_i >= K_i => K_j > K_i   (any vocabulary size)",
        _pairwise_prune,
        RELIED_ON_BY,
    ),
    *[
        Obligation(
            f"proofs.sparse_head.pruned_outside_top_k[n={n}]",
            "K_i in [S_i-B_i, S_i+B_i], S_j-B_j >= tau on a k-set T, S_i+B_i < tau, i not in T => rank_i >= k",
            partial(_pruned_outside_top_k, n),
            RELIED_ON_BY,
            rlimit=50_000_000,
        )
        for n in range(2, 6)
    ],
    *[
        Obligation(
            f"proofs.sparse_head.superset_first_k[n={n}]",
            "E holds every row with rank < k => for i in E: rank_E(i) < k iff rank(i) < k   (ties: id ascending)",
            partial(_superset_first_k, n),
            RELIED_ON_BY,
            rlimit=50_000_000,
        )
        for n in range(2, 6)
    ],
    *[
        Obligation(
            f"proofs.sparse_head.lazy_draw_crossing[n={n}]",
            "c non-decreasing in [c_lo, c_hi], thr in [t_lo, t_hi], c_lo[t] > t_hi, c_hi[t-1] <= t_lo => draw = t",
            partial(_lazy_draw_crossing, n),
            ("verispec.engine.sparse_head.lazy_draw",),
            rlimit=20_000_000,
        )
        for n in range(2, 7)
    ],
    *[
        Obligation(
            f"proofs.sparse_head.decision_rows_first_k[n={n}]",
            "P in [lo, hi]; M = P on E; off E: M <= hi < tau; lo >= tau on a k-set T in E => "
            "the first k of M are the first k of P, same values",
            partial(_decision_rows_first_k, n),
            ("verispec.engine.sparse_head.SparseHead.decision_rows",),
            rlimit=50_000_000,
        )
        for n in range(2, 6)
    ],
    Obligation(
        "proofs.sparse_head.fill_above_bound_flips",
        "SAT: a pruned row's fill above its processed upper end can lead the decision row   (bound the fill too)",
        _fill_above_bound_flips,
        ("verispec.engine.sparse_head.SparseHead.decision_rows",),
        kind="witness",
    ),
    Obligation(
        "proofs.sparse_head.nonstrict_prune_flips",
        "SAT: K in its intervals, S_1-B_1 >= tau, S_0+B_0 <= tau, yet row 0 is the top-1   (prune only U < tau)",
        _nonstrict_prune_flips,
        RELIED_ON_BY,
        kind="witness",
    ),
]
