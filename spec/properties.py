"""The spec's properties, runnable against ANY verifier: ``run_properties(verifier) -> results``.

A verifier under test is given as a :class:`~reference.speculative.Verifier` (one verification),
optionally a :class:`~reference.speculative.BatchVerifier` (N at once, for cheap statistics; lifted
from the single form when absent) and optionally a :class:`~spec.pipeline.Pipeline` (how p and q
rows are computed from logits; the reference's by default). ``spec.mutants`` runs every broken
verifier through this; ``verispec check`` runs external implementations through it.

Properties, cheapest first (deterministic ones have alpha 0 and power 1):

- ``contract``: malformed inputs raise VerificationError, valid ones do not.
- ``range_and_mass``: 0 <= accepted <= k, kind is bonus iff accepted == k, token < V with positive
  mass in the law it was drawn from, accepted drafts have positive target mass; on random rows and
  on edge rows (subnormal draft mass, rows summing to 1 - 1e-9, V not a multiple of 8).
- ``pipeline_processors``: toy autoregressive logits models with processors (top-k, top-p, min-p,
  temperature, logit bias, repetition penalty, greedy draft, greedy target): the exact law of the
  first 2 emitted tokens, with the pipeline's rows and the verifier's implied law (see
  ``protocol_cells``), equals the
  processed target law (within 1e-9 TV: float rows sum to 1 only to rounding).
- ``protocol_boundaries``: dyadic rows and uniforms, many ON the protocol's boundaries
  (u * q(x) == p(x), u * total == cumsum); every float64 step is then exact, so the verdict must
  equal the exact protocol's (:func:`spec.exact.protocol_verdict`) bit for bit.
- ``protocol_cells``: for small rows, the unit cube of uniforms splits into cells on which the
  protocol's verdict is constant; the verifier is evaluated at every cell's midpoint and must give
  the cell's verdict. Weighting by the cells' exact volumes gives the verifier's implied law.
- ``exact_lossless``: that implied law, over all draft paths, completed with target draws, equals
  the product of the target rows EXACTLY (Fractions), for rows with zeros, ties, one-hot rows,
  p == q and disjoint supports.
- ``batch_matches_sequential``: the batch form equals the single form item by item.
- ``stat_*``: chi-square tests of the verifier's real draws against exact laws
  (:mod:`spec.statistics`): the verdict law for k = 1, 2, 3, 5, 8 with position-dependent rows,
  and the first-3-token law of autoregressive toys for k = 1, 2, 4 and a processed one for k = 3.
  N from the power analysis (TV bias 0.005 detected with power 0.99), alpha from the budget table.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerificationError
from verispec.reference.sampling import SamplingParams, inverse_cdf_draws, inverse_cdf_rows, target_distribution
from verispec.reference.speculative import (
    BatchVerifier,
    Probs2D,
    Verdict,
    Verifier,
    residual_law,
    verify_sampled,
    verify_sampled_batch,
)
from verispec.spec import exact
from verispec.spec.llm_properties import (
    LLM_EXACT,
    LLM_STATISTICS,
)  # LLM scale: V up to 262,144 (full_vocab_*, stat_strata_*)
from verispec.spec.pipeline import Pipeline as Pipeline
from verispec.spec.pipeline import ReferencePipeline as ReferencePipeline
from verispec.spec.pipeline import RowsRequest
from verispec.spec.report import VALID_INPUT_FAILURE
from verispec.spec.sequential import StatDesign
from verispec.spec.statistics import (
    ALPHA_BUDGET,
    PROPERTY_SEED,
    TV_BIAS,
    chi_square,
    counts_of,
    law_to_vector,
    power_of,
    required_sample_size,
)
from verispec.spec.subject import Property as Property
from verispec.spec.subject import PropertyResult as PropertyResult
from verispec.spec.subject import Subject as Subject
from verispec.spec.subject import as_batch as as_batch
from verispec.spec.subject import as_verifier as as_verifier

# -----------------------------------------------------------------------------------------------
# rows for the cases: dyadic (multiples of 2^-bits), so exact and float arithmetic agree


def dyadic_row(
    rng: np.random.Generator, vocab: int, bits: int = 6, *, support: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.float64]:
    """A random probability row with entries that are multiples of 2^-bits, summing exactly to 1.

    ``support`` restricts the nonzero ids; zeros also occur by chance.
    """
    allowed = np.ones(vocab, dtype=np.bool_) if support is None else support
    ids = np.flatnonzero(allowed)
    weights = rng.dirichlet(np.full(ids.shape[0], 0.7))
    counts = rng.multinomial(2**bits, weights)
    row = np.zeros(vocab, dtype=np.float64)
    row[ids] = counts / 2.0**bits
    return row


SHAPES = ("independent", "equal", "disjoint", "one_hot_p", "one_hot_q", "ties", "zeros_in_q")


def small_case(rng: np.random.Generator, vocab: int, k: int, shape: str, bits: int = 6) -> tuple[Probs2D, Probs2D]:
    """Target rows [k+1, V] and draft rows [k, V] of a given structure (dyadic)."""
    p = np.stack([dyadic_row(rng, vocab, bits) for _ in range(k + 1)])
    q = np.stack([dyadic_row(rng, vocab, bits) for _ in range(k)])
    for i in range(k):
        if shape == "equal":
            q[i] = p[i]
        elif shape == "disjoint" and vocab >= 2:
            cut = int(rng.integers(1, vocab))
            perm = rng.permutation(vocab)
            in_p = np.zeros(vocab, dtype=np.bool_)
            in_p[perm[:cut]] = True
            p[i] = dyadic_row(rng, vocab, bits, support=in_p)
            q[i] = dyadic_row(rng, vocab, bits, support=~in_p)
        elif shape == "one_hot_p":
            p[i] = np.eye(vocab)[int(rng.integers(vocab))]
        elif shape == "one_hot_q":
            q[i] = np.eye(vocab)[int(rng.integers(vocab))]
        elif shape == "ties":
            tied = rng.permutation(vocab)[: max(1, vocab // 2 * 2)]
            p[i] = 0.0
            p[i, tied] = 1.0 / tied.shape[0] if tied.shape[0] in (1, 2, 4, 8) else 0.0
            if p[i].sum() == 0:
                p[i, tied[:2] if tied.shape[0] >= 2 else tied[:1]] = 1.0 / min(2, tied.shape[0])
        elif shape == "zeros_in_q" and vocab >= 2:
            support = np.ones(vocab, dtype=np.bool_)
            support[int(rng.integers(vocab))] = False
            q[i] = dyadic_row(rng, vocab, bits, support=support)
    if shape == "one_hot_p":
        p[k] = np.eye(vocab)[int(rng.integers(vocab))]
    return p, q


def draw_drafts(rng: np.random.Generator, q: Probs2D, n: int) -> npt.NDArray[np.int64]:
    """n draft paths [n, k] drawn from shared rows q [k, V] (harness-side inverse CDF)."""
    u = rng.random((n, q.shape[0]))  # [n, k]
    return np.stack([inverse_cdf_draws(q[i], u[:, i]) for i in range(q.shape[0])], axis=1)  # [n, k]


def _draw_from_rows(rng: np.random.Generator, rows: Probs2D) -> npt.NDArray[np.int64]:
    """One draw per row of rows [n, V] (harness-side inverse CDF)."""
    return inverse_cdf_rows(rows, rng.random((rows.shape[0],)))


MAX_FAILURES = 3  # a property stops collecting (and running) cases after this many failures


LISTED_FAILURES = 20  # failing cases named in a detail (the contract has fewer: every one is listed)


def _result(name: str, failures: list[str], cases: int) -> PropertyResult:
    if failures:
        listed = "; ".join(failures[:LISTED_FAILURES])
        more = f" (+{len(failures) - LISTED_FAILURES} more)" if len(failures) > LISTED_FAILURES else ""
        return PropertyResult(name, False, cases, 0.0, 1.0, f"{len(failures)} of {cases} cases fail: {listed}{more}")
    return PropertyResult(name, True, cases, 0.0, 1.0, f"{cases} cases agree")


def _call(subject: Subject, p: Probs2D, q: Probs2D, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict | str:
    """The verifier's verdict, or a description of what it raised."""
    try:
        return subject.verifier(p, q, list(drafts), list(uniforms))
    except Exception as exc:  # the subject may be arbitrarily broken: report, do not crash
        return f"raised {type(exc).__name__}: {exc}"


