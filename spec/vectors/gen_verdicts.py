"""Generators of the verifier cases: sampled verification (p, q, drafts, uniforms -> verdict) and
greedy verification (p, drafts -> verdict), random and deliberate edge and invalid cases."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.spec.vectors.draws import U_MAX, Item, draw, normalize, one_hot, random_row
from verispec.spec.vectors.wire import Json, rows_json


def _sampled(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Json:
    drafts_json, uniforms_json = [int(x) for x in drafts], [float(u) for u in uniforms]
    return {"p": rows_json(p), "q": rows_json(q), "drafts": drafts_json, "uniforms": uniforms_json}


def _random_sampled(rng: np.random.Generator, vocab: int, k: int, zeros: float) -> Json:
    """Random rows; each p_i is often a mix with q_i so that acceptances reach deep positions."""
    q = np.stack([random_row(rng, vocab, zeros) for _ in range(k)])
    p = np.stack([random_row(rng, vocab, zeros) for _ in range(k + 1)])
    for i in range(k):
        if rng.random() < 0.6:
            p[i] = normalize(0.85 * q[i] + 0.15 * p[i])
    drafts = [draw(rng, q[i]) for i in range(k)]
    return _sampled(p, q, drafts, rng.random(k + 1).tolist())


def sampled_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Sampled verification: ``count`` random cases plus the deliberate edge cases."""
    items: list[Item] = []
    for _ in range(count):
        vocab, k = int(rng.integers(2, 9)), int(rng.choice([1, 2, 3, 4, 5, 8]))
        items.append((_random_sampled(rng, vocab, k, float(rng.choice([0.0, 0.3]))), ["random"]))
    items += _sampled_edges(rng)
    items += _sampled_invalid()
    return items


