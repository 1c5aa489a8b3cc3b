"""The conformal order-statistic index k = ceil((n+1) q): its coverage level and its computation.

Split conformal prediction (Vovk et al. 2005; Lei et al. 2018; Angelopoulos & Bates 2023, "A
Gentle Introduction", Thm D.1): with n calibration scores and a fresh score exchangeable with
them, the k-th smallest calibration score Q satisfies P(score <= Q) >= k/(n+1) (the fresh
score's rank is uniform on 1..n+1 up to ties), with equality when ties have probability zero;
conditionally on the calibration draw the coverage is then Beta(k, n+1-k)-distributed (Vovk 2012,
"Conditional validity of inductive conformal predictors"). That probability fact is cited, not
proved here (z3 has no measure theory; tests/test_conformal_coverage.py tests it statistically);
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

The prompt-level risk control (reference.conformal.prompt_risk_threshold: the prompt is the
exchangeable unit, the loss of prompt i is the fraction of its T_i tokens that cost). The theorem
(Angelopoulos et al., "Conformal Risk Control", ICLR 2024, Thm 1: E[L_{n+1}(lambda^)] <= alpha
for a loss bounded by B, non-increasing in lambda, with lambda^ the least lambda with
(n R^(lambda) + B)/(n+1) <= alpha) is cited; what is proved is what makes the code an instance of it:

- ``prompt_loss_bounded``: 0 <= c <= T, T >= 1 => 0 <= c/T <= 1 (the loss is bounded by B = 1);
- ``crc_budget_iff``: (S + 1)/(n+1) <= r <=> S <= (n+1) r - 1 (the code compares the sum of
  losses with that budget, in Fractions);
- ``min_prompts_iff``: with alpha = a/b and c = ceil(K b/a): (n+1) alpha/K >= 1 <=> n >= c - 1,
  i.e. exactly below ``min_prompts`` the budget is negative and the gate refuses everything;
- ``threshold_is_infimum[J]``: for J event tokens with weights w_j > 0 and scores s_j, the loss
  L(lambda) = sum_j w_j [s_j > lambda]; the code returns m = s_j with sum_{s_i > m} w_i <= B <
  sum_{s_i >= m} w_i (the first tie group, in descending order, that overflows the budget B):
  then L(m) <= B and L(lambda) > B for every lambda < m, so m is the infimum the theorem takes;
  if the whole weight fits, L(lambda) <= B everywhere (-inf); if B < 0, nothing qualifies (+inf);
- ``flip_fraction_union[K]``: over T tokens and K depths, if each served flip has some depth that
  admitted it and flipped there (proofs.union.first_exit_event), then #served flips <= sum_k
  #(admitted and flipped at k): a prompt's flip fraction is at most the sum of its K per-depth
  losses, so (linearity of expectation, cited) the expected flip fraction of a new prompt is at
  most K alpha/K = alpha.
"""

from __future__ import annotations

from functools import partial

import z3

from verispec.proofs.core import Obligation, implies

INDEX = ("verispec.reference.conformal.conformal_index",)
PROMPT = ("verispec.reference.conformal.prompt_risk_threshold",)
MIN_PROMPTS = ("verispec.reference.conformal.min_prompts", "verispec.reference.conformal.prompt_risk_threshold")
INFIMUM_TOKENS = (1, 2, 3, 4, 5)
UNION_DEPTHS = (1, 2, 3, 5)
UNION_TOKENS = 4
CODE = ("verispec.reference.conformal.conformal_index", "verispec.reference.conformal.conformal_quantile")


def _ceiling(n: z3.ArithRef, q: z3.ArithRef, k: z3.ArithRef) -> list[z3.BoolRef]:
    m = (z3.ToReal(n) + 1) * q
    return [n >= 1, q > 0, q < 1, z3.ToReal(k) - 1 < m, m <= z3.ToReal(k)]


def conformal_symbols() -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
    n, k = z3.Ints("n k")
    q = z3.Real("q")
    return n, q, k


def _index_covers() -> z3.BoolRef:
    n, q, k = conformal_symbols()
    return implies(_ceiling(n, q, k), z3.ToReal(k) / (z3.ToReal(n) + 1) >= q)


def _index_tight() -> z3.BoolRef:
    n, q, k = conformal_symbols()
    nr = z3.ToReal(n) + 1
    return implies(_ceiling(n, q, k), z3.ToReal(k) / nr < q + 1 / nr)


def _index_positive() -> z3.BoolRef:
    n, q, k = conformal_symbols()
    return implies(_ceiling(n, q, k), k >= 1)


def _never_admits_iff() -> z3.BoolRef:
    n, q, k = conformal_symbols()
    nr = z3.ToReal(n)
    return implies(_ceiling(n, q, k), (k > n) == (q > nr / (nr + 1)))


def _ceil_by_floor_division() -> z3.BoolRef:
    m, b = z3.Ints("m b")
    k = -((-m) / b)  # z3 Int division: floor for b > 0, as Python's //
    return implies([b >= 1], z3.And(b * (k - 1) < m, m <= b * k))


