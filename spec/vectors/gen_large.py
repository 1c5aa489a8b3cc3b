"""Sampled-verification vectors beyond V = 8 (kind ``sampled_large``): V = 9 .. 262,144, in a
compact run-length encoding, replayed as ordinary ``sampled`` cases.

THE ENCODING. A row of V probabilities is a list of runs ``[count, numerator]``: ``count``
consecutive ids, in id order, each with probability ``numerator * 2^-scale_log2``; the counts sum
to V. Input of a case::

    {"V": 262144, "scale_log2": 48, "p_runs": [[[count, numerator], ...], ...]  (k + 1 rows),
     "q_runs": [...] (k rows), "drafts": [...], "uniforms": [...]}

Every numerator is an integer < 2^48 and every row's numerators sum to exactly 2^48, so every row
sums to exactly 1 and every running sum is a multiple of 2^-48 below 1: exact in float64. Uniforms
are multiples of 2^-48 (most with few bits). So every float64 step of the protocol (the running
sum, u * total with total = 1, u * q(x) < p(x) with u of at most 5 bits against 48-bit q) is
exact: the expected verdict is the protocol's in exact arithmetic, boundaries included, and any
conforming implementation reproduces it bit for bit, while a float32 running sum (24 bits), a
reversed or blocked scan that meets a boundary differently, or a draw that never reaches the last
id does not. ``expand`` turns a case into the ``sampled`` input (full rows); ``verispec check``
replays it that way, so an implementation needs no decoder (a reader of the files needs one).

Edge cases (tags): ``tail_draft`` (q(x) < 1e-3, p/q > 1), ``residual_tail`` (residual mass mostly
in entries < 1e-3), ``last_id`` (the last id carries mass and is hit by the final uniform),
``argmax_tie``, ``p_equals_q``, ``k=1`` .. ``k=8``, ``accept_boundary`` (u * q(x) == p(x)),
``cdf_boundary`` (u * total == a running sum), ``float32_sensitive`` (tail entries of 2^-40:
below float32's resolution next to a running sum near 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from spec.vectors.draws import Item
from spec.vectors.wire import Json

SCALE_LOG2 = 48
ONE = 1 << SCALE_LOG2
Runs = list[list[int]]
# (V, k) of the large cases; sizes kept so the files stay small and the replay cheap
PLAN: tuple[tuple[int, int], ...] = (
    (9, 1), (9, 8), (17, 4), (257, 2), (257, 8), (4099, 3), (4099, 8),
    (32000, 4), (49152, 2), (131072, 2), (262144, 1), (262144, 2),
)


def expand_runs(runs: Sequence[Sequence[int]], vocab: int, scale_log2: int) -> list[float]:
    """One encoded row -> V floats (exact: numerators < 2^53)."""
    if sum(int(c) for c, _ in runs) != vocab:
        raise ValueError(f"runs cover {sum(int(c) for c, _ in runs)} ids, not V = {vocab}")
    out = np.repeat(np.asarray([float(n) for _, n in runs]), [int(c) for c, _ in runs]) * 2.0**-scale_log2
    return [float(v) for v in out]


def expand(inp: Mapping[str, Any]) -> Json:
    """A ``sampled_large`` input -> the ``sampled`` input it stands for."""
    vocab, scale = int(inp["V"]), int(inp["scale_log2"])
    return {
        "p": [expand_runs(r, vocab, scale) for r in inp["p_runs"]],
        "q": [expand_runs(r, vocab, scale) for r in inp["q_runs"]],
        "drafts": list(inp["drafts"]),
        "uniforms": list(inp["uniforms"]),
    }


def as_sampled_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case as an ordinary ``sampled`` case (what an implementation is asked)."""
    if case["op"] != "sampled_large":
        return dict(case)
    return {**case, "op": "sampled", "input": expand(case["input"])}


# -----------------------------------------------------------------------------------------------
# rows as integer numerators (sum exactly 2^48), then runs