def _sampled_edges(rng: np.random.Generator) -> list[Item]:
    items: list[Item] = []

    def add(tags: list[str], p: npt.ArrayLike, q: npt.ArrayLike, drafts: list[int], uniforms: list[float]) -> None:
        items.append((_sampled(p, q, drafts, uniforms), tags))

    for k in (1, 8):  # the shortest and the longest draft
        for _ in range(3):
            items.append((_random_sampled(rng, int(rng.integers(2, 9)), k, 0.2), [f"k{k}"]))
    for k in (1, 3, 8):  # p == q: every draft accepted, bonus from p_k
        q = np.stack([random_row(rng, 6, 0.3) for _ in range(k)])
        p = np.concatenate([q, random_row(rng, 6)[None]])
        add(["p_equals_q", f"k{k}"], p, q, [draw(rng, r) for r in q], rng.random(k + 1).tolist())
    for _ in range(3):  # zeros in q where p has mass: the residual lives there
        q = np.stack([random_row(rng, 6) for _ in range(3)])
        q[:, :3] = 0.0
        q = q / q.sum(axis=1, keepdims=True)
        p = np.stack([random_row(rng, 6) for _ in range(4)])
        add(["zeros_in_q"], p, q, [draw(rng, r) for r in q], [0.97, 0.99, 0.995, float(rng.random())])

    # one-hot rows: a greedy draft (q one-hot), a point-mass target, both
    e = one_hot
    p_random = np.stack([random_row(rng, 5) for _ in range(3)])
    add(["one_hot_q"], p_random, np.stack([e(5, 2), e(5, 4)]), [2, 4], [0.3, 0.6, 0.8])
    add(["one_hot_p", "last_vocab_id"], np.stack([e(5, 4), e(5, 0)]), random_row(rng, 5)[None], [1], [0.0, 0.5])
    both = ["one_hot_p", "one_hot_q", "p_equals_q", "last_vocab_id"]
    add(both, np.stack([e(4, 1), e(4, 3)]), e(4, 1)[None], [1], [U_MAX, U_MAX])

    # ties: uniform rows, a residual with tied entries, disjoint supports
    tie = [0.25, 0.25, 0.25, 0.25]
    add(["ties", "zeros_in_q"], [tie, tie], [[0.5, 0.5, 0.0, 0.0]], [1], [0.75, 0.5])
    add(["ties", "disjoint_supports"], [[0.0, 0.5, 0.0, 0.5], tie], [[0.5, 0.0, 0.5, 0.0]], [0], [0.1, 0.5])

    # the last vocab id: repair and bonus mass only there, the top uniform, trailing zeros
    eighth = [0.125] * 8
    add(["last_vocab_id", "bonus"], [eighth, list(e(8, 7))], [eighth], [7], [0.5, U_MAX])
    add(["last_vocab_id", "repair"], [[0.0, 0.25, 0.25, 0.5], tie], [[0.5, 0.5, 0.0, 0.0]], [0], [0.5, U_MAX])
    halves = [0.5, 0.5, 0.0, 0.0]
    add(["trailing_zeros", "u_max"], [halves, halves], [halves], [1], [0.5, U_MAX])

    # protocol boundaries (dyadic, so every float64 step is exact): the strict < of the test;
    # 0.5 * 0.5 == 0.25 rejects, one ulp below 0.5 accepts
    bound_p, bound_q = [[0.25, 0.5, 0.25], [0.5, 0.25, 0.25]], [[0.5, 0.25, 0.25]]
    add(["accept_boundary"], bound_p, bound_q, [0], [0.5, 0.5])
    add(["accept_boundary"], bound_p, bound_q, [0], [float(np.nextafter(0.5, 0.0)), 0.5])
    # the final draw exactly on a running-sum boundary: u * total == cumsum[t] picks t + 1
    cdf = [0.25, 0.25, 0.5]
    add(["cdf_boundary", "bonus"], [cdf, cdf], [cdf], [2], [0.5, 0.5])
    add(["cdf_boundary", "bonus"], [cdf, cdf], [cdf], [2], [0.5, 0.25])
    add(["cdf_boundary", "repair"], [[0.125, 0.375, 0.5], [1.0, 0.0, 0.0]], [[0.625, 0.125, 0.25]], [0], [0.5, 0.5])
    # u = 0: every draft of positive target mass accepted, the draw is the first positive id
    u0_p = [[0.0, 0.5, 0.5], [0.0, 0.0, 1.0], [0.0, 0.5, 0.5]]
    add(["u_zero", "bonus"], u0_p, [[0.0, 0.5, 0.5], [0.5, 0.0, 0.5]], [1, 2], [0.0, 0.0, 0.0])
    # p(x) = 0 at the draft: rejected whatever u
    add(["p_zero_at_draft", "u_zero"], [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], [[0.5, 0.25, 0.25]], [0], [0.0, 0.3])
    # a rejection with no positive residual: p <= q everywhere, p summing to 1 - 2^-30
    add(["zero_residual"], [[0.5, 0.5 - 2.0**-30], [0.5, 0.5]], [[0.5, 0.5]], [1], [0.9999999999, 0.75])
    # a subnormal residual total (u * total rounds up to total): the last id with positive weight
    sub_p = [[0.5, float(np.nextafter(0.5, 0.0)), 5e-324], [0.25, 0.25, 0.5]]
    add(["subnormal_residual", "last_vocab_id"], sub_p, [[0.5, 0.5, 0.0]], [1], [U_MAX, U_MAX])
    add(["subnormal_residual"], sub_p, [[0.5, 0.5, 0.0]], [1], [U_MAX, 0.3])

    # k = 8: all accepted, and rejected at the very last draft
    q8 = np.stack([random_row(rng, 4) for _ in range(8)])
    p8 = np.concatenate([q8, e(4, 3)[None]])
    drafts8 = [draw(rng, r) for r in q8]
    add(["k8", "p_equals_q", "bonus"], p8, q8, drafts8, [0.5] * 8 + [0.9])
    p8_last = p8.copy()
    p8_last[7] = e(4, (drafts8[7] + 1) % 4)
    add(["k8", "one_hot_p", "repair_at_last"], p8_last, q8, drafts8, [0.5] * 9)
    return items