def _prompt_loss_bounded() -> z3.BoolRef:
    c, t = z3.Ints("c T")
    loss = z3.ToReal(c) / z3.ToReal(t)
    return implies([t >= 1, c >= 0, c <= t], z3.And(loss >= 0, loss <= 1))


def _crc_budget_iff() -> z3.BoolRef:
    n = z3.Int("n")
    r, total = z3.Reals("r S")
    nr = z3.ToReal(n) + 1
    return implies([n >= 1, r > 0, r < 1], ((total + 1) / nr <= r) == (total <= nr * r - 1))


def _min_prompts_iff() -> z3.BoolRef:
    a, b, k, c, n = z3.Ints("a b K c n")
    ceiling = [z3.ToReal(c) - 1 < z3.ToReal(k * b) / z3.ToReal(a), z3.ToReal(k * b) / z3.ToReal(a) <= z3.ToReal(c)]
    alpha = z3.ToReal(a) / z3.ToReal(b)
    admits = (z3.ToReal(n) + 1) * alpha / z3.ToReal(k) >= 1
    return implies([a >= 1, b > a, k >= 1, n >= 1] + ceiling, admits == (n >= c - 1))


def _threshold_is_infimum(tokens: int) -> z3.BoolRef:
    s = [z3.Real(f"s{j}") for j in range(tokens)]
    w = [z3.Real(f"w{j}") for j in range(tokens)]
    budget, lam = z3.Reals("B lam")

    def loss(at: z3.ArithRef) -> z3.ArithRef:
        result: z3.ArithRef = z3.Sum([z3.If(s[j] > at, w[j], 0) for j in range(tokens)])
        return result

    positive = [wj > 0 for wj in w]
    claims = []
    for j in range(tokens):  # the code returns m = s_j
        m = s[j]
        above = z3.Sum([z3.If(s[i] > m, w[i], 0) for i in range(tokens)])
        through = z3.Sum([z3.If(s[i] >= m, w[i], 0) for i in range(tokens)])
        returned = z3.And(above <= budget, through > budget)
        claims.append(z3.Implies(returned, z3.And(loss(m) <= budget, z3.Implies(lam < m, loss(lam) > budget))))
    everything_fits = z3.Implies(z3.Sum(w) <= budget, loss(lam) <= budget)
    nothing_fits = z3.Implies(budget < 0, loss(lam) > budget)
    return implies(positive, z3.And(*claims, everything_fits, nothing_fits))


def _flip_fraction_union(depths: int) -> z3.BoolRef:
    admit = [[z3.Bool(f"admit_{k}_{t}") for t in range(UNION_TOKENS)] for k in range(depths)]
    flip = [[z3.Bool(f"flip_{k}_{t}") for t in range(UNION_TOKENS)] for k in range(depths)]
    served = [z3.Bool(f"served_flip_{t}") for t in range(UNION_TOKENS)]
    per_token = [
        z3.Implies(served[t], z3.Or(*[z3.And(admit[k][t], flip[k][t]) for k in range(depths)]))
        for t in range(UNION_TOKENS)
    ]
    served_count = z3.Sum([z3.If(x, 1, 0) for x in served])
    depth_counts = z3.Sum(
        [z3.If(z3.And(admit[k][t], flip[k][t]), 1, 0) for k in range(depths) for t in range(UNION_TOKENS)]
    )
    return implies(per_token, served_count <= depth_counts)


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
    Obligation(
        "proofs.conformal.prompt_loss_bounded",
        "T >= 1, 0 <= c <= T ints => 0 <= c/T <= 1   (per-prompt loss bounded by B = 1)",
        _prompt_loss_bounded,
        PROMPT,
    ),
    Obligation(
        "proofs.conformal.crc_budget_iff",
        "n >= 1 int, 0 < r < 1 => ((S + 1)/(n+1) <= r <=> S <= (n+1) r - 1)",
        _crc_budget_iff,
        PROMPT,
    ),
    Obligation(
        "proofs.conformal.min_prompts_iff",
        "1 <= a < b, K >= 1, n >= 1 ints, c = ceil(K b/a) => ((n+1)(a/b)/K >= 1 <=> n >= c - 1)",
        _min_prompts_iff,
        MIN_PROMPTS,
    ),
    *[
        Obligation(
            f"proofs.conformal.threshold_is_infimum[J={j}]",
            f"{j} weighted scores, L(x) = sum w_j [s_j > x]: returned m => L(m) <= B and L(x) > B for x < m; "
            "sum w <= B => L <= B; B < 0 => L > B",
            partial(_threshold_is_infimum, j),
            PROMPT,
        )
        for j in INFIMUM_TOKENS
    ],
    *[
        Obligation(
            f"proofs.conformal.flip_fraction_union[K={k}]",
            f"{UNION_TOKENS} tokens, {k} depths: (served flip => some depth admitted and flipped) => "
            "#served flips <= sum_k #(admitted and flipped at k)",
            partial(_flip_fraction_union, k),
            PROMPT,
        )
        for k in UNION_DEPTHS
    ],
]
