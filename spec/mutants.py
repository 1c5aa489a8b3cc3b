"""The spec has teeth: broken verifiers, each modelled on a real bug class, that it must kill.

Each mutant is the reference with ONE realistic mistake, either in the verifier (row level: what
it does with p, q, drafts and uniforms) or in the pipeline (how p and q are computed from logits
before the verifier sees them). ``python -m verispec.spec.mutants [--json]`` runs every property of
:mod:`spec.properties` against the reference and every mutant and prints which properties killed
each one; it exits 0 only if the reference passes everything and every mutant is killed.

Row-level mutants are written in the vectorized batch form (statistics need millions of draws)
and used one at a time through :func:`spec.properties.as_verifier`.

Broken on purpose: the draw and residual below are copies of the protocol's that carry the bugs
(a float32 running sum, a pairwise total, an off-by-one clamp, a flushed residual ...); where a
mutant's draw is not the bug, :func:`draw_rows` calls the reference's one definition
(reference.sampling.inverse_cdf_rows).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams, inverse_cdf_draws, inverse_cdf_rows, target_distribution
from verispec.reference.speculative import (
    BatchVerdict,
    BatchVerifier,
    Probs2D,
    Verifier,
    check_batch_inputs,
    verify_sampled,
    verify_sampled_batch,
)
from verispec.spec.pipeline import Pipeline, ReferencePipeline, RowsRequest
from verispec.spec.properties import PropertyResult, as_verifier, run_properties


@dataclass(frozen=True)
class Mutant:
    """A broken implementation: its name, the real bug class it models, and its parts."""

    name: str
    bug_class: str
    batch: BatchVerifier
    pipeline: Pipeline
    verifier: Verifier


# -----------------------------------------------------------------------------------------------
# row-level mutants: one configurable vectorized verifier


@dataclass(frozen=True)
class Bugs:
    """Which single mistake the row-level verifier makes (all False/"protocol" = the reference)."""

    accept: str = (
        "protocol"  # protocol | always | inverted | le | greedy | off_by_one | division | float32 | buffer_of_4
    )
    repair: str = (
        "residual"  # residual | from_p | from_q | unnormalized | reuse_uniform | padded_tie | drop_below_eps | top_1024
    )
    bonus: str = "p_k"  # p_k | none | previous_row
    draw: str = (
        "protocol"  # protocol | float32_cumsum | reversed_large_vocab | pairwise_total | clamp_v_minus_2 | side_left
    )
    rows: str = "float64"  # float64 | float16 | q_tail_underflow


def draw_rows(weights: Probs2D, u: npt.NDArray[np.float64], draw: str = "protocol") -> npt.NDArray[np.int64]:
    """The protocol's draw, row by row: the first id with u * total < cumsum (or a broken draw)."""
    if weights.shape[0] > 1 and weights.strides[0] == 0:  # one row shared by every item (a broadcast view)
        return _inverse_cdf_shared(np.ascontiguousarray(weights[0]), u, draw)
    if draw == "protocol":
        return inverse_cdf_rows(weights, u)
    vocab = weights.shape[1]
    if draw == "reversed_large_vocab" and vocab > 8:  # a kernel that scans from the top id down
        flipped = draw_rows(weights[:, ::-1], u)
        return np.asarray(vocab - 1 - flipped, dtype=np.int64)
    if draw == "float32_cumsum":
        cumulative = np.cumsum(weights.astype(np.float32), axis=1).astype(np.float64)
    else:
        cumulative = np.cumsum(weights, axis=1)
    total = weights.sum(axis=1) if draw == "pairwise_total" else cumulative[:, -1]  # np.sum is pairwise
    threshold = (u * total)[:, None]
    if draw == "side_left":  # searchsorted(side="left"): the first id with cumsum >= u * total
        token = np.sum(cumulative < threshold, axis=1)
    else:
        token = np.sum(cumulative <= threshold, axis=1)
    top = vocab - 2 if draw == "clamp_v_minus_2" and vocab >= 2 else vocab - 1  # off by one in the clamp
    return np.asarray(np.minimum(token, top), dtype=np.int64)


