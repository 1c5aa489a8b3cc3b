"""Lossless speculative verification (model-free), and the random-draw protocol it follows.

A draft proposed tokens x_1..x_k, drawing x_i from the law q_i (the EXACT law it sampled from,
after its own processors). The target scored the same positions in one pass, giving p_0..p_k
(``target_distribution`` of :mod:`reference.sampling`, with the history including x_1..x_i for row
i). Verification accepts a prefix of the drafts and emits one more token, so that the emitted
tokens are distributed exactly as if the target had sampled them one by one.

Indexing in code (0-based): ``q[i]`` is the law of ``drafts[i]``; ``p[i]`` is the target law at
the position of ``drafts[i]``; ``p[k]`` is the target law after all k drafts (the bonus row).

The random-draw protocol (version 1, :data:`PROTOCOL_VERSION`) these functions follow is stated
once, normatively, in spec/protocol.md: its inputs and contract (violations raise
:class:`VerificationError`), the k + 1 uniforms, the acceptance test, the residual, the draw, and
why the emitted tokens have the target's law (z3: ``proofs/lossless.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerificationError
from verispec.reference.sampling import (
    SamplingParams,
    inverse_cdf,
    inverse_cdf_draws,
    inverse_cdf_rows,
    target_distribution,
)
from verispec.reference.seams import BatchVerdict as BatchVerdict  # the verifier seam (reference/seams.py)
from verispec.reference.seams import BatchVerifier as BatchVerifier
from verispec.reference.seams import LawFn as LawFn
from verispec.reference.seams import Verdict as Verdict
from verispec.reference.seams import Verifier as Verifier

PROTOCOL_VERSION = 1

# Rows must sum to 1 within this (float64 pairwise sum). Wide enough for float32-computed
# softmax rows, narrow enough that a forgotten normalization (sums like 0.9) is caught.
PROB_TOLERANCE = 1e-6

Probs2D = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike


# -----------------------------------------------------------------------------------------------
# contract checks


def check_rows(rows: npt.NDArray[Any], name: str) -> None:
    """Rows (any leading shape, last axis V) are finite, non-negative, and sum to 1."""
    sums = None
    if rows.dtype.kind == "f" and rows.size and rows.min() >= 0:  # no NaN, no -inf, no negative entry
        sums = np.asarray(rows.sum(axis=-1), dtype=np.float64)  # finite sums too: no +inf, both checks pass
        if not np.all(np.isfinite(sums)):
            sums = None  # the checks below, in their order, name what is off
    if sums is None:
        if not np.all(np.isfinite(rows)):
            raise VerificationError(f"{name} contains a non-finite value")
        if np.any(rows < 0):
            bad = np.argwhere(rows < 0)[0]
            raise VerificationError(
                f"{name} has a negative probability {rows[tuple(bad)]} at {tuple(int(i) for i in bad)}"
            )
        sums = np.asarray(rows.sum(axis=-1), dtype=np.float64)
    off = np.abs(sums - 1.0) > PROB_TOLERANCE
    if np.any(off):
        where = np.argwhere(off)[0]
        raise VerificationError(
            f"{name} row {tuple(int(i) for i in where)} sums to {float(sums[tuple(where)])!r}, "
            f"not 1 within {PROB_TOLERANCE}"
        )


def as_rows(value: ArrayLike, name: str) -> Probs2D:
    try:
        rows = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise VerificationError(f"{name} is not a numeric array: {exc}") from None
    return rows


def check_sampled_inputs(
    p: ArrayLike, q: ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]
) -> tuple[Probs2D, Probs2D, npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Validate one verification's inputs against the contract; return them as arrays.

    Returns ``(p [k+1, V], q [k, V], drafts [k] int64, uniforms [k+1] float64)``.
    """
    p_rows, q_rows = as_rows(p, "p"), as_rows(q, "q")
    draft_ids, draws = _check_draft_shapes(p_rows, q_rows, drafts, uniforms, batched=False)
    check_rows(p_rows, "p")
    check_rows(q_rows, "q")
    _check_draft_mass(q_rows[None], draft_ids[None])
    return p_rows, q_rows, draft_ids, draws


