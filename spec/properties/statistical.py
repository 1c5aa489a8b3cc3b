"""The statistical properties: chi-square tests of the verifier's real draws against exact laws
(the verdict law of fixed rows, the first tokens of Markov toys), each as a design."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.speculative import BatchVerifier, Probs2D
from verispec.spec import exact
from verispec.spec.properties.cases import draw_drafts, draw_from_rows
from verispec.spec.sequential import StatDesign
from verispec.spec.statistics import (
    ALPHA_BUDGET,
    TV_BIAS,
    chi_square,
    counts_of,
    law_to_vector,
    power_of,
    required_sample_size,
)
from verispec.spec.subject import Property, PropertyResult, Subject


@dataclass(frozen=True)
class StatOutcome:
    counts: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]
    n: int


def _stat_result(name: str, outcome: StatOutcome, df_design: int, extra: str = "") -> PropertyResult:
    alpha = ALPHA_BUDGET[name]
    test = chi_square(outcome.counts, outcome.probs)
    power = power_of(outcome.n, df_design, alpha)
    passed = test.passed(alpha)
    detail = (
        f"chi2={test.statistic:.1f} df={test.df} p={test.p_value:.3g} impossible={test.impossible} "
        f"pooled={test.pooled_cells} max|freq-prob|={test.max_abs_error:.2g}{extra}"
    )
    return PropertyResult(name, passed, outcome.n, alpha, power, detail)


def _sample_size(subject: Subject, name: str, df: int) -> int:
    full = required_sample_size(df, ALPHA_BUDGET[name], TV_BIAS)
    return max(1000, int(math.ceil(full * subject.scale)))


def verdict_law_rows(k: int, vocab: int = 6, seed: int = 7) -> tuple[Probs2D, Probs2D]:
    """Position-dependent rows for the verdict-law tests (dyadic, 2^-10): each q_i mixes p_i
    with another row, so acceptance stays high enough to reach position k; one token of each
    q_i is zero (never drafted, still repaired), and p_i has a zero where q_i does not."""
    rng = np.random.default_rng(seed + k)
    p = np.zeros((k + 1, vocab))
    q = np.zeros((k, vocab))
    for i in range(k + 1):
        p[i] = _quantize(rng.dirichlet(np.full(vocab, 2.0)), 10)
    for i in range(k):
        zero_q, zero_p = (i % vocab), ((i + 2) % vocab)
        other = rng.dirichlet(np.full(vocab, 1.0))
        mix = 0.8 * p[i] + 0.2 * other
        mix[zero_q] = 0.0
        q[i] = _quantize(mix / mix.sum(), 10)
        row = p[i].copy()
        row[zero_p] = 0.0
        p[i] = _quantize(row / row.sum(), 10)
    return p, q


def _quantize(row: npt.NDArray[np.float64], bits: int) -> npt.NDArray[np.float64]:
    """Round a probability row to multiples of 2^-bits summing exactly to 1 (largest remainder)."""
    scaled = row * 2**bits
    counts = np.floor(scaled).astype(np.int64)
    short = 2**bits - int(counts.sum())
    order = np.argsort(-(scaled - counts), kind="stable")
    counts[order[:short]] += 1
    return np.asarray(counts / 2.0**bits, dtype=np.float64)


def verdict_law_design(k: int) -> StatDesign:
    """The verdict law for k drafts on :func:`verdict_law_rows`: cells (accepted, token, is_bonus)."""
    name = f"stat_verdict_law_k{k}"
    p, q = verdict_law_rows(k)
    vocab = p.shape[1]
    law = exact.verdict_law_closed_form(
        [exact.exact_row(r, normalize=False) for r in p], [exact.exact_row(r, normalize=False) for r in q]
    )
    size = 2 * (k + 1) * vocab  # cell = ((accepted * V + token) * 2 + is_bonus)
    index = {
        (a, t, kind): (a * vocab + t) * 2 + (kind == "bonus")
        for a in range(k + 1)
        for t in range(vocab)
        for kind in ("repair", "bonus")
    }
    probs = law_to_vector(law, index, size)

    def draw(batch: BatchVerifier, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        counts = np.zeros(size, dtype=np.int64)
        done = 0
        while done < n:
            chunk = min(200_000, n - done)
            drafts = draw_drafts(rng, q, chunk)
            result = batch(p, q, drafts, rng.random((chunk, k + 1)))
            accepted = np.clip(result.accepted, 0, k)
            token = np.clip(result.token, 0, vocab - 1)
            out_of_range = (result.accepted != accepted) | (result.token != token)
            cells = (accepted * vocab + token) * 2 + result.is_bonus.astype(np.int64)
            cells = np.where(out_of_range, (0 * vocab + 0) * 2 + 1, cells)  # (0, 0, bonus) is impossible for k >= 1
            counts += counts_of(cells, size)
            done += chunk
        return counts

    df = int((probs > 0).sum()) - 1
    return StatDesign(name, probs, df, TV_BIAS, ALPHA_BUDGET[name], draw, f" V={vocab} k={k}")


def _fixed_n(make_design: Callable[[], StatDesign]) -> Property:
    """The fixed-N form of a design: N from the power analysis (times the scale), one look."""

    def prop(subject: Subject) -> PropertyResult:
        design = make_design()
        n = _sample_size(subject, design.name, design.df)
        counts = design.draw(subject.batch, subject.rng(design.name), n)
        return _stat_result(design.name, StatOutcome(counts, design.probs, n), design.df, design.label)

    return prop


def stat_verdict_law(k: int) -> Property:
    prop = _fixed_n(lambda: verdict_law_design(k))
    prop.__name__ = f"stat_verdict_law_k{k}"
    return prop


@dataclass(frozen=True)
class MarkovToy:
    """Rows indexed by (position, last token): target [P, V+1, V], draft [P, V+1, V]."""

    target: Probs2D
    draft: Probs2D

    def model(self, which: Literal["target", "draft"]) -> exact.Model:
        table = self.target if which == "target" else self.draft
        vocab = table.shape[2]

        def row(prefix: exact.Outcome) -> exact.Row:
            last = prefix[-1] if prefix else vocab
            return exact.exact_row(table[min(len(prefix), table.shape[0] - 1), last])

        return row


def markov_toy(seed: int, vocab: int = 4, positions: int = 4, processed: bool = False) -> MarkovToy:
    """Toy autoregressive target and draft (dyadic rows, or processed by target_distribution)."""
    rng = np.random.default_rng(seed)
    shape = (positions, vocab + 1, vocab)
    if processed:
        params = SamplingParams(temperature=0.8, top_k=3, top_p=0.95)
        t_logits = rng.normal(0.0, 1.2, size=shape)
        d_logits = t_logits + rng.normal(0.0, 0.8, size=shape)
        target = np.apply_along_axis(lambda r: target_distribution(r, [], params), 2, t_logits)
        draft = np.apply_along_axis(lambda r: target_distribution(r, [], params), 2, d_logits)
        return MarkovToy(target, draft)
    target = np.apply_along_axis(lambda r: _quantize(r, 10), 2, rng.dirichlet(np.full(vocab, 1.5), size=shape[:2]))
    other = rng.dirichlet(np.full(vocab, 1.0), size=shape[:2])
    draft = np.apply_along_axis(lambda r: _quantize(r / r.sum(), 10), 2, 0.7 * target + 0.3 * other)
    return MarkovToy(target, draft)


def simulate_first_tokens(
    batch: BatchVerifier, toy: MarkovToy, k: int, m: int, n: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Run speculative decoding of n independent sequences until each has m tokens; [n, m]."""
    positions, _, vocab = toy.target.shape
    out = np.full((n, m), -1, dtype=np.int64)
    filled = np.zeros(n, dtype=np.int64)
    while True:
        live = np.flatnonzero(filled < m)
        if live.size == 0:
            return out
        length = filled[live]
        last = np.where(length > 0, out[live, np.maximum(length - 1, 0)], vocab)
        drafts = np.zeros((live.size, k), dtype=np.int64)
        q = np.zeros((live.size, k, vocab))
        p = np.zeros((live.size, k + 1, vocab))
        context = last.copy()
        for i in range(k + 1):
            pos = np.minimum(length + i, positions - 1)
            p[:, i] = toy.target[pos, context]
            if i == k:
                break
            q[:, i] = toy.draft[pos, context]
            drafts[:, i] = draw_from_rows(rng, q[:, i])
            context = drafts[:, i]
        result = batch(p, q, drafts, rng.random((live.size, k + 1)))
        accepted = np.clip(result.accepted, 0, k)
        emitted = np.concatenate([drafts, np.zeros((live.size, 1), dtype=np.int64)], axis=1)
        emitted[np.arange(live.size), accepted] = result.token
        for j in range(k + 1):
            write = (j <= accepted) & (length + j < m)
            rows = live[write]
            out[rows, length[write] + j] = emitted[write, j]
        filled[live] = np.minimum(m, length + accepted + 1)