def _inverse_cdf_shared(row: npt.NDArray[np.float64], u: npt.NDArray[np.float64], draw: str) -> npt.NDArray[np.int64]:
    """:func:`draw_rows` of ``len(u)`` copies of one row [V], its running sum computed once
    (the statistical properties draw from shared rows: N copies of a V = 262,144 row were summed
    N times). The same tokens: a row's running sum is the same left-to-right sum whether the row
    stands alone or in a matrix, its total too (the last entry; numpy's pairwise sum of one
    contiguous row either way), and the thresholds are the same products ``u * total``. The rows
    are non-negative (the contract, max(., 0), float16 or float32 copies of them), so the running
    sum never decreases and the count of its entries <= (<) a threshold is ``searchsorted`` on the
    right (left); the protocol's draw is the reference's one-row form, tested bit-identical to its
    rows form (tests/test_one_draw.py)."""
    vocab = row.shape[0]
    if draw == "protocol":
        return inverse_cdf_draws(row, u)
    if draw == "reversed_large_vocab" and vocab > 8:
        return np.asarray(vocab - 1 - inverse_cdf_draws(row[::-1], u), dtype=np.int64)
    if draw == "float32_cumsum":
        cumulative = np.cumsum(row.astype(np.float32)).astype(np.float64)
    else:
        cumulative = np.cumsum(row)
    total = row[None, :].sum(axis=1)[0] if draw == "pairwise_total" else cumulative[-1]
    token = np.searchsorted(cumulative, u * total, side="left" if draw == "side_left" else "right")
    top = vocab - 2 if draw == "clamp_v_minus_2" and vocab >= 2 else vocab - 1
    return np.asarray(np.minimum(token, top), dtype=np.int64)


EPS_DROPPED = 1e-3  # the threshold of the "small entries" shortcuts below


def _preprocess_rows(p: Probs2D, q: Probs2D, rows: str) -> tuple[Probs2D, Probs2D]:
    """The rows as a broken implementation sees them (float16 storage, flushed q tail).
    p [N, k+1, V], q [N, k, V], possibly broadcast views of shared rows (kept shared)."""

    def each(rows_in: Probs2D, change: Callable[[Probs2D], Probs2D]) -> Probs2D:
        if rows_in.strides[0] == 0:  # shared rows: change them once
            return np.broadcast_to(change(rows_in[0]), rows_in.shape)
        return change(rows_in)

    if rows == "float16":

        def to_half(r: Probs2D) -> Probs2D:
            return np.asarray(r.astype(np.float16), dtype=np.float64)

        return each(p, to_half), each(q, to_half)
    if rows == "q_tail_underflow":
        return p, each(q, lambda r: np.where(r < EPS_DROPPED, 0.0, r))
    return p, q