def _runs(numerators: npt.NDArray[np.int64]) -> Runs:
    """Run-length encoding of a numerator row."""
    change = np.flatnonzero(np.diff(numerators)) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [numerators.shape[0]]])
    return [[int(e - s), int(numerators[s])] for s, e in zip(starts, ends)]


def _fix_total(row: npt.NDArray[np.int64], where: int, keep: Sequence[int] = ()) -> npt.NDArray[np.int64]:
    """Make the numerators sum to 2^48: a surplus goes to ``where``; a deficit is taken from
    ``where`` and then from the largest other entries not in ``keep`` (each kept >= 1)."""
    excess = int(row.sum()) - ONE
    if excess <= 0:
        row[where] -= excess
        return row
    order = [where] + [int(i) for i in np.argsort(-row, kind="stable") if int(i) != where and int(i) not in keep]
    for i in order:
        take = min(excess, int(row[i]) - 1)
        if take > 0:
            row[i] -= take
            excess -= take
        if excess == 0:
            break
    assert int(row.sum()) == ONE and np.all(row >= 0)
    return row


def _llm_row(rng: np.random.Generator, vocab: int, tail_unit: int) -> npt.NDArray[np.int64]:
    """A heavy-tailed row: ~20 head ids with explicit masses, the rest in a few constant blocks
    of ``tail_unit`` (runs keep it compact); the last id gets mass on request by the caller."""
    row = np.zeros(vocab, dtype=np.int64)
    blocks = min(4, max(1, vocab // 8))
    bounds = np.linspace(0, vocab, blocks + 1).astype(np.int64)
    for b in range(blocks):  # tail blocks of 1x, 2x, 3x ... tail_unit: stepwise heavy tail
        row[bounds[b] : bounds[b + 1]] = tail_unit * (1 + (b % 3))
    head = rng.choice(vocab, size=min(vocab, 20), replace=False)
    free = ONE - int(row.sum())
    assert free > ONE // 2, "tail too heavy for the head"
    shares = rng.dirichlet(np.full(head.shape[0], 0.5))
    row[head] += np.floor(shares * free * 0.999).astype(np.int64)
    return _fix_total(row, int(head[0]))


def _case(rng: np.random.Generator, vocab: int, k: int, variant: int) -> Item:
    """One large case: LLM-like rows, one edge per position, uniforms on boundaries."""
    tags = {f"V={vocab}", f"k={k}"}
    tail_unit = max(1, (ONE // 4) // vocab) if variant % 2 == 0 else 1 << 8  # 2^-40: float32_sensitive
    if tail_unit == 1 << 8:
        tags.add("float32_sensitive")
    p = np.stack([_llm_row(rng, vocab, tail_unit) for _ in range(k + 1)])
    q = np.stack([_llm_row(rng, vocab, tail_unit) for _ in range(k)])
    drafts: list[int] = []
    uniforms: list[int] = []  # numerators over 2^48
    for i in range(k):
        edge = ("tail_draft", "residual_tail", "last_id", "argmax_tie", "p_equals_q")[(i + variant) % 5]
        x = _edit(rng, p[i], q[i], edge)
        tags.add(edge)
        drafts.append(x)
        # acceptance uniform: on the boundary u * q(x) == p(x) when p/q is a 4-bit dyadic, else a
        # 4-bit uniform (exact products either way)
        ratio_bits = (int(p[i, x]) << 4) // int(q[i, x]) if p[i, x] < q[i, x] else 16
        if edge == "residual_tail":  # p(x)/q(x) = 1 - O(1e-6): only the top uniform rejects
            uniforms.append(ONE - 1)
        elif ratio_bits < 16 and (int(p[i, x]) << 4) == ratio_bits * int(q[i, x]) and rng.random() < 0.5:
            uniforms.append(ratio_bits << (SCALE_LOG2 - 4))
            tags.add("accept_boundary")
        else:
            uniforms.append(int(rng.integers(0, 16)) << (SCALE_LOG2 - 4))
    uniforms.append(_final_uniform(rng, p, q, drafts, uniforms, tags))
    inp: Json = {
        "V": vocab,
        "scale_log2": SCALE_LOG2,
        "p_runs": [_runs(r) for r in p],
        "q_runs": [_runs(r) for r in q],
        "drafts": drafts,
        "uniforms": [u * 2.0**-SCALE_LOG2 for u in uniforms],
    }
    return inp, sorted(tags)


def _edit(rng: np.random.Generator, p: npt.NDArray[np.int64], q: npt.NDArray[np.int64], edge: str) -> int:
    """Put one edge into (p_i, q_i) (sums kept at 2^48); return the drafted id."""
    vocab = p.shape[0]
    top = int(np.argmax(p))
    if edge == "tail_draft":  # q(x) ~ 2^-13 < 1e-3, p(x) = 3 q(x)
        x = int(rng.integers(vocab - 1))
        x = x if x != top else (x + 1) % (vocab - 1)
        q[x], p[x] = 1 << 35, 3 << 35
        _fix_total(q, int(np.argmax(q)), keep=(x,))
        _fix_total(p, top, keep=(x,))
        return x
    if edge == "residual_tail":  # p = q + 2^-38 on every tail id, paid by the argmax (drafted)
        tail = np.flatnonzero(q < (ONE >> 12))
        p[:] = q
        p[tail] += 1 << 10
        x = int(np.argmax(p))
        _fix_total(p, x)
        return x
    if edge == "last_id":  # last id: p = 1/4, q = 1/8, drafted
        last = vocab - 1
        q[last], p[last] = ONE >> 3, ONE >> 2
        _fix_total(q, int(np.argmax(q[:-1])), keep=(last,))
        _fix_total(p, int(np.argmax(p[:-1])), keep=(last,))
        assert q[last] == ONE >> 3 and p[last] == ONE >> 2
        return int(last)
    if edge == "argmax_tie":  # the two largest target numerators equal (an odd unit to a tail id)
        first, second = (int(v) for v in np.argsort(-p, kind="stable")[:2])
        both = int(p[first] + p[second])
        p[first] = p[second] = both // 2
        if vocab > 2:
            _fix_total(p, int(np.argsort(-p, kind="stable")[2]))
        else:
            p[first] += both % 2
        return int(np.argmax(q))
    p[:] = q  # p_equals_q: no rejection possible
    return int(np.argmax(q))


def _final_uniform(
    rng: np.random.Generator, p: npt.NDArray[np.int64], q: npt.NDArray[np.int64], drafts: Sequence[int], uniforms: Sequence[int], tags: set[str]
) -> int:
    """The final uniform: on a running-sum boundary (``cdf_boundary``) of the row the protocol
    draws from, often the last id's lower boundary; else a random 48-bit uniform."""
    k = len(drafts)
    row = p[k]
    for i, x in enumerate(drafts):  # exact: u * q(x) < p(x) in integers
        if not uniforms[i] * int(q[i, x]) < int(p[i, x]) << SCALE_LOG2:
            residual = np.maximum(p[i] - q[i], 0)
            row = residual if residual.any() else p[i]
            break
    total = int(row.sum())
    if total != ONE:  # a residual: the protocol's u * total is then inexact for most u
        return int(rng.integers(0, ONE))
    cumsum = np.cumsum(row)
    choice = rng.random()
    if choice < 0.4 and row[-1] > 0:
        tags |= {"cdf_boundary", "last_id"}
        return int(cumsum[-2])  # exactly the last id's lower boundary: must draw V - 1
    if choice < 0.8:
        tags.add("cdf_boundary")
        return int(cumsum[int(rng.integers(0, row.shape[0] - 1))])
    return int(rng.integers(0, ONE))


def large_items(rng: np.random.Generator, count: int) -> list[Item]:
    """The ``sampled_large`` cases: the plan's (V, k) pairs (``count`` does not scale them: each
    large case costs O(V) to replay)."""
    del count
    return [_case(rng, vocab, k, variant) for variant, (vocab, k) in enumerate(PLAN)]