def _sampled_invalid() -> list[Item]:
    """Inputs that break the contract: an implementation must answer with an error."""
    p = [[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]]
    q = [[0.25, 0.75, 0.0]]
    bad: list[tuple[str, Json]] = [
        ("draft_with_zero_q", _sampled(p, q, [2], [0.5, 0.5])),
        ("draft_id_equals_vocab", _sampled(p, q, [3], [0.5, 0.5])),
        ("negative_draft_id", _sampled(p, q, [-1], [0.5, 0.5])),
        ("p_row_sums_to_0.9", _sampled([[0.45, 0.45, 0.0], [0.25, 0.25, 0.5]], q, [1], [0.5, 0.5])),
        ("negative_q_entry", _sampled(p, [[-0.25, 1.25, 0.0]], [1], [0.5, 0.5])),
        ("uniform_equals_1", _sampled(p, q, [1], [1.0, 0.5])),
        ("negative_uniform", _sampled(p, q, [1], [0.5, -0.25])),
        ("k_uniforms_not_k_plus_1", _sampled(p, q, [1], [0.5])),
        ("k_rows_of_p_not_k_plus_1", _sampled(p[:1], q, [1], [0.5, 0.5])),
        ("vocab_sizes_disagree", _sampled(p, [[0.25, 0.75, 0.0, 0.0]], [1], [0.5, 0.5])),
        ("k_equals_0", {"p": p[:1], "q": [], "drafts": [], "uniforms": [0.5]}),
    ]
    return [(inp, ["invalid", label]) for label, inp in bad]


def greedy_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Greedy verification: random logits rows (often tied: multiples of 1/4) and edge cases."""
    items: list[Item] = []
    for _ in range(count):
        vocab, k = int(rng.integers(2, 17)), int(rng.choice([1, 2, 3, 4, 5, 8]))
        p = np.round(rng.normal(0.0, 2.0, size=(k + 1, vocab)) * 4) / 4
        drafts = [int(np.argmax(p[i])) if rng.random() < 0.8 else int(rng.integers(vocab)) for i in range(k)]
        items.append(({"p": rows_json(p), "drafts": drafts}, ["random"]))
    tied = [[1.0, 3.0, 3.0, 2.0], [0.5, 0.5, 0.5, 0.5]]
    items.append(({"p": tied, "drafts": [2]}, ["ties", "repair"]))  # the tie goes to id 1
    items.append(({"p": tied, "drafts": [1]}, ["ties", "bonus"]))  # all-equal row: id 0
    items.append(
        ({"p": [[0.0, 1.0, 2.0, 5.0], [-3.0, -2.0, -1.0, -0.5]], "drafts": [3]}, ["last_vocab_id", "negative_logits"])
    )
    items.append(({"p": [[0.1, 0.2, 0.7], [0.2, 0.3, 0.5]], "drafts": [0]}, ["k1", "repair", "last_vocab_id"]))
    p8 = np.round(rng.normal(0.0, 2.0, size=(9, 6)) * 4) / 4
    best = [int(np.argmax(r)) for r in p8]
    items.append(({"p": rows_json(p8), "drafts": best[:8]}, ["k8", "bonus"]))
    items.append(({"p": rows_json(p8), "drafts": best[:7] + [(best[7] + 1) % 6]}, ["k8", "repair_at_last"]))
    items.append(({"p": [[2.0, 2.0], [1.0, 2.0]], "drafts": [1]}, ["ties", "repair"]))
    items.append(({"p": [[0.5, 0.5, 0.0], [0.1, 0.2, 0.7]], "drafts": [3]}, ["invalid", "draft_id_equals_vocab"]))
    items.append(({"p": [[0.5, 0.5, 0.0]], "drafts": [0]}, ["invalid", "k_rows_of_p_not_k_plus_1"]))
    return items