def lossless_design(k: int, processed: bool = False) -> StatDesign:
    """The law of the first m = 3 emitted tokens of a Markov toy decoded with k drafts."""
    name = f"stat_lossless_processed_k{k}" if processed else f"stat_lossless_ar_k{k}"
    m = 3
    toy = markov_toy(seed=100 + k, processed=processed)
    vocab = toy.target.shape[2]
    law = exact.target_sequence_law(toy.model("target"), m)
    index = {seq: sum(t * vocab ** (m - 1 - j) for j, t in enumerate(seq)) for seq in exact.all_sequences(vocab, m)}
    probs = law_to_vector(law, index, vocab**m)

    def draw(batch: BatchVerifier, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        counts = np.zeros(vocab**m, dtype=np.int64)
        done = 0
        while done < n:
            chunk = min(100_000, n - done)
            seqs = simulate_first_tokens(batch, toy, k, m, chunk, rng)
            seqs = np.clip(seqs, 0, vocab - 1)
            cells = np.sum(seqs * (vocab ** np.arange(m - 1, -1, -1)), axis=1)
            counts += counts_of(cells, vocab**m)
            done += chunk
        return counts

    df = int((probs > 0).sum()) - 1
    return StatDesign(name, probs, df, TV_BIAS, ALPHA_BUDGET[name], draw, f" V={vocab} k={k} m={m}")


def stat_lossless(k: int, processed: bool = False) -> Property:
    prop = _fixed_n(lambda: lossless_design(k, processed))
    prop.__name__ = f"stat_lossless_processed_k{k}" if processed else f"stat_lossless_ar_k{k}"
    return prop