def broken_batch(bugs: Bugs) -> BatchVerifier:
    """A vectorized sampled verifier with the mistakes named in ``bugs``."""

    def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> BatchVerdict:
        p_all, q_all, x, u = check_batch_inputs(p, q, drafts, uniforms)  # mutants keep the contract
        p_all, q_all = _preprocess_rows(p_all, q_all, bugs.rows)
        n, k = x.shape
        rows_for_test = p_all[:, 1 : k + 1, :] if bugs.accept == "off_by_one" else p_all[:, :k, :]
        p_x = np.take_along_axis(rows_for_test, x[..., None], axis=-1)[..., 0]  # [N, k]
        q_x = np.take_along_axis(q_all, x[..., None], axis=-1)[..., 0]
        if bugs.accept == "always":
            accept = np.ones((n, k), dtype=np.bool_)
        elif bugs.accept == "inverted":  # min(1, q/p)
            accept = u[:, :k] * p_x < q_x
        elif bugs.accept == "le":
            accept = u[:, :k] * q_x <= p_x
        elif bugs.accept == "greedy":  # accept iff the draft is the target's argmax
            accept = x == np.argmax(p_all[:, :k, :], axis=-1)
        elif bugs.accept == "division":  # u < p/q: the ratio rounds before the comparison
            with np.errstate(divide="ignore", invalid="ignore"):
                accept = u[:, :k] < p_x / q_x
        elif bugs.accept == "float32":  # the acceptance test in float32
            accept = u[:, :k].astype(np.float32) * q_x.astype(np.float32) < p_x.astype(np.float32)
        elif bugs.accept == "buffer_of_4":  # a 4-slot uniform buffer: positions >= 4 reuse u_3
            slot = np.minimum(np.arange(k), 3)
            accept = u[:, slot] * q_x < p_x
        else:
            accept = u[:, :k] * q_x < p_x
        all_accepted = np.asarray(accept.all(axis=1), dtype=np.bool_)
        accepted = np.where(all_accepted, k, np.argmin(accept, axis=1)).astype(np.int64)

        # each item emits either a repair or a bonus token: draw each only for the items that
        # emit it (items are independent, so the others' draws were computed and thrown away)
        repair_token = _repair_tokens(bugs, p_all, q_all, u, accepted, np.flatnonzero(~all_accepted))
        bonus_token = np.zeros(n, dtype=np.int64)
        bonus_items = np.flatnonzero(all_accepted)
        bonus_index = k - 1 if bugs.bonus == "previous_row" else k
        if bonus_items.size > 1 and p_all.strides[0] == 0:  # shared rows: one row, handed on as a broadcast view
            bonus_row = np.broadcast_to(p_all[0, bonus_index, :], (bonus_items.size, p_all.shape[-1]))
        else:
            bonus_row = p_all[bonus_items, bonus_index, :]
        bonus_token[bonus_items] = draw_rows(bonus_row, u[bonus_items, k], bugs.draw)
        if bugs.accept == "greedy":
            bonus_token = np.asarray(np.argmax(p_all[:, k, :], axis=1), dtype=np.int64)
        token = np.where(all_accepted, bonus_token, repair_token).astype(np.int64)
        is_bonus = all_accepted.copy()
        if bugs.bonus == "none":  # all accepted: emit the drafts and nothing more
            accepted = np.where(all_accepted, k - 1, accepted).astype(np.int64)
            token = np.where(all_accepted, x[:, k - 1], token).astype(np.int64)
            is_bonus[:] = False
        return BatchVerdict(accepted, token, is_bonus)

    return verify


def _repair_tokens(
    bugs: Bugs,
    p_all: Probs2D,
    q_all: Probs2D,
    u: npt.NDArray[np.float64],
    accepted: npt.NDArray[np.int64],
    items: npt.NDArray[np.intp],
) -> npt.NDArray[np.int64]:
    """[N] the repair token of each of ``items`` (the rejected ones; 0 elsewhere), with the bugs.
    With shared rows (broadcast views) an item's repair rows depend on its row index alone: each
    index's rows are worked out once for all its items (:func:`_repair_rows`)."""
    n, k = u.shape[0], u.shape[1] - 1
    out = np.zeros(n, dtype=np.int64)
    row = np.minimum(accepted[items], k - 1)
    shift = 1 if bugs.accept == "off_by_one" else 0
    # reuse_uniform: the rejecting uniform drives the repair draw too
    final_u = u[items, row] if bugs.repair == "reuse_uniform" else u[items, k]
    if items.size > 1 and p_all.strides[0] == 0 and q_all.strides[0] == 0:
        for r in np.unique(row):
            at = row == r
            target_row = p_all[0, min(int(r) + shift, k)][None, :]
            out[items[at]] = _repair_rows(bugs, target_row, q_all[0, int(r)][None, :], final_u[at])
    else:
        out[items] = _repair_rows(bugs, p_all[items, np.minimum(row + shift, k)], q_all[items, row], final_u)
    return out