def check_batch_inputs(
    p: ArrayLike, q: ArrayLike, drafts: ArrayLike, uniforms: ArrayLike
) -> tuple[Probs2D, Probs2D, npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Validate N verifications' inputs against the contract; return them as arrays.

    Returns ``(p [N, k+1, V], q [N, k, V], drafts [N, k] int64, uniforms [N, k+1] float64)``;
    shared rows ([k+1, V], [k, V]) are checked once and returned as broadcast views.
    """
    p_rows, q_rows = as_rows(p, "p"), as_rows(q, "q")
    draft_ids, draws = _check_draft_shapes(p_rows, q_rows, drafts, uniforms, batched=True)
    check_rows(p_rows, "p")
    check_rows(q_rows, "q")
    n, k = draft_ids.shape
    vocab = p_rows.shape[-1]
    p_all = np.broadcast_to(p_rows, (n, k + 1, vocab))  # [N, k+1, V] (a view when shared)
    q_all = np.broadcast_to(q_rows, (n, k, vocab))  # [N, k, V]
    _check_draft_mass(q_all, draft_ids)
    return p_all, q_all, draft_ids, draws


def _check_draft_shapes(
    p: Probs2D, q: Probs2D, drafts: ArrayLike, uniforms: ArrayLike, *, batched: bool
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    lead = 1 if batched else 0
    draft_arr = np.asarray(drafts)
    if draft_arr.ndim != 1 + lead:
        raise VerificationError(f"drafts must be {'[N, k]' if batched else '[k]'}, got shape {draft_arr.shape}")
    if draft_arr.size and not np.issubdtype(draft_arr.dtype, np.integer):
        raise VerificationError(f"draft ids must be integers, got dtype {draft_arr.dtype}")
    k = draft_arr.shape[-1]
    if k < 1:
        raise VerificationError(f"need k >= 1 draft tokens, got k = {k}")
    if p.ndim not in (2, 2 + lead) or q.ndim not in (2, 2 + lead):
        raise VerificationError(f"p and q must be row matrices, got shapes {p.shape} and {q.shape}")
    if p.shape[-2] != k + 1:
        raise VerificationError(f"p must have k + 1 = {k + 1} rows, got {p.shape[-2]}")
    if q.shape[-2] != k:
        raise VerificationError(f"q must have k = {k} rows, got {q.shape[-2]}")
    if p.shape[-1] != q.shape[-1]:
        raise VerificationError(f"vocab sizes disagree: p has {p.shape[-1]}, q has {q.shape[-1]}")
    if p.shape[-1] < 1:
        raise VerificationError("vocab size must be >= 1")
    vocab = p.shape[-1]
    if np.any(draft_arr < 0) or np.any(draft_arr >= vocab):
        bad = draft_arr[(draft_arr < 0) | (draft_arr >= vocab)].flat[0]
        raise VerificationError(f"draft id {int(bad)} is outside the vocabulary [0, {vocab})")
    try:
        draws = np.asarray(uniforms, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise VerificationError(f"uniforms are not numeric: {exc}") from None
    if draws.shape != draft_arr.shape[:-1] + (k + 1,):
        raise VerificationError(f"need k + 1 = {k + 1} uniforms per verification, got shape {draws.shape}")
    if not np.all((draws >= 0.0) & (draws < 1.0)):  # also rejects NaN
        bad_u = draws[~((draws >= 0.0) & (draws < 1.0))].flat[0]
        raise VerificationError(f"uniform {float(bad_u)!r} is outside [0, 1)")
    return draft_arr.astype(np.int64), draws


def _check_draft_mass(q: Probs2D, drafts: npt.NDArray[np.int64]) -> None:
    """q[n, i, drafts[n, i]] > 0 for every item (q is [N or 1, k, V], drafts [N, k])."""
    q_x = np.take_along_axis(np.broadcast_to(q, drafts.shape + q.shape[-1:]), drafts[..., None], axis=-1)[..., 0]
    if np.any(q_x <= 0):
        n, i = (int(v) for v in np.argwhere(q_x <= 0)[0])
        raise VerificationError(
            f"draft token {int(drafts[n, i])} at position {i} has q = 0: the draft cannot have sampled it"
        )


# -----------------------------------------------------------------------------------------------
# the verifiers


def residual_law(p: Probs2D, q: Probs2D) -> Probs2D:
    """THE residual rule: the repair law's weights at a rejected row, ``max(p - q, 0)``, or ``p``
    where that is all zero (spec/protocol.md, "The residual").

    p, q [..., V] (one row or a stack of rows, the rule applies row by row) -> weights [..., V],
    unnormalized: the draw normalizes by its own running total. Every production and spec copy of
    the residual calls this function.
    """
    residual = np.maximum(p - q, 0.0)  # [..., V]
    empty = ~np.any(residual > 0, axis=-1, keepdims=True)  # [..., 1]: no positive residual mass
    return np.where(empty, p, residual)


def verify_sampled(p: ArrayLike, q: ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
    """Sampled verification of k drafts, following the random-draw protocol (spec/protocol.md).

    p [k+1, V] target rows, q [k, V] draft rows (the laws the drafts were drawn from),
    drafts [k], uniforms [k+1] in [0, 1). Raises :class:`VerificationError` on a contract breach.
    """
    p_rows, q_rows, draft_ids, draws = check_sampled_inputs(p, q, drafts, uniforms)
    k = draft_ids.shape[0]
    for i in range(k):
        x = int(draft_ids[i])
        if draws[i] * q_rows[i, x] < p_rows[i, x]:
            continue  # accepted with probability min(1, p/q)
        weights = residual_law(p_rows[i], q_rows[i])
        return Verdict(accepted=i, token=inverse_cdf(weights, float(draws[k])), kind="repair")
    return Verdict(accepted=k, token=inverse_cdf(p_rows[k], float(draws[k])), kind="bonus")


def verify_sampled_rng(p: ArrayLike, q: ArrayLike, drafts: Sequence[int], rng: np.random.Generator) -> Verdict:
    """:func:`verify_sampled` fed by ``rng.random(k + 1)`` (the protocol's uniforms, in order)."""
    return verify_sampled(p, q, drafts, rng.random(len(drafts) + 1).tolist())


def verify_greedy(p: ArrayLike, drafts: Sequence[int]) -> Verdict:
    """Greedy verification: accept while drafts[i] == argmax p[i] (lowest id on ties), emit argmax.

    ``p`` is [k+1, V]: target probability rows or raw logits rows (only the argmax matters).
    Consumes no randomness. Raises :class:`VerificationError` on bad shapes, NaN, or ids.
    """
    rows = as_rows(p, "p")
    draft_arr = np.asarray(drafts)
    if draft_arr.ndim != 1 or draft_arr.shape[0] < 1:
        raise VerificationError(f"need k >= 1 draft tokens as a 1-D sequence, got shape {draft_arr.shape}")
    k = draft_arr.shape[0]
    if rows.ndim != 2 or rows.shape[0] != k + 1 or rows.shape[1] < 1:
        raise VerificationError(f"p must be [k+1 = {k + 1}, V], got shape {rows.shape}")
    if np.any(np.isnan(rows)):
        raise VerificationError("p contains NaN")
    vocab = rows.shape[1]
    for i in range(k):
        x = int(draft_arr[i])
        if not 0 <= x < vocab:
            raise VerificationError(f"draft id {x} is outside the vocabulary [0, {vocab})")
        best = int(np.argmax(rows[i]))  # first maximum: lowest id on ties
        if x != best:
            return Verdict(accepted=i, token=best, kind="repair")
    return Verdict(accepted=k, token=int(np.argmax(rows[k])), kind="bonus")


def verify_sampled_batch(p: ArrayLike, q: ArrayLike, drafts: ArrayLike, uniforms: ArrayLike) -> BatchVerdict:
    """N independent sampled verifications at once, item n identical to :func:`verify_sampled`.

    p [N, k+1, V] or shared [k+1, V]; q [N, k, V] or shared [k, V]; drafts [N, k];
    uniforms [N, k+1]. Shared rows are checked once and never copied N times; the [items, V] work
    of choosing tokens runs in chunks of at most BATCH_ROW_ELEMENTS, so memory stays bounded at
    any N and V (N = 1,000 items at V = 262,144 would be 2 GiB per array in one piece).
    """
    p_all, q_all, draft_ids, draws = check_batch_inputs(p, q, drafts, uniforms)
    n, k = draft_ids.shape
    vocab = p_all.shape[-1]

    p_x = np.take_along_axis(p_all[:, :k, :], draft_ids[..., None], axis=-1)[..., 0]  # [N, k]
    q_x = np.take_along_axis(q_all, draft_ids[..., None], axis=-1)[..., 0]  # [N, k]
    accept = draws[:, :k] * q_x < p_x  # [N, k]
    all_accepted = np.asarray(accept.all(axis=1), dtype=np.bool_)  # [N]
    accepted = np.where(all_accepted, k, np.argmin(accept, axis=1)).astype(np.int64)  # [N]

    token = np.empty(n, dtype=np.int64)
    if p_all.strides[0] == 0 and q_all.strides[0] == 0:  # shared rows (broadcast views)
        # every item that stops at position a draws from the same row: its cumulative sum is
        # computed once per position, not once per item (same numbers as the loop below)
        for a in np.unique(accepted):
            items = np.flatnonzero(accepted == a)
            token[items] = _shared_row_tokens(p_all[0, a], q_all[0, min(int(a), k - 1)], bool(a == k), draws[items, k])
        return BatchVerdict(accepted=accepted, token=token, is_bonus=all_accepted)
    chunk = max(1, BATCH_ROW_ELEMENTS // vocab)  # items per [items, V] work array
    for start in range(0, n, chunk):
        items = np.arange(start, min(start + chunk, n))
        token[items] = _batch_tokens(
            p_all[items, accepted[items]],
            q_all[items, np.minimum(accepted[items], k - 1)],
            all_accepted[items],
            draws[items, k],
        )
    return BatchVerdict(accepted=accepted, token=token, is_bonus=all_accepted)


BATCH_ROW_ELEMENTS = 1 << 23  # items x V per work array of verify_sampled_batch (64 MiB of float64)


def _batch_tokens(
    target_row: Probs2D, draft_row: Probs2D, all_accepted: npt.NDArray[np.bool_], draw: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """The emitted token of each item: target_row [M, V] is p[a] (the bonus row when every draft
    was accepted), draft_row [M, V] q[a] (meaningful only for repairs), draw [M] its last uniform."""
    weights = np.where(all_accepted[:, None], target_row, residual_law(target_row, draft_row))  # [M, V]
    return inverse_cdf_rows(weights, draw)


def _shared_row_tokens(
    target: npt.NDArray[np.float64], draft: npt.NDArray[np.float64], bonus: bool, draws: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """:func:`_batch_tokens` for J items that all draw from one row: target [V] is p[a], draft [V]
    q[a] (meaningful only for a repair), draws [J] their last uniforms; the running sum is
    computed once for the J items."""
    weights = target if bonus else residual_law(target, draft)  # [V]
    return inverse_cdf_draws(weights, draws)


def verify_sampled_batch_rng(p: ArrayLike, q: ArrayLike, drafts: ArrayLike, rng: np.random.Generator) -> BatchVerdict:
    """:func:`verify_sampled_batch` fed by ``rng.random((N, k + 1))`` (same stream as N
    :func:`verify_sampled_rng` calls in a row)."""
    draft_arr = np.asarray(drafts)
    return verify_sampled_batch(p, q, draft_arr, rng.random((draft_arr.shape[0], draft_arr.shape[1] + 1)))


# -----------------------------------------------------------------------------------------------
# from logits to rows: the ONE place where p and q of a speculative step are computed
#
# The decode loop (reference/decode.py) calls :func:`target_rows`, :func:`draft_law_rows`,
# :func:`verification_mode` and :func:`verify_drafts` below; the spec (spec/pipeline.py,
# spec/vectors/, the mutants) checks :func:`speculative_rows` and :func:`verify_step`, which are
# built from the same functions. A bug in any of them is seen by both.


def target_rows(
    target_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    params: SamplingParams,
    law: LawFn = target_distribution,
) -> Probs2D:
    """p [k+1, V]: row i is ``law(target_logits[i], history + drafts[:i], params)``.

    target_logits [k+1, V] are the target's raw logits at the position of each draft and after the
    last one; row i sees the history plus the drafts before its position (accepted if we get
    there). k = 0 gives the one row of a plain step.
    """
    logits = np.asarray(target_logits)
    k = len(drafts)
    if logits.ndim != 2 or logits.shape[0] != k + 1:
        raise VerificationError(f"target logits must be [k+1 = {k + 1}, V], got shape {logits.shape}")
    context = [int(t) for t in history]
    ids = [int(x) for x in drafts]
    return np.stack([law(logits[i], context + ids[:i], params) for i in range(k + 1)])


def draft_rows(
    draft_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    params: SamplingParams,
    law: LawFn = target_distribution,
) -> Probs2D:
    """q [k, V] of a draft that drew drafts[i] from ``law(draft_logits[i], history + drafts[:i],
    params)`` (its own params: a greedy draft has one-hot rows)."""
    logits = np.asarray(draft_logits)
    k = len(drafts)
    if logits.ndim != 2 or logits.shape[0] != k:
        raise VerificationError(f"draft logits must be [k = {k}, V], got shape {logits.shape}")
    context = [int(t) for t in history]
    ids = [int(x) for x in drafts]
    return np.stack([law(logits[i], context + ids[:i], params) for i in range(k)])


def draft_law_rows(rows: Probs2D | Sequence[Probs2D | None] | None, drafts: Sequence[int], vocab: int) -> Probs2D:
    """q [k, V]: the law each draft was drawn from, as a draft source reports it.

    A row given as an array is the law the draft sampled from (kept as drawn); a row given as None,
    or ``rows`` None altogether, is a deterministic choice: one-hot on the draft token (the law of
    a greedy draft, or of a lookup such as ngram).
    """
    k = len(drafts)
    given: Sequence[Probs2D | None] = [None] * k if rows is None else list(rows)
    if len(given) != k:
        raise VerificationError(f"need one law row per draft: {k} drafts, {len(given)} rows")
    q = np.zeros((k, vocab), dtype=np.float64)  # [k, V]
    for i, (row, token) in enumerate(zip(given, drafts)):
        if row is None:
            if not 0 <= int(token) < vocab:
                raise VerificationError(f"draft id {int(token)} is outside the vocabulary [0, {vocab})")
            q[i, int(token)] = 1.0
        else:
            q[i] = row
    return q


def speculative_rows(
    target_logits: ArrayLike,
    draft_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    target_params: SamplingParams,
    draft_params: SamplingParams,
) -> tuple[Probs2D, Probs2D]:
    """p [k+1, V] and q [k, V] of one speculative step, through the ONE target law.

    target_logits [k+1, V] and draft_logits [k, V] are the raw logits at the positions of
    drafts[0..k-1] (and after drafts[k-1] for the target): p by :func:`target_rows`, q by
    :func:`draft_rows`. ``q`` uses the draft's own params: it must be the exact law the draft
    sampled from (a greedy draft has one-hot rows).
    """
    t_logits = np.asarray(target_logits)
    d_logits = np.asarray(draft_logits)
    k = len(drafts)
    if t_logits.ndim != 2 or t_logits.shape[0] != k + 1:
        raise VerificationError(f"target logits must be [k+1 = {k + 1}, V], got shape {t_logits.shape}")
    if d_logits.ndim != 2 or d_logits.shape[0] != k:
        raise VerificationError(f"draft logits must be [k = {k}, V], got shape {d_logits.shape}")
    p = target_rows(t_logits, history, drafts, target_params)
    q = draft_rows(d_logits, history, drafts, draft_params)
    return p, q


def verification_mode(target_params: SamplingParams, draft_params: SamplingParams) -> Literal["greedy", "sampled"]:
    """Greedy verification exactly when the TARGET is greedy; the draft's params never decide."""
    return "greedy" if target_params.greedy else "sampled"


def verify_step(
    target_logits: ArrayLike,
    draft_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    uniforms: Sequence[float],
    target_params: SamplingParams,
    draft_params: SamplingParams,
) -> Verdict:
    """One speculative step from logits: rows by :func:`speculative_rows`, then verify.

    Greedy targets are verified by :func:`verify_greedy` (uniforms unused), sampled targets by
    :func:`verify_sampled` with the k + 1 uniforms.
    """
    p, q = speculative_rows(target_logits, draft_logits, history, drafts, target_params, draft_params)
    if verification_mode(target_params, draft_params) == "greedy":
        return verify_greedy(p, drafts)
    return verify_sampled(p, q, drafts, uniforms)


def verify_drafts(
    target_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    q: Probs2D | None,
    params: SamplingParams,
    rng: np.random.Generator,
    law: LawFn = target_distribution,
) -> Verdict:
    """One cycle of the decode loop: verify ``drafts`` (k >= 1) proposed with laws ``q``.

    target_logits [k+1, V] from the target's one pass; ``q`` [k, V] as the draft reported it (None:
    deterministic, one-hot rows). p by :func:`target_rows`, q by :func:`draft_law_rows`, the
    verifier by :func:`verification_mode` (the draft's params never decide, so the target's are
    passed for both). A sampled verification reads ``rng.random(k + 1)`` (the draw protocol); a
    greedy one reads nothing.
    """
    if verification_mode(params, params) == "greedy":
        return verify_greedy(target_rows(target_logits, history, drafts, params, law), drafts)
    return verify_drafts_sampled(target_logits, history, drafts, q, params, rng.random(len(drafts) + 1), law)


def verify_drafts_sampled(
    target_logits: ArrayLike,
    history: Sequence[int],
    drafts: Sequence[int],
    q: Probs2D | Sequence[Probs2D | None] | None,
    params: SamplingParams,
    uniforms: npt.NDArray[np.float64],
    law: LawFn = target_distribution,
) -> Verdict:
    """:func:`verify_sampled` of ``target_rows(...)`` and ``draft_law_rows(q, ...)`` on ``uniforms``
    [k+1] (the same verdict, bit for bit), computing only the rows it reads.

    Row i of p is ``law(target_logits[i], history + drafts[:i], params)``, one law evaluation over
    the vocabulary; verification reads rows 0..a (a = the first rejected position, or k after all
    accepted), so rows after the verdict are neither computed nor checked (they cannot change it).
    Every row it reads is checked as :func:`verify_sampled` checks it: p rows finite,
    non-negative, summing to 1; q rows too, with mass on their drafted token.
    """
    logits = np.asarray(target_logits)
    k = len(drafts)
    if k < 1:
        raise VerificationError(f"need k >= 1 draft tokens, got k = {k}")
    if logits.ndim != 2 or logits.shape[0] != k + 1 or logits.shape[1] < 1:
        raise VerificationError(f"target logits must be [k+1 = {k + 1}, V], got shape {logits.shape}")
    draws = np.asarray(uniforms, dtype=np.float64)
    if draws.shape != (k + 1,) or not np.all((draws >= 0) & (draws < 1)):
        raise VerificationError(f"need k + 1 = {k + 1} uniforms in [0, 1), got {draws!r}")
    vocab = logits.shape[1]
    given: Sequence[Probs2D | None] = [None] * k if q is None else list(q)
    if len(given) != k:
        raise VerificationError(f"need one law row per draft: {k} drafts, {len(given)} rows")
    context = [int(t) for t in history]
    ids = [int(x) for x in drafts]
    for i, x in enumerate(ids):
        if not 0 <= x < vocab:
            raise VerificationError(f"draft id {x} is outside the vocabulary [0, {vocab})")
        p_row = as_rows(law(logits[i], context + ids[:i], params), "p")
        check_rows(p_row, "p")
        q_row = draft_law_rows([given[i]], [x], vocab)
        check_rows(q_row, "q")
        _check_draft_mass(q_row[None], np.array([[x]], dtype=np.int64))
        if draws[i] * q_row[0, x] < p_row[x]:
            continue  # accepted with probability min(1, p/q)
        return Verdict(accepted=i, token=inverse_cdf(residual_law(p_row, q_row[0]), float(draws[k])), kind="repair")
    last = as_rows(law(logits[k], context + ids, params), "p")
    check_rows(last, "p")
    return Verdict(accepted=k, token=inverse_cdf(last, float(draws[k])), kind="bonus")
