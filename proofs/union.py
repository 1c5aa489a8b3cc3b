"""Several candidate exit layers: the union bound and the Bonferroni level.

With candidate layers 1..K, the served token flips only if the layer it exits at admitted it and
flipped there (``first_exit_event``). For the residual gates, a layer that admits while its
conformal event holds cannot flip (the certificate, proofs.argmax / proofs.float32), so a served
flip implies that some layer's conformal event failed (``residual_gate_event``). Each layer's
event fails with probability <= 1 - q' = (1 - q)/K (Bonferroni q' = 1 - (1 - q)/K,
``bonferroni_level``), and by Boole's inequality the union fails with probability <= 1 - q
(``bonferroni_joint[K]``). For the margin gate the per-layer event is "admitted and flipped",
bounded by alpha/K by conformal risk control, and the same union bound gives alpha. No
independence between layers is assumed: the events live on one arbitrary joint law.

Probability is modelled without measure theory: K events on any probability space induce a law on
the 2^K membership patterns ("atoms"), so P(union) and each P(E_k) are sums of nonnegative atom
weights summing to 1; this is fully general for K events. ``boole_atoms[K]`` checks Boole's
inequality that way for K = 1..6; for any K it follows by induction on K from ``two_events``
(P(A u B) <= P(A) + P(B), with A = E_1 u ... u E_K and B = E_{K+1}) and ``induction_step``
(U_K <= S_K and U_{K+1} <= U_K + p_{K+1} give U_{K+1} <= S_K + p_{K+1} = S_{K+1}); the base
K = 1 is P(E_1) <= P(E_1).
"""

from __future__ import annotations

from functools import partial
from itertools import product

import z3

from verispec.proofs.core import Obligation, implies

BOOLE = ("verispec.reference.conformal.bonferroni", "verispec.reference.conformal.margin_threshold")
LEVEL = ("verispec.reference.conformal.bonferroni",)
RISK = ("verispec.reference.conformal.margin_threshold", "verispec.reference.certificate.margin_admits")
MAX_ATOMS_K = 6
MAX_LAYERS = 16


def event_atoms(k_events: int) -> tuple[dict[tuple[bool, ...], z3.ArithRef], list[z3.BoolRef]]:
    weights = {
        pattern: z3.Real("w_" + "".join("1" if b else "0" for b in pattern))
        for pattern in product((False, True), repeat=k_events)
    }
    law = [w >= 0 for w in weights.values()] + [z3.Sum(list(weights.values())) == 1]
    return weights, law


def prob_event(weights: dict[tuple[bool, ...], z3.ArithRef], k: int) -> z3.ArithRef:
    result: z3.ArithRef = z3.Sum([w for pattern, w in weights.items() if pattern[k]])
    return result


def prob_union(weights: dict[tuple[bool, ...], z3.ArithRef]) -> z3.ArithRef:
    result: z3.ArithRef = z3.Sum([w for pattern, w in weights.items() if any(pattern)])
    return result


def _two_events() -> z3.BoolRef:
    weights, law = event_atoms(2)
    bound = prob_union(weights) <= prob_event(weights, 0) + prob_event(weights, 1)
    return implies(law, bound)


def _induction_step() -> z3.BoolRef:
    u_k, s_k, u_next, p_next = z3.Reals("U_K S_K U_K1 p_K1")
    return implies([u_k <= s_k, u_next <= u_k + p_next], u_next <= s_k + p_next)


def _boole_atoms(k_events: int) -> z3.BoolRef:
    weights, law = event_atoms(k_events)
    total = z3.Sum([prob_event(weights, k) for k in range(k_events)])
    return implies(law, prob_union(weights) <= total)


def _bonferroni_level() -> z3.BoolRef:
    k_layers = z3.Int("K")
    q = z3.Real("q")
    q_layer = 1 - (1 - q) / z3.ToReal(k_layers)
    goal = z3.And(z3.ToReal(k_layers) * (1 - q_layer) == 1 - q, q <= q_layer, q_layer < 1)
    return implies([k_layers >= 1, q > 0, q < 1], goal)