def _repair_rows(
    bugs: Bugs, target_row: Probs2D, draft_row: Probs2D, final_u: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """The repair tokens of ``len(final_u)`` items whose repair rows are ``target_row`` and
    ``draft_row``: [M, V], an item's per row, or [1, V] shared by all M (every step below is row by
    row, so a shared row's result is each item's; it is then handed on as a broadcast view)."""
    m, vocab = final_u.shape[0], target_row.shape[-1]
    residual = np.maximum(target_row - draft_row, 0.0)
    has_residual = np.any(residual > 0, axis=1)
    if bugs.repair == "from_p":
        weights = target_row
    elif bugs.repair == "from_q":
        weights = draft_row
    else:
        if bugs.repair == "drop_below_eps":  # "negligible" residual entries flushed to zero
            residual = np.where(residual < EPS_DROPPED, 0.0, residual)
        elif bugs.repair == "top_1024":  # the repair draw only looks at the 1,024 largest entries
            if vocab > 1024:
                cut = -np.partition(-residual, 1023, axis=1)[:, 1023:1024]
                residual = np.where(residual >= cut, residual, 0.0)
        has_residual = np.any(residual > 0, axis=1)
        weights = np.where(has_residual[:, None], residual, target_row)
    if target_row.shape[0] != m:  # one shared row: every item sees it
        target_row, residual, weights = (np.broadcast_to(a, (m, vocab)) for a in (target_row, residual, weights))
        has_residual = np.broadcast_to(has_residual, (m,))
    repair_token = draw_rows(weights, final_u, bugs.draw)
    if bugs.repair == "unnormalized":  # u compared with the raw residual's running sum
        cumulative = np.cumsum(residual, axis=1)
        repair_token = np.asarray(np.minimum(np.sum(cumulative <= final_u[:, None], axis=1), vocab - 1), dtype=np.int64)
    if bugs.accept == "greedy":
        repair_token = np.asarray(np.argmax(target_row, axis=1), dtype=np.int64)
    if bugs.repair == "padded_tie":  # a zero residual: the padded tail wins the tie
        padded_last = -(-vocab // 8) * 8 - 1
        repair_token = np.where(has_residual, repair_token, padded_last).astype(np.int64)
    return np.asarray(repair_token, dtype=np.int64)


# -----------------------------------------------------------------------------------------------
# pipeline mutants: wrong rows handed to a correct verifier


class _PipelineBug(ReferencePipeline):
    """The reference pipeline with one row computed wrongly (override ``rows``)."""


class DraftQFromRawLogits(_PipelineBug):
    """q is softmax of the draft's RAW logits, though the draft sampled from processed ones."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        p, _ = super().rows(request)
        q = np.stack([target_distribution(row, [], SamplingParams()) for row in request.draft_logits])
        return p, q


class GreedyDraftScoredWithSoftmax(_PipelineBug):
    """A greedy draft (one-hot law) is scored with its softmax at the request's temperature."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        tp, dp = request.target_params, request.draft_params
        scored = SamplingParams(temperature=tp.temperature or 1.0) if dp.greedy else dp
        return super().rows(replace(request, draft_params=scored))


class ProcessorsOnDraftNotTarget(_PipelineBug):
    """The request's processors reach the draft but the target rows keep only the temperature."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        bare = SamplingParams(temperature=request.target_params.temperature)
        return super().rows(replace(request, target_params=bare))


class HistoryWithoutAcceptedDrafts(_PipelineBug):
    """Every target row is processed with the step's starting history (penalties miss drafts)."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        _, q = super().rows(request)
        start = list(request.history)
        p = np.stack([target_distribution(row, start, request.target_params) for row in request.target_logits])
        return p, q


def _row_mutant(name: str, bug_class: str, bugs: Bugs) -> Mutant:
    batch = broken_batch(bugs)
    return Mutant(name, bug_class, batch, ReferencePipeline(), as_verifier(batch))


def _pipeline_mutant(name: str, bug_class: str, pipeline: Pipeline) -> Mutant:
    return Mutant(name, bug_class, verify_sampled_batch, pipeline, verify_sampled)


def catalogue() -> list[Mutant]:
    """Every mutant, in a stable order."""
    return [
        _row_mutant(
            "resample_from_target",
            "on rejection, resample from p instead of the residual (p - q)+",
            Bugs(repair="from_p"),
        ),
        _row_mutant("resample_from_draft", "on rejection, resample from q", Bugs(repair="from_q")),
        _row_mutant("no_bonus_token", "all k accepted: no bonus token from p_k", Bugs(bonus="none")),
        _row_mutant(
            "bonus_from_wrong_row", "bonus token drawn from p_{k-1} instead of p_k", Bugs(bonus="previous_row")
        ),
        _row_mutant("always_accept", "drafts accepted without a test (transformers PR #28508)", Bugs(accept="always")),
        _row_mutant(
            "residual_not_renormalized",
            "inverse CDF over the raw residual, not divided by its mass",
            Bugs(repair="unnormalized"),
        ),
        _row_mutant(
            "recovered_id_out_of_vocab_on_ties",
            "zero residual: padded tail wins the tie, id >= V (vLLM GHSA-8wr5-jm2h-8r4f)",
            Bugs(repair="padded_tie"),
        ),
        _row_mutant("ratio_inverted", "accept with min(1, q/p) instead of min(1, p/q)", Bugs(accept="inverted")),
        _row_mutant(
            "sampling_verified_greedily",
            "a sampling request verified by argmax match (sglang #32922)",
            Bugs(accept="greedy"),
        ),
        _row_mutant(
            "acceptance_uniform_reused_for_repair",
            "the rejecting uniform also drives the repair draw",
            Bugs(repair="reuse_uniform"),
        ),
        _row_mutant("accept_on_equality", "u * q <= p instead of <: breaks bit-exact portability", Bugs(accept="le")),
        _row_mutant(
            "target_rows_off_by_one",
            "draft i tested against target row i+1 (transformers PR #28166 indexing)",
            Bugs(accept="off_by_one"),
        ),
        # LLM-scale bug classes: they fire only at large V, in the tail, at the last id,
        # for k >= 4 or in reduced precision; the toy-V properties let several of them through
        _row_mutant(
            "float32_cumsum_in_draw",
            "the inverse-CDF running sum in float32 (a GPU kernel's accumulator)",
            Bugs(draw="float32_cumsum"),
        ),
        _row_mutant(
            "reversed_scan_large_vocab",
            "for V > 8 the draw scans ids from the top down (a reduction in another order)",
            Bugs(draw="reversed_large_vocab"),
        ),
        _row_mutant(
            "total_by_pairwise_sum",
            "the draw's total from np.sum (pairwise) instead of the running sum's last entry",
            Bugs(draw="pairwise_total"),
        ),
        _row_mutant(
            "last_id_never_drawn",
            "clamp to V - 2 instead of V - 1 after searchsorted (off by one): id V-1 is never emitted",
            Bugs(draw="clamp_v_minus_2"),
        ),
        _row_mutant(
            "searchsorted_side_left",
            "searchsorted(side='left'): a boundary u picks the id whose cumsum equals u * total",
            Bugs(draw="side_left"),
        ),
        _row_mutant(
            "q_tail_underflow",
            "draft probabilities below 1e-3 read as 0 (a log-space or fp8 shortcut): tail drafts always accepted",
            Bugs(rows="q_tail_underflow"),
        ),
        _row_mutant(
            "float16_probabilities",
            "p and q stored as float16 before the verification (mixed-precision kernels)",
            Bugs(rows="float16"),
        ),
        _row_mutant(
            "residual_below_eps_dropped",
            "residual entries below 1e-3 treated as negligible and dropped",
            Bugs(repair="drop_below_eps"),
        ),
        _row_mutant(
            "residual_truncated_to_top_1024",
            "the repair draw considers only the 1,024 largest residual entries (a top-k kernel reused)",
            Bugs(repair="top_1024"),
        ),
        _row_mutant(
            "uniform_buffer_of_four",
            "a 4-slot uniform buffer: acceptance at positions >= 4 reuses u_3 (a k >= 4 loop bug)",
            Bugs(accept="buffer_of_4"),
        ),
        _row_mutant(
            "acceptance_by_division",
            "accept iff u < p/q (the ratio rounds first): off the protocol at boundaries",
            Bugs(accept="division"),
        ),
        _row_mutant(
            "acceptance_in_float32", "the acceptance test u * q < p evaluated in float32", Bugs(accept="float32")
        ),
        _pipeline_mutant(
            "draft_q_from_raw_logits",
            "q from raw logits while the draft sampled top-k/processed logits (transformers #47932)",
            DraftQFromRawLogits(),
        ),
        _pipeline_mutant(
            "greedy_draft_scored_with_softmax",
            "greedy draft scored with its softmax, not one-hot (transformers #32867)",
            GreedyDraftScoredWithSoftmax(),
        ),
        _pipeline_mutant(
            "processors_on_draft_not_target",
            "processors applied to the draft but not to the target rows (vLLM #42744)",
            ProcessorsOnDraftNotTarget(),
        ),
        _pipeline_mutant(
            "history_without_accepted_drafts",
            "target rows penalized with the step's stale history, not history + drafts",
            HistoryWithoutAcceptedDrafts(),
        ),
    ]


# -----------------------------------------------------------------------------------------------
# running the catalogue


@dataclass(frozen=True)
class MutantReport:
    """Which properties failed for one implementation."""

    name: str
    bug_class: str
    killed_by: list[str]
    results: list[PropertyResult]
    seconds: float

    @property
    def killed(self) -> bool:
        return bool(self.killed_by)


def evaluate(
    name: str,
    bug_class: str,
    verifier: Verifier,
    batch: BatchVerifier,
    pipeline: Pipeline,
    *,
    fail_fast: bool,
    only: Sequence[str] | None = None,
    scale: float = 1.0,
) -> MutantReport:
    """Run the properties on one implementation and record the failing ones."""
    start = time.perf_counter()
    results = run_properties(verifier, batch, pipeline, fail_fast=fail_fast, only=only, scale=scale)
    failed = [r.name for r in results if not r.passed]
    return MutantReport(name, bug_class, failed, results, time.perf_counter() - start)


def run_catalogue(
    *,
    fail_fast: bool = False,
    only: Sequence[str] | None = None,
    scale: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> tuple[MutantReport, list[MutantReport]]:
    """(report on the reference, one report per mutant)."""
    reference = evaluate(
        "reference",
        "-",
        verify_sampled,
        verify_sampled_batch,
        ReferencePipeline(),
        fail_fast=False,
        only=only,
        scale=scale,
    )
    if log:
        log(_line(reference))
    reports = []
    for mutant in catalogue():
        report = evaluate(
            mutant.name,
            mutant.bug_class,
            mutant.verifier,
            mutant.batch,
            mutant.pipeline,
            fail_fast=fail_fast,
            only=only,
            scale=scale,
        )
        reports.append(report)
        if log:
            log(_line(report))
    return reference, reports


def _line(report: MutantReport) -> str:
    if report.name == "reference":
        state = "passes all" if not report.killed else f"FAILS {', '.join(report.killed_by)}"
    else:
        state = f"killed by {', '.join(report.killed_by)}" if report.killed else "SURVIVED"
    return f"{report.name:<38} {state}  ({report.seconds:.1f}s)"


def _as_json(report: MutantReport) -> dict[str, Any]:
    return {
        "name": report.name,
        "bug_class": report.bug_class,
        "killed": report.killed,
        "killed_by": report.killed_by,
        "seconds": round(report.seconds, 3),
        "properties": [
            {
                "name": r.name,
                "passed": r.passed,
                "n": r.n,
                "alpha": r.alpha,
                "power": round(r.power, 6),
                "detail": r.detail,
            }
            for r in report.results
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verispec.spec.mutants [--json] [--fail-fast] [--only NAME ...] [--scale S]``."""
    parser = argparse.ArgumentParser(prog="python -m verispec.spec.mutants", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--fail-fast", action="store_true", help="stop each mutant at its first failing property")
    parser.add_argument("--only", nargs="+", metavar="PROPERTY", help="run only these properties")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply statistical sample sizes (power is reported)"
    )
    args = parser.parse_args(argv)
    if not args.scale > 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    log = None if args.json else print
    try:
        reference, reports = run_catalogue(fail_fast=args.fail_fast, only=args.only, scale=args.scale, log=log)
    except ValueError as exc:
        print(f"verispec.spec.mutants: error: {exc}", file=sys.stderr)
        return 2
    killed = sum(r.killed for r in reports)
    ok = not reference.killed and killed == len(reports)
    if args.json:
        print(
            json.dumps(
                {
                    "reference": _as_json(reference),
                    "mutants": [_as_json(r) for r in reports],
                    "killed": killed,
                    "total": len(reports),
                    "ok": ok,
                },
                indent=2,
            )
        )
    else:
        print(
            f"\n{killed}/{len(reports)} mutants killed; reference {'passes every property' if not reference.killed else 'FAILS'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