# -----------------------------------------------------------------------------------------------
# deterministic properties


def prop_contract(subject: Subject) -> PropertyResult:
    """Malformed inputs raise VerificationError; a well-formed one does not."""
    p = np.array([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    q = np.array([[0.25, 0.75, 0.0]])
    bad: list[tuple[str, Any, Any, Any, Any]] = [
        ("k = 0", p[:1], q[:0], [], [0.5]),
        ("p row sums to 0.9", p * np.array([[0.9], [1.0]]), q, [1], [0.5, 0.5]),
        ("negative q entry", p, np.array([[-0.25, 1.25, 0.0]]), [1], [0.5, 0.5]),
        ("NaN in p", np.array([[np.nan, 0.5, 0.5], [0.25, 0.25, 0.5]]), q, [1], [0.5, 0.5]),
        ("vocab sizes disagree", p, np.array([[0.25, 0.75, 0.0, 0.0]]), [1], [0.5, 0.5]),
        ("draft has q = 0", p, q, [2], [0.5, 0.5]),
        ("draft id = V", p, q, [3], [0.5, 0.5]),
        ("negative draft id", p, q, [-1], [0.5, 0.5]),
        ("uniform = 1", p, q, [1], [1.0, 0.5]),
        ("negative uniform", p, q, [1], [0.5, -0.1]),
        ("NaN uniform", p, q, [1], [0.5, float("nan")]),
        ("k uniforms instead of k + 1", p, q, [1], [0.5]),
        ("k rows of p instead of k + 1", p[:1], q, [1], [0.5, 0.5]),
    ]
    if subject.own_randomness:  # it never sees the uniforms: their contract is not its to keep
        bad = [case for case in bad if "uniform" not in case[0]]
    failures: list[str] = []
    outcome = _call(subject, p, q, [1], [0.5, 0.5])
    if isinstance(outcome, str):  # listed first: the report tells "crashes on valid input" by it
        failures.append(f"{VALID_INPUT_FAILURE}{outcome}")
    for label, bp, bq, bd, bu in bad:
        try:
            subject.verifier(bp, bq, bd, bu)
        except VerificationError:
            continue
        except Exception as exc:  # noqa: BLE001 - any other type is a contract breach too
            failures.append(f"{label}: raised {type(exc).__name__} instead of VerificationError")
            continue
        failures.append(f"{label}: accepted without VerificationError")
    return _result("contract", failures, len(bad) + 1)


def _edge_cases() -> list[tuple[str, Probs2D, Probs2D, list[int], list[float]]]:
    """Rows where a rejection finds no positive residual, and V not a multiple of 8."""
    tiny = 5e-324  # the smallest subnormal: 0.75 * tiny rounds back up to tiny
    row9 = np.array([0.5, 0.25, 0.125, 0.125, 0, 0, 0, 0, tiny])
    deficit_p = np.array([0.3, 0.3, 0.4 - 1e-9])
    full_q = np.array([0.3, 0.3, 0.4])
    return [
        ("p == q with a subnormal drafted mass (V = 9)", np.stack([row9, row9]), row9[None], [8], [0.75, 0.3]),
        ("p == q, subnormal draft, last-id draw (V = 9)", np.stack([row9, row9]), row9[None], [8], [0.999, 0.9999]),
        (
            "p <= q everywhere, p sums to 1 - 1e-9",
            np.stack([deficit_p, deficit_p]),
            full_q[None],
            [2],
            [0.9999999999, 0.99],
        ),
        (
            "bonus from a row ending in zeros (V = 13)",
            np.stack([np.eye(13)[3], np.r_[np.full(4, 0.25), np.zeros(9)]]),
            np.eye(13)[3][None],
            [3],
            [0.2, 0.999],
        ),
    ]


def _mass_failures(p: Probs2D, q: Probs2D, drafts: Sequence[int], verdict: Verdict) -> str | None:
    k, vocab = q.shape
    if not 0 <= verdict.accepted <= k:
        return f"accepted = {verdict.accepted} outside [0, {k}]"
    if (verdict.kind == "bonus") != (verdict.accepted == k):
        return f"kind {verdict.kind!r} with accepted = {verdict.accepted} of k = {k}"
    if not 0 <= verdict.token < vocab:
        return f"token {verdict.token} outside the vocabulary [0, {vocab})"
    for i in range(verdict.accepted):
        if p[i, drafts[i]] <= 0:
            return f"accepted draft {drafts[i]} at position {i} has target probability 0"
    a = verdict.accepted
    if verdict.kind == "bonus":
        law = p[k]
    else:
        law = residual_law(p[a], q[a])
    if law[verdict.token] <= 0:
        return f"{verdict.kind} token {verdict.token} has zero mass in the law it must be drawn from"
    return None


def prop_range_and_mass(subject: Subject) -> PropertyResult:
    """Verdicts are in range and every emitted token has positive mass in its law."""
    rng = subject.rng("range_and_mass")
    cases: list[tuple[str, Probs2D, Probs2D, list[int], list[float]]] = list(_edge_cases())
    for case in range(400):
        vocab = int(rng.choice([1, 2, 3, 5, 7, 9, 13, 17]))
        k = int(rng.integers(1, 6))
        shape = SHAPES[case % len(SHAPES)]
        p, q = small_case(rng, vocab, k, shape, bits=int(rng.choice([3, 6, 20])))
        drafts = draw_drafts(rng, q, 1)[0].tolist()
        uniforms = rng.random(k + 1).tolist()
        if case % 5 == 0:
            uniforms[-1] = float(np.nextafter(1.0, 0.0))  # the top end of the final draw
        cases.append((f"random {shape} V={vocab} k={k}", p, q, drafts, uniforms))
    failures: list[str] = []
    for label, p, q, drafts, uniforms in cases:
        outcome = _call(subject, p, q, drafts, uniforms)
        problem = outcome if isinstance(outcome, str) else _mass_failures(p, q, drafts, outcome)
        if problem:
            failures.append(f"{label}, drafts={drafts}, u={uniforms}: {problem}")
            if len(failures) >= MAX_FAILURES:
                break
    return _result("range_and_mass", failures, len(cases))


def prop_protocol_boundaries(subject: Subject) -> PropertyResult:
    """Dyadic inputs, many exactly on the protocol's boundaries: bit-exact agreement."""
    rng = subject.rng("protocol_boundaries")
    failures: list[str] = []
    cases = 600
    for case in range(cases):
        vocab = int(rng.integers(2, 7))
        k = int(rng.integers(1, 4))
        p, q = small_case(rng, vocab, k, SHAPES[case % len(SHAPES)], bits=6)
        drafts = draw_drafts(rng, q, 1)[0].tolist()
        P = [exact.exact_row(row, normalize=False) for row in p]
        Q = [exact.exact_row(row, normalize=False) for row in q]
        us = [Fraction(int(rng.integers(0, 64)), 64) for _ in range(k + 1)]
        for i, x in enumerate(drafts):  # put acceptance tests on the boundary u * q(x) == p(x)
            ratio = P[i][x] / Q[i][x]
            if ratio < 1 and _is_dyadic(ratio) and rng.random() < 0.6:
                us[i] = ratio
        a, _token, _kind = exact.protocol_verdict(P, Q, tuple(drafts), us)
        weights = P[k] if a == k else _exact_weights(P[a], Q[a])
        boundary = sum(weights[: int(rng.integers(0, vocab)) + 1], Fraction(0)) / sum(weights, Fraction(0))
        if boundary < 1 and _is_dyadic(boundary) and rng.random() < 0.7:
            us[k] = boundary  # the final draw on a running-sum boundary of the row it uses
        expected = exact.protocol_verdict(P, Q, tuple(drafts), us)
        outcome = _call(subject, p, q, drafts, [float(u) for u in us])
        got = outcome if isinstance(outcome, str) else (outcome.accepted, outcome.token, outcome.kind)
        if got != expected:
            failures.append(
                f"p={p.tolist()}, q={q.tolist()}, drafts={drafts}, u={[str(u) for u in us]}: "
                f"protocol gives {expected}, verifier gives {got}"
            )
            if len(failures) >= MAX_FAILURES:
                break
    return _result("protocol_boundaries", failures, cases)


def _exact_weights(p_row: exact.Row, q_row: exact.Row) -> exact.Row:
    residual = tuple(max(Fraction(0), a - b) for a, b in zip(p_row, q_row))
    return residual if any(residual) else p_row


def _is_dyadic(value: Fraction) -> bool:
    return value.denominator & (value.denominator - 1) == 0 and value.denominator <= 2**40


@dataclass
class ImpliedLaw:
    """What a verifier does on one (rows, drafts) case, measured on the protocol's cells."""

    law: exact.VerdictLaw
    mismatches: list[str]
    errors: list[str]


def implied_verdict_law(batch: BatchVerifier, p: Probs2D, q: Probs2D, drafts: Sequence[int]) -> ImpliedLaw:
    """Evaluate the verifier at the midpoint of every protocol cell of the uniforms.

    Cell j < k: u_0..u_{j-1} accept, u_j rejects (volume prod t_i * (1 - t_j) with
    t_i = min(1, p_i(x_i)/q_i(x_i))); cell k: all accept. Within a cell, the final uniform's
    cells are the inverse-CDF intervals of the row it draws from. Uniforms the protocol leaves
    unused are set to 1/2. Returns the implied law (cell volumes, exact) and the cells where the
    verdict differs from the protocol's.
    """
    P = [exact.exact_row(row, normalize=False) for row in p]
    Q = [exact.exact_row(row, normalize=False) for row in q]
    k, vocab = len(drafts), p.shape[1]
    half = Fraction(1, 2)
    thresholds = [min(Fraction(1), P[i][x] / Q[i][x]) for i, x in enumerate(drafts)]
    points: list[list[Fraction]] = []
    volumes: list[Fraction] = []
    expected: list[exact.VerdictKey] = []
    reach = Fraction(1)
    for j in range(k + 1):
        stop = Fraction(1) if j == k else 1 - thresholds[j]
        volume = reach * stop
        if j < k:
            reach *= thresholds[j]
        if volume == 0:
            continue
        base = [thresholds[i] / 2 for i in range(j)]
        if j < k:
            base += [(1 + thresholds[j]) / 2] + [half] * (k - j - 1)
        weights = P[k] if j == k else _exact_weights(P[j], Q[j])
        total = sum(weights, Fraction(0))
        running = Fraction(0)
        for token in range(vocab):
            if weights[token] == 0:
                continue
            low = running / total
            running += weights[token]
            high = running / total
            points.append(base + [(low + high) / 2])
            volumes.append(volume * weights[token] / total)
            expected.append((j, token, "bonus" if j == k else "repair"))
    law: exact.VerdictLaw = {}
    mismatches: list[str] = []
    errors: list[str] = []
    if not points:
        return ImpliedLaw(law, mismatches, errors)
    uniforms = np.array([[float(u) for u in point] for point in points], dtype=np.float64)
    draft_arr = np.tile(np.asarray(drafts, dtype=np.int64), (len(points), 1))
    try:
        result = batch(p, q, draft_arr, uniforms)
    except Exception as exc:  # noqa: BLE001
        errors.append(f"raised {type(exc).__name__}: {exc}")
        return ImpliedLaw(law, mismatches, errors)
    for index, volume in enumerate(volumes):
        a, token = int(result.accepted[index]), int(result.token[index])
        kind: exact.Kind = "bonus" if bool(result.is_bonus[index]) else "repair"
        exact.add_to(law, (a, token, kind), volume)
        if (a, token, kind) != expected[index] and len(mismatches) < 3:
            mismatches.append(
                f"drafts={list(drafts)}, u={uniforms[index].tolist()}: protocol {expected[index]}, got {(a, token, kind)}"
            )
    return ImpliedLaw(law, mismatches, errors)


def _cell_cases(rng: np.random.Generator, count: int) -> list[tuple[str, Probs2D, Probs2D]]:
    cases = []
    for case in range(count):
        vocab = int(rng.integers(1, 5))
        k = int(rng.integers(1, 4))
        shape = SHAPES[case % len(SHAPES)]
        p, q = small_case(rng, vocab, k, shape, bits=6)
        cases.append((f"{shape} V={vocab} k={k}", p, q))
    return cases


def prop_protocol_cells(subject: Subject) -> PropertyResult:
    """At every cell midpoint of the uniforms, the verdict is the protocol's."""
    rng = subject.rng("protocol_cells")
    failures: list[str] = []
    cases = _cell_cases(rng, 40)
    for label, p, q in cases:
        k, vocab = q.shape
        # the row function is consumed within this iteration: binding q late is what is meant
        row_of = lambda prefix: exact.exact_row(q[len(prefix)], normalize=False)  # noqa: E731, B023
        for drafts, _mass in exact.draft_paths(row_of, k, vocab):
            implied = implied_verdict_law(subject.batch, p, q, drafts)
            if implied.errors or implied.mismatches:
                failures.append(f"{label}, p={p.tolist()}, q={q.tolist()}: {(implied.errors + implied.mismatches)[0]}")
                break
        if len(failures) >= MAX_FAILURES:
            break
    return _result("protocol_cells", failures, len(cases))


def prop_exact_lossless(subject: Subject) -> PropertyResult:
    """The verifier's implied law of emitted tokens, completed with target draws, is prod p."""
    rng = subject.rng("exact_lossless")
    failures: list[str] = []
    cases = _cell_cases(rng, 40)
    for label, p, q in cases:
        k, vocab = q.shape
        P = [exact.exact_row(row, normalize=False) for row in p]
        emitted: exact.Law = {}
        broken = ""
        row_of = lambda prefix: exact.exact_row(q[len(prefix)], normalize=False)  # noqa: E731, B023
        for drafts, path_mass in exact.draft_paths(row_of, k, vocab):
            implied = implied_verdict_law(subject.batch, p, q, drafts)
            if implied.errors:
                broken = implied.errors[0]
                break
            for (a, token, _kind), mass in implied.law.items():
                if not (0 <= a <= k) or not (0 <= token < vocab):
                    broken = f"verdict {(a, token)} out of range"
                    break
                exact.add_to(emitted, drafts[:a] + (token,), path_mass * mass)
            if broken:
                break
        if broken:
            failures.append(f"{label}: {broken}")
            continue
        got = exact.extend_with_target(emitted, P)
        want = exact.product_law(P)
        if got != want:
            tv = exact.total_variation(got, want)
            failures.append(
                f"{label}, p={p.tolist()}, q={q.tolist()}: emitted law off the target by TV {float(tv):.6g}"
            )
            if len(failures) >= MAX_FAILURES:
                break
    return _result("exact_lossless", failures, len(cases))


def prop_batch_matches_sequential(subject: Subject) -> PropertyResult:
    """Item n of the batch form equals the single form on item n (shared and per-item rows)."""
    rng = subject.rng("batch_matches_sequential")
    failures: list[str] = []
    total = 0
    for case in range(6):
        vocab, k = int(rng.choice([2, 5, 9])), int(rng.integers(1, 9))
        p, q = small_case(rng, vocab, k, SHAPES[case % len(SHAPES)], bits=int(rng.choice([6, 30])))
        n = 300
        drafts = draw_drafts(rng, q, n)
        uniforms = rng.random((n, k + 1))
        per_item = case % 2 == 1
        p_arg: Probs2D = np.broadcast_to(p, (n,) + p.shape).copy() if per_item else p
        q_arg: Probs2D = np.broadcast_to(q, (n,) + q.shape).copy() if per_item else q
        try:
            result = subject.batch(p_arg, q_arg, drafts, uniforms)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"batch raised {type(exc).__name__}: {exc}")
            continue
        for item in range(n):
            total += 1
            outcome = _call(subject, p, q, drafts[item].tolist(), uniforms[item].tolist())
            got = (int(result.accepted[item]), int(result.token[item]), bool(result.is_bonus[item]))
            want = outcome if isinstance(outcome, str) else (outcome.accepted, outcome.token, outcome.kind == "bonus")
            if got != want:
                failures.append(
                    f"item with drafts={drafts[item].tolist()}, u={uniforms[item].tolist()}: batch {got}, single {want}"
                )
                break
    return _result("batch_matches_sequential", failures, total)


# -----------------------------------------------------------------------------------------------
# the pipeline: processors, exact


@dataclass(frozen=True)
class LogitsModel:
    """A toy autoregressive logits model: logits depend on the position and the last token."""

    table: npt.NDArray[np.float64]  # [positions, V + 1, V]; row V + 1 - 1 is "no last token"

    def __call__(self, prefix: exact.Outcome) -> npt.NDArray[np.float64]:
        positions, _, vocab = self.table.shape
        last = prefix[-1] if prefix else vocab
        return np.asarray(self.table[min(len(prefix), positions - 1), last], dtype=np.float64)


@dataclass(frozen=True)
class ProcessorScenario:
    """A toy decoding situation with processors: who samples how, from which context."""

    name: str
    target_params: SamplingParams
    draft_params: SamplingParams
    history: tuple[int, ...] = ()
    k: int = 2
    m: int = 2


PROCESSOR_SCENARIOS = (
    ProcessorScenario(
        "top_k_on_both", SamplingParams(temperature=0.9, top_k=2), SamplingParams(temperature=0.9, top_k=2)
    ),
    ProcessorScenario("greedy_draft", SamplingParams(temperature=1.0, top_p=0.9), SamplingParams(temperature=0.0)),
    ProcessorScenario(
        "processed_target",
        SamplingParams(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
        SamplingParams(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
    ),
    ProcessorScenario(
        "repeat_penalty_with_drafts",
        SamplingParams(temperature=1.0, repeat_penalty=3.0, repeat_last_n=-1),
        SamplingParams(temperature=1.0),
        history=(1,),
    ),
    ProcessorScenario("greedy_target", SamplingParams(temperature=0.0), SamplingParams(temperature=1.2)),
    ProcessorScenario(
        "top_p_min_p_draft_sampled_plain",
        SamplingParams(temperature=0.8, top_p=0.8, min_p=0.1),
        SamplingParams(temperature=1.0),
        k=1,
    ),
)


def pipeline_law(
    subject: Subject, scenario: ProcessorScenario, target: LogitsModel, draft: LogitsModel
) -> tuple[exact.Law, exact.Law, str]:
    """(law of the first m emitted tokens through the subject, processed target law, error)."""
    tp, dp, history = scenario.target_params, scenario.draft_params, scenario.history

    def law_of(model: LogitsModel, params: SamplingParams) -> exact.Model:
        def row(prefix: exact.Outcome) -> exact.Row:
            return exact.exact_row(target_distribution(model(prefix), list(history + prefix), params))

        return row

    true_target, true_draft = law_of(target, tp), law_of(draft, dp)
    errors: list[str] = []
    mode = subject.pipeline.mode(tp, dp)

    def rows_fn(prefix: exact.Outcome, drafts: exact.Outcome) -> tuple[list[exact.Row], list[exact.Row]]:
        k = len(drafts)
        t_logits = np.stack([target(prefix + drafts[:i]) for i in range(k + 1)])
        d_logits = np.stack([draft(prefix + drafts[:i]) for i in range(k)])
        request = RowsRequest(
            target_logits=t_logits,
            draft_logits=d_logits,
            history=tuple(history) + tuple(prefix),
            drafts=tuple(drafts),
            target_params=tp,
            draft_params=dp,
        )
        p, q = subject.pipeline.rows(request)
        return _fraction_rows(p), _fraction_rows(q)

    def rule(p_rows: Sequence[exact.Row], q_rows: Sequence[exact.Row], drafts: exact.Outcome) -> exact.VerdictLaw:
        if mode == "greedy":
            return exact.greedy_verdict_law(p_rows, q_rows, drafts)
        implied = implied_verdict_law(subject.batch, _float_rows(p_rows), _float_rows(q_rows), drafts)
        if implied.errors:
            errors.append(implied.errors[0])
            return {(len(drafts), 0, "bonus"): Fraction(1)}
        return implied.law

    def step(prefix: exact.Outcome) -> exact.Law:
        return exact.speculative_step_law(true_target, true_draft, scenario.k, prefix, rows=rows_fn, rule=rule)

    got = exact.first_tokens_law(step, scenario.m)
    want = exact.target_sequence_law(true_target, scenario.m)
    return got, want, (errors[0] if errors else "")


def _fraction_rows(rows: npt.ArrayLike) -> list[exact.Row]:
    """Float rows as exact Fractions, NOT renormalized (the verifier sees the floats)."""
    return [exact.exact_row(row, normalize=False) for row in np.asarray(rows, dtype=np.float64)]


def _float_rows(rows: Sequence[exact.Row]) -> Probs2D:
    """Back to float64: exact, since the Fractions came from floats."""
    return np.array([[float(v) for v in row] for row in rows], dtype=np.float64)


PIPELINE_TOLERANCE = Fraction(1, 10**9)  # float rows sum to 1 only up to rounding


def prop_pipeline_processors(subject: Subject) -> PropertyResult:
    """Processors: the law through the pipeline equals the processed target law (TV <= 1e-9)."""
    rng = subject.rng("pipeline_processors")
    vocab = 4
    failures: list[str] = []
    for scenario in PROCESSOR_SCENARIOS:
        target = LogitsModel(rng.normal(0.0, 1.5, size=(3, vocab + 1, vocab)))
        draft = LogitsModel(target.table + rng.normal(0.0, 1.0, size=target.table.shape))
        try:
            got, want, error = pipeline_law(subject, scenario, target, draft)
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{scenario.name}: raised {type(exc).__name__}: {exc}")
            continue
        if error:
            failures.append(f"{scenario.name}: {error}")
            continue
        tv = exact.total_variation(got, want)
        if tv > PIPELINE_TOLERANCE:
            failures.append(
                f"{scenario.name}: law of the first {scenario.m} tokens is off the processed target by TV {float(tv):.6g}"
            )
    return _result("pipeline_processors", failures, len(PROCESSOR_SCENARIOS))


# -----------------------------------------------------------------------------------------------
# statistical properties


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


def _stat_verdict_law(k: int) -> Property:
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
            drafts[:, i] = _draw_from_rows(rng, q[:, i])
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


def _stat_lossless(k: int, processed: bool = False) -> Property:
    prop = _fixed_n(lambda: lossless_design(k, processed))
    prop.__name__ = f"stat_lossless_processed_k{k}" if processed else f"stat_lossless_ar_k{k}"
    return prop


# -----------------------------------------------------------------------------------------------
# the runner


PROPERTIES: tuple[tuple[str, Property], ...] = (
    ("contract", prop_contract),
    ("range_and_mass", prop_range_and_mass),
    ("pipeline_processors", prop_pipeline_processors),
    ("protocol_boundaries", prop_protocol_boundaries),
    ("protocol_cells", prop_protocol_cells),
    ("exact_lossless", prop_exact_lossless),
    ("batch_matches_sequential", prop_batch_matches_sequential),
    *LLM_EXACT,
    ("stat_verdict_law_k1", _stat_verdict_law(1)),
    ("stat_verdict_law_k2", _stat_verdict_law(2)),
    ("stat_verdict_law_k3", _stat_verdict_law(3)),
    ("stat_verdict_law_k5", _stat_verdict_law(5)),
    ("stat_verdict_law_k8", _stat_verdict_law(8)),
    ("stat_lossless_ar_k1", _stat_lossless(1)),
    ("stat_lossless_ar_k2", _stat_lossless(2)),
    ("stat_lossless_ar_k4", _stat_lossless(4)),
    ("stat_lossless_processed_k3", _stat_lossless(3, processed=True)),
) + LLM_STATISTICS
PROPERTY_NAMES: tuple[str, ...] = tuple(name for name, _ in PROPERTIES)
STATISTICAL: frozenset[str] = frozenset(name for name in PROPERTY_NAMES if name.startswith("stat_"))


def strata_design(name: str) -> StatDesign:
    """A stratified LLM-scale test of :mod:`spec.strata` as a design: cells (accepted, stratum),
    designed against ``strata.design_tv(name)`` (``STRATA_TV``; 0.1 at V = 262,144, for cost)."""
    from verispec.spec import strata

    p, q = strata.rows_for(name)

    def draw(batch: BatchVerifier, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        return strata.observe(batch, p, q, n, rng)

    label = f" V={p.shape[1]} k={q.shape[0]} (strata)"
    return StatDesign(
        name, strata.cell_law(p, q), strata.design_df(p, q), strata.design_tv(name), ALPHA_BUDGET[name], draw, label
    )


# every statistical property as a design (spec/sequential.py runs them group-sequentially)
STAT_DESIGNS: dict[str, Callable[[], StatDesign]] = {
    **{f"stat_verdict_law_k{k}": functools.partial(verdict_law_design, k) for k in (1, 2, 3, 5, 8)},
    **{f"stat_lossless_ar_k{k}": functools.partial(lossless_design, k) for k in (1, 2, 4)},
    "stat_lossless_processed_k3": functools.partial(lossless_design, 3, processed=True),
    **{name: functools.partial(strata_design, name) for name, _ in LLM_STATISTICS},
}


def run_properties(
    verifier: Verifier,
    batch: BatchVerifier | None = None,
    pipeline: Pipeline | None = None,
    *,
    only: Collection[str] | None = None,
    fail_fast: bool = False,
    scale: float = 1.0,
    seed: int = PROPERTY_SEED,
    own_randomness: bool = False,
) -> list[PropertyResult]:
    """Run the spec's properties against an implementation; one result per property run.

    ``batch`` defaults to ``verifier`` lifted (a loop), ``pipeline`` to :class:`ReferencePipeline`.
    ``only`` selects properties by name; ``fail_fast`` stops at the first failure; ``scale``
    multiplies the statistical sample sizes (the reported power follows); ``own_randomness``: the
    verifier draws its own randomness (the uniforms' part of the contract is not checked).
    """
    unknown = set(only or ()) - set(PROPERTY_NAMES)
    if unknown:
        raise ValueError(f"unknown properties {sorted(unknown)}; known: {', '.join(PROPERTY_NAMES)}")
    subject = Subject(
        verifier=verifier,
        batch=batch if batch is not None else as_batch(verifier),
        pipeline=pipeline if pipeline is not None else ReferencePipeline(),
        scale=scale,
        seed=seed,
        own_randomness=own_randomness,
    )
    results: list[PropertyResult] = []
    for name, prop in PROPERTIES:
        if only is not None and name not in only:
            continue
        try:
            result = prop(subject)
        except Exception as exc:  # noqa: BLE001 - a broken subject must not crash the runner
            result = PropertyResult(
                name, False, 0, ALPHA_BUDGET.get(name, 0.0), 0.0, f"raised {type(exc).__name__}: {exc}"
            )
        results.append(result)
        if fail_fast and not result.passed:
            break
    return results


def reference_results(**kwargs: Any) -> list[PropertyResult]:
    """:func:`run_properties` on the reference verifier (single and batch forms)."""
    return run_properties(verify_sampled, verify_sampled_batch, ReferencePipeline(), **kwargs)