def _bonferroni_joint(k_events: int) -> z3.BoolRef:
    weights, law = event_atoms(k_events)
    q = z3.Real("q")
    q_layer = 1 - (1 - q) / k_events
    per_layer = [prob_event(weights, k) <= 1 - q_layer for k in range(k_events)]
    return implies(law + per_layer + [q > 0, q < 1], prob_union(weights) <= 1 - q)


def _served_flip(admit: list[z3.BoolRef], flip: list[z3.BoolRef]) -> z3.BoolRef:
    # exit at the first admitting layer; no admitting layer -> full depth, which cannot flip
    terms = [z3.And(admit[k], *[z3.Not(a) for a in admit[:k]], flip[k]) for k in range(len(admit))]
    result: z3.BoolRef = z3.Or(*terms)
    return result


def _first_exit_event() -> z3.BoolRef:
    claims = []
    for k_layers in range(1, MAX_LAYERS + 1):
        admit = [z3.Bool(f"admit{k}") for k in range(k_layers)]
        flip = [z3.Bool(f"flip{k}") for k in range(k_layers)]
        union = z3.Or(*[z3.And(a, f) for a, f in zip(admit, flip)])
        claims.append(z3.Implies(_served_flip(admit, flip), union))
    result: z3.BoolRef = z3.And(*claims)
    return result


def _residual_gate_event() -> z3.BoolRef:
    claims = []
    for k_layers in range(1, MAX_LAYERS + 1):
        admit = [z3.Bool(f"admit{k}") for k in range(k_layers)]
        flip = [z3.Bool(f"flip{k}") for k in range(k_layers)]
        cover = [z3.Bool(f"covered{k}") for k in range(k_layers)]
        certified = [z3.Implies(z3.And(a, c), z3.Not(f)) for a, c, f in zip(admit, cover, flip)]
        miss = z3.Or(*[z3.Not(c) for c in cover])
        claims.append(implies(certified, z3.Implies(_served_flip(admit, flip), miss)))
    result: z3.BoolRef = z3.And(*claims)
    return result


OBLIGATIONS: list[Obligation] = [
    Obligation(
        "proofs.union.two_events",
        "any law on 2 events: P(A u B) <= P(A) + P(B)",
        _two_events,
        BOOLE,
    ),
    Obligation(
        "proofs.union.induction_step",
        "U_K <= S_K, U_{K+1} <= U_K + p_{K+1} => U_{K+1} <= S_K + p_{K+1}   (Boole for every K)",
        _induction_step,
        BOOLE,
    ),
    *[
        Obligation(
            f"proofs.union.boole_atoms[K={k}]",
            f"any law on {k} events (2^{k} atoms): P(E_1 u .. u E_{k}) <= sum_k P(E_k)",
            partial(_boole_atoms, k),
            BOOLE,
        )
        for k in range(1, MAX_ATOMS_K + 1)
    ],
    Obligation(
        "proofs.union.bonferroni_level",
        "K >= 1 int, 0 < q < 1, q' = 1 - (1-q)/K => K (1 - q') = 1 - q, q <= q' < 1",
        _bonferroni_level,
        LEVEL,
    ),
    *[
        Obligation(
            f"proofs.union.bonferroni_joint[K={k}]",
            f"any law on {k} events, P(E_k) <= 1 - q' with q' = 1 - (1-q)/{k} => P(union) <= 1 - q",
            partial(_bonferroni_joint, k),
            LEVEL,
        )
        for k in range(1, MAX_ATOMS_K + 1)
    ],
    Obligation(
        "proofs.union.first_exit_event",
        f"K <= {MAX_LAYERS}: served token flips (exit at first admitting layer) => some layer admitted and flipped",
        _first_exit_event,
        RISK,
    ),
    Obligation(
        "proofs.union.residual_gate_event",
        f"K <= {MAX_LAYERS}, (admit_k & covered_k => no flip_k) => (served flip => some layer uncovered)",
        _residual_gate_event,
        LEVEL,
    ),
]
