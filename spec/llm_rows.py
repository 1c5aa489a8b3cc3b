"""LLM-shaped rows for the gate: vocabularies of 9 to 262,144 ids, heavy tails, edge structure.

Toy rows (V <= 8, probabilities on a 2^-6 grid) cannot reach the bugs that fire only at LLM
scale. This module makes speculative-verification cases that look like real decoding steps:

- target logits with a heavy (Zipf-like) tail: logit(id) = -a * log(1 + rank(id)) + noise, ids
  shuffled, a in [0.8, 1.6]; the target law is THE law of :func:`reference.sampling.target_distribution`
  at a temperature in 0.3 .. 1.5 and, on some rows, top-k / top-p / min-p truncation (exact zeros);
- drafts near the target (logit noise 0.3), far from it (noise 2.5), or one-hot (a greedy draft);
- then one SHAPE per position, the edge the position exercises (``SHAPES``):
  ``tail_draft``  the drafted id has q(x) < 1e-3 and p(x)/q(x) > 1;
  ``residual_tail`` the residual (p - q)^+ has most of its mass in entries below 1e-3;
  ``mostly_equal``  p == q on all but a few ids;
  ``argmax_tie``    the two largest target probabilities are equal;
  ``last_id``       the last id V - 1 carries target mass (and residual mass), and is the draft;
  ``plain``         the row as generated.

Every case is deterministic in (seed, V, k, index). Rows are float64, non-negative, sum to 1 within
a few V ulps (one division normalizes them; the contract allows 1e-6), and every drafted id has
q > 0. Real rows from the two real
models are in :mod:`spec.real_rows`; :func:`real_cases` turns them into cases.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, inverse_cdf, target_distribution

Rows = npt.NDArray[np.float64]

VOCABS: tuple[int, ...] = (9, 17, 257, 4099, 32000, 49152, 131072, 262144)
SHAPES: tuple[str, ...] = ("tail_draft", "residual_tail", "mostly_equal", "argmax_tie", "last_id", "plain")
DRAFT_KINDS: tuple[str, ...] = ("near", "far", "one_hot")
TAIL = 1e-3  # "tail" means probability below this


@dataclass(frozen=True)
class LlmCase:
    """One verification: p [k+1, V], q [k, V], drafts [k] (q > 0), and what it exercises."""

    name: str
    p: Rows
    q: Rows
    drafts: tuple[int, ...]
    tags: tuple[str, ...]

    @property
    def vocab(self) -> int:
        return int(self.p.shape[1])

    @property
    def k(self) -> int:
        return int(self.q.shape[0])


def case_rng(seed: int, *key: object) -> np.random.Generator:
    """A generator fixed by the seed and a key (the same case on every machine)."""
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


# -----------------------------------------------------------------------------------------------
# logits and laws


def heavy_logits(rng: np.random.Generator, vocab: int) -> Rows:
    """Zipf-like logits [V]: -a log(1 + rank) + N(0, 0.5), ranks shuffled over the ids."""
    slope = float(rng.uniform(0.8, 1.6))
    ranks = rng.permutation(vocab)
    return np.asarray(-slope * np.log1p(ranks) + rng.normal(0.0, 0.5, vocab), dtype=np.float64)


def random_params(rng: np.random.Generator, vocab: int, *, truncate: bool) -> SamplingParams:
    """Temperature in 0.3 .. 1.5; with ``truncate``, one of top-k / top-p / min-p (exact zeros)."""
    temperature = float(rng.uniform(0.3, 1.5))
    if not truncate:
        return SamplingParams(temperature=temperature)
    which = int(rng.integers(3))
    if which == 0:
        return SamplingParams(temperature=temperature, top_k=int(rng.integers(2, max(3, min(vocab, 200)))))
    if which == 1:
        return SamplingParams(temperature=temperature, top_p=float(rng.uniform(0.8, 0.99)))
    return SamplingParams(temperature=temperature, min_p=float(rng.uniform(1e-4, 0.05)))


def law(logits: Rows, params: SamplingParams) -> Rows:
    """The target law of one logits row (the reference's processors)."""
    return np.asarray(target_distribution(logits, [], params), dtype=np.float64)


def normalized(row: Rows) -> Rows:
    return np.asarray(row / row.sum(), dtype=np.float64)


# -----------------------------------------------------------------------------------------------
# shapes: edits of one (p_i, q_i) pair that put an edge case in it; each returns the draft id


def _tail_draft(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    """Draft x with q(x) = 2e-4 and p(x) = 6e-4 (q < 1e-3, p/q = 3)."""
    x = int(rng.integers(p.shape[0]))
    _set_mass(p, x, 6e-4)
    _set_mass(q, x, 2e-4)
    return x


def _residual_tail(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    """p = 0.9 q + 0.1 u, u flat over up to 2,000 ids: residual entries <= 0.1 / 2000 = 5e-5
    (when V allows; at tiny V the residual entries are as small as V permits)."""
    vocab = p.shape[0]
    spread = rng.permutation(vocab)[: min(vocab, 2000)]
    flat = np.zeros(vocab)
    flat[spread] = 1.0 / spread.shape[0]
    p[:] = normalized(0.9 * q + 0.1 * flat)
    return _draw(rng, q)


def _mostly_equal(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    """p := q, then move half the mass of one id to another (p == q elsewhere)."""
    p[:] = q
    a, b = (int(v) for v in rng.choice(p.shape[0], size=2, replace=False)) if p.shape[0] >= 2 else (0, 0)
    moved = p[a] / 2
    p[a] -= moved
    p[b] += moved
    return _draw(rng, q)


def _argmax_tie(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    """The two largest target entries made exactly equal (mass preserved)."""
    if p.shape[0] >= 2:
        top2 = np.argsort(-p, kind="stable")[:2]
        if p[top2[1]] == 0:  # a one-hot row: give the runner-up mass from the top
            p[top2[1]] = p[top2[0]] = p[top2[0]] / 2
        else:
            p[top2] = (p[top2[0]] + p[top2[1]]) / 2
    return _draw(rng, q)


def _last_id(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    """The last id gets target mass 0.2 and draft mass 0.1, and is the drafted id."""
    last = p.shape[0] - 1
    _set_mass(p, last, 0.2)
    _set_mass(q, last, 0.1)
    return int(last)


def _plain(rng: np.random.Generator, p: Rows, q: Rows) -> int:
    return _draw(rng, q)


SHAPE_EDITS = {
    "tail_draft": _tail_draft,
    "residual_tail": _residual_tail,
    "mostly_equal": _mostly_equal,
    "argmax_tie": _argmax_tie,
    "last_id": _last_id,
    "plain": _plain,
}


def _set_mass(row: Rows, token: int, mass: float) -> None:
    """Give ``token`` exactly-ish ``mass``; scale the other ids to keep the total 1."""
    others = row.sum() - row[token]
    if others <= 0:  # a one-hot row at ``token``: spread the rest over the next id
        row[(token + 1) % row.shape[0]] = 1.0
        others = 1.0
    row *= (1.0 - mass) / others
    row[token] = mass


def _draw(rng: np.random.Generator, row: Rows) -> int:
    """A draft id drawn from ``row`` (so it has q > 0)."""
    return inverse_cdf(row, float(rng.random()))


# -----------------------------------------------------------------------------------------------
# cases


def llm_case(
    seed: int, vocab: int, k: int, index: int, shapes: Sequence[str] | None = None, draft_kind: str | None = None
) -> LlmCase:
    """One deterministic case: per position a heavy-tailed target, a draft, and a shape."""
    rng = case_rng(seed, vocab, k, index)
    kind = draft_kind or DRAFT_KINDS[index % len(DRAFT_KINDS)]
    truncate = index % 2 == 1
    p = np.zeros((k + 1, vocab))
    q = np.zeros((k, vocab))
    drafts: list[int] = []
    tags = {f"V={vocab}", f"k={k}", f"draft_{kind}"}
    for i in range(k + 1):
        logits = heavy_logits(rng, vocab)
        params = random_params(rng, vocab, truncate=truncate)
        p[i] = law(logits, params)
        if truncate and params != SamplingParams(temperature=params.temperature):
            tags.add("truncated")
        if i == k:
            break
        noise = {"near": 0.3, "far": 2.5, "one_hot": 0.3}[kind]
        draft_logits = logits + rng.normal(0.0, noise, vocab)
        draft_params = SamplingParams(temperature=0.0) if kind == "one_hot" else params
        q[i] = law(draft_logits, draft_params)
        shape = shapes[i % len(shapes)] if shapes else SHAPES[(index + i) % len(SHAPES)]
        if kind == "one_hot" and shape in ("tail_draft", "last_id", "residual_tail"):
            shape = "plain"  # a one-hot draft has no tail; its draft is its argmax
        drafts.append(SHAPE_EDITS[shape](rng, p[i], q[i]))
        tags.add(shape)
    if p[k, vocab - 1] == 0 and "last_id" in tags:
        _set_mass(p[k], vocab - 1, 0.2)  # the bonus row too
    return LlmCase(f"llm V={vocab} k={k} #{index} {kind}", p, q, tuple(drafts), tuple(sorted(tags)))


# (V, k, how many cases): the default set for the exact checks; large V get few cases (each
# probe costs O(V) through a NumPy verifier; see spec/full_vocab.py for the cost model)
DEFAULT_PLAN: tuple[tuple[int, int, int], ...] = (
    (9, 1, 6),
    (9, 4, 6),
    (9, 8, 6),
    (17, 2, 6),
    (17, 8, 6),
    (257, 4, 6),
    (257, 8, 6),
    (4099, 2, 4),
    (4099, 8, 4),
    (32000, 8, 1),
    (49152, 4, 1),
    (131072, 2, 1),
    (262144, 2, 1),
)


@lru_cache(maxsize=2)
def default_cases(seed: int = 20_261_130) -> tuple[LlmCase, ...]:
    """The exact checks' synthetic cases (every V of ``VOCABS``, k up to 8, every shape); rows
    are read-only (built once per seed, shared by every verifier under test)."""
    return tuple(_frozen(llm_case(seed, vocab, k, index)) for vocab, k, count in DEFAULT_PLAN for index in range(count))


# real pair i is verified at REAL_PARAMS[i % 3]: several temperatures, with and without truncation
REAL_PARAMS = (
    SamplingParams(temperature=0.7, top_p=0.95),
    SamplingParams(temperature=1.2),
    SamplingParams(temperature=0.9, min_p=0.02),
)


@lru_cache(maxsize=2)
def real_cases(seed: int = 20_261_130) -> tuple[LlmCase, ...]:
    """Cases from the stored real-model rows (:mod:`spec.real_rows`): drafts drawn from the
    draft's law (the exit head's row at the same params), read-only rows."""
    from verispec.spec.real_rows import load_pairs

    cases = []
    for index, pair in enumerate(load_pairs()):
        params = REAL_PARAMS[index % len(REAL_PARAMS)]
        rng = case_rng(seed, "real", index)
        p = np.stack([law(row, params) for row in pair.target_logits])
        q = np.stack([law(row, params) for row in pair.draft_logits])
        drafts = tuple(_draw(rng, row) for row in q)
        vocab, k = p.shape[1], q.shape[0]
        tags = ("real", f"V={vocab}", f"k={k}", f"T={params.temperature}") + (
            ("truncated",) if params.top_p < 1 or params.min_p > 0 else ()
        )
        cases.append(_frozen(LlmCase(f"real {pair.name} T={params.temperature}", p, q, drafts, tags)))
    return tuple(cases)


def _frozen(case: LlmCase) -> LlmCase:
    case.p.setflags(write=False)
    case.q.setflags(write=False)
    return case
