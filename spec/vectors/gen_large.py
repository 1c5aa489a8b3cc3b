"""Sampled-verification vectors beyond V = 8 (kind ``sampled_large``): V = 9 .. 262,144, in a
compact run-length encoding, replayed as ordinary ``sampled`` cases.

THE ENCODING. A row of V probabilities is a list of runs ``[count, numerator]``: ``count``
consecutive ids, in id order, each with probability ``numerator * 2^-scale_log2``; the counts sum
to V. Input of a case::

    {"V": 262144, "scale_log2": 48, "p_runs": [[[count, numerator], ...], ...]  (k + 1 rows),
     "q_runs": [...] (k rows), "drafts": [...], "uniforms": [...]}

Every numerator is an integer < 2^53 and every row's numerators sum to exactly 2^scale_log2.
With scale_log2 = 48 (every case but one) every row
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
below float32's resolution next to a running sum near 1), ``deep_rejection`` (k = 5, rejected at
position 4), ``wide_residual`` (~2,000 residual entries of seven sizes), ``division_differs`` (u
where u * q < p and u < p/q disagree), ``inexact_running_sum`` (scale_log2 = 60: a 2^-60 grid whose
running sum rounds; a uniform where the running sum's total and a pairwise total disagree).

Independent oracle by design: the cases are built in exact integers (running sums of numerators,
the residual ``max(p - q, 0)`` on integer rows), never with the reference's float draw or residual,
so the boundaries they aim at are the protocol's, not the reference's reading of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.spec.vectors.draws import Item
from verispec.spec.vectors.wire import Json

SCALE_LOG2 = 48
ONE = 1 << SCALE_LOG2
Runs = list[list[int]]
# (V, k) of the large cases; sizes kept so the files stay small and the replay cheap
PLAN: tuple[tuple[int, int], ...] = (
    (9, 1),
    (9, 8),
    (17, 4),
    (257, 2),
    (257, 8),
    (4099, 3),
    (4099, 8),
    (32000, 4),
    (49152, 2),
    (131072, 2),
    (262144, 1),
    (262144, 2),
)


def expand_runs(runs: Sequence[Sequence[int]], vocab: int, scale_log2: int) -> list[float]:
    """One encoded row -> V floats (exact: numerators < 2^53)."""
    if sum(int(c) for c, _ in runs) != vocab:
        raise ValueError(f"runs cover {sum(int(c) for c, _ in runs)} ids, not V = {vocab}")
    out = np.repeat(np.asarray([float(n) for _, n in runs]), [int(c) for c, _ in runs]) * 2.0**-scale_log2
    values: list[float] = out.tolist()
    return values


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
    others = (int(i) for i in np.argsort(-row, kind="stable") if int(i) != where and int(i) not in keep)
    for i in itertools.chain([where], others):  # lazily: a few entries absorb any deficit
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
    rng: np.random.Generator,
    p: npt.NDArray[np.int64],
    q: npt.NDArray[np.int64],
    drafts: Sequence[int],
    uniforms: Sequence[int],
    tags: set[str],
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


def _encode(
    p: npt.NDArray[np.int64],
    q: npt.NDArray[np.int64],
    drafts: Sequence[int],
    uniforms: Sequence[float],
    scale: int = SCALE_LOG2,
) -> Json:
    return {
        "V": int(p.shape[1]),
        "scale_log2": scale,
        "p_runs": [_runs(r) for r in p],
        "q_runs": [_runs(r) for r in q],
        "drafts": [int(x) for x in drafts],
        "uniforms": [float(u) for u in uniforms],
    }


def _depth_five(rng: np.random.Generator) -> Item:
    """k = 5, every p(x)/q(x) = 1/2: u_0..u_3 = 0 accept, u_4 = 3/4 rejects (a loop that reuses
    u_3 for positions >= 4 accepts it)."""
    vocab, k = 257, 5
    q = np.stack([_llm_row(rng, vocab, 1 << 20) for _ in range(k)])
    p = np.stack([_llm_row(rng, vocab, 1 << 20) for _ in range(k + 1)])
    drafts = []
    for i in range(k):
        x = int(np.argmax(q[i]))
        p[i, x] = q[i, x] // 2 - (q[i, x] // 2) % 2
        q[i, x] = 2 * p[i, x]
        _fix_total(p[i], int(np.argsort(-p[i])[1]), keep=(x,))
        _fix_total(q[i], int(np.argsort(-q[i])[1]), keep=(x,))
        drafts.append(x)
    return _encode(p, q, drafts, [0.0, 0.0, 0.0, 0.0, 0.75, 0.5]), ["V=257", "k=5", "deep_rejection"]


def _wide_residual(rng: np.random.Generator) -> Item:
    """V = 4,099, k = 1: the draft is rejected and the residual is ~2,000 tiny entries of seven
    sizes (a repair draw that keeps only the largest 1,024 entries lands elsewhere)."""
    vocab = 4099
    q = _llm_row(rng, vocab, 1 << 33)[None]
    p = q.copy()
    tail = np.flatnonzero(q[0] < (ONE >> 12))[:2000]
    p[0, tail] += (1 + np.arange(tail.shape[0]) % 7) << 10
    x = int(np.argmax(p[0]))
    _fix_total(p[0], x)
    residual = np.maximum(p[0] - q[0], 0).astype(np.float64)
    kept = np.where(residual >= -np.sort(-residual)[1023], residual, 0.0)  # the largest 1,024 (ties kept)
    grid = np.arange(1, 64) / 64.0  # 6-bit uniforms: the first where the two draws differ
    full, top = np.cumsum(residual), np.cumsum(kept)
    u = float(
        grid[
            np.flatnonzero(
                np.searchsorted(full, grid * full[-1], side="right")
                != np.searchsorted(top, grid * top[-1], side="right")
            )[0]
        ]
    )
    bonus = _llm_row(rng, vocab, 1 << 33)[None]
    return _encode(np.concatenate([p, bonus]), q, [x], [(ONE - 1) * 2.0**-SCALE_LOG2, u]), [
        "V=4099",
        "k=1",
        "residual_tail",
        "wide_residual",
    ]


def _division_boundary(rng: np.random.Generator) -> Item:
    """u right at the acceptance boundary where u * q(x) < p(x) and u < p(x)/q(x) disagree in
    float64 (the ratio rounds up past u, the product does not reach below p)."""
    vocab = 17
    while True:
        q = _llm_row(rng, vocab, 1 << 36)[None]
        p = _llm_row(rng, vocab, 1 << 36)[None]
        x = int(np.argmax(q[0]))
        px, qx = float(p[0, x]) * 2.0**-SCALE_LOG2, float(q[0, x]) * 2.0**-SCALE_LOG2
        if px >= qx:
            continue
        ratio = px / qx
        for u in (float(np.nextafter(ratio, 0.0)), ratio, float(np.nextafter(ratio, 1.0))):
            if (u * qx < px) != (u < ratio):
                bonus = _llm_row(rng, vocab, 1 << 36)[None]
                return _encode(np.concatenate([p, bonus]), q, [x], [u, 0.5]), [
                    "V=17",
                    "k=1",
                    "accept_boundary",
                    "division_differs",
                ]


def _pairwise_total(rng: np.random.Generator) -> Item:
    """V = 4,099 bonus row on a 2^-60 grid (its running sum rounds, unlike the 2^-48 rows): a final
    uniform where the running sum's total and np.sum's pairwise total pick different ids."""
    vocab, scale = 4099, 60
    one = 1 << scale
    while True:
        # 65 blocks of equal entries (so the runs stay few), 47-bit numerators on the 2^-60 grid
        row = np.repeat(rng.integers(1 << 47, 3 << 47, size=65), 64)[:vocab].astype(np.int64)
        row[-1] += one - int(row.sum())
        if int(row.min()) <= 0:
            continue
        w = row.astype(np.float64) * 2.0**-scale
        c = np.cumsum(w)
        total_seq, total_pair = float(c[-1]), float(w.sum())
        if total_seq == total_pair:
            continue
        for t in rng.permutation(vocab - 1)[:200]:
            u = float(c[t]) / total_seq
            for cand in (float(np.nextafter(u, 0.0)), u, float(np.nextafter(u, 1.0))):
                a = int(np.searchsorted(c, cand * total_seq, side="right"))
                b = int(np.searchsorted(c, cand * total_pair, side="right"))
                if a != b and cand < 1.0:
                    q = np.zeros((1, vocab), dtype=np.int64)
                    q[0, :] = row  # p_0 == q_0: the draft is accepted, the bonus row draws
                    p = np.stack([row, row])
                    return _encode(p, q, [int(np.argmax(row))], [0.0, cand], scale), [
                        "V=4099",
                        "k=1",
                        "cdf_boundary",
                        "inexact_running_sum",
                    ]


def large_items(rng: np.random.Generator, count: int) -> list[Item]:
    """The ``sampled_large`` cases: the plan's (V, k) pairs and four targeted edges (``count``
    does not scale them: each large case costs O(V) to replay)."""
    del count
    items = [_case(rng, vocab, k, variant) for variant, (vocab, k) in enumerate(PLAN)]
    return items + [_depth_five(rng), _wide_residual(rng), _division_boundary(rng), _pairwise_total(rng)]
