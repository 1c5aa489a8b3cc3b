"""The deterministic properties (alpha 0, power 1): the contract, verdicts in range with their mass,
the protocol's boundaries bit for bit, its cells, the exact lossless law, batch == single."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from verispec.reference.errors import VerificationError
from verispec.reference.speculative import BatchVerifier, Probs2D, Verdict, residual_law
from verispec.spec import exact
from verispec.spec.properties.cases import (
    MAX_FAILURES,
    SHAPES,
    draw_drafts,
    property_result,
    small_case,
    verdict_or_error,
)
from verispec.spec.report import VALID_INPUT_FAILURE
from verispec.spec.subject import PropertyResult, Subject


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
    outcome = verdict_or_error(subject, p, q, [1], [0.5, 0.5])
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
    return property_result("contract", failures, len(bad) + 1)


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
        outcome = verdict_or_error(subject, p, q, drafts, uniforms)
        problem = outcome if isinstance(outcome, str) else _mass_failures(p, q, drafts, outcome)
        if problem:
            failures.append(f"{label}, drafts={drafts}, u={uniforms}: {problem}")
            if len(failures) >= MAX_FAILURES:
                break
    return property_result("range_and_mass", failures, len(cases))


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
        outcome = verdict_or_error(subject, p, q, drafts, [float(u) for u in us])
        got = outcome if isinstance(outcome, str) else (outcome.accepted, outcome.token, outcome.kind)
        if got != expected:
            failures.append(
                f"p={p.tolist()}, q={q.tolist()}, drafts={drafts}, u={[str(u) for u in us]}: "
                f"protocol gives {expected}, verifier gives {got}"
            )
            if len(failures) >= MAX_FAILURES:
                break
    return property_result("protocol_boundaries", failures, cases)


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
    return property_result("protocol_cells", failures, len(cases))


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
    return property_result("exact_lossless", failures, len(cases))


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
            outcome = verdict_or_error(subject, p, q, drafts[item].tolist(), uniforms[item].tolist())
            got = (int(result.accepted[item]), int(result.token[item]), bool(result.is_bonus[item]))
            want = outcome if isinstance(outcome, str) else (outcome.accepted, outcome.token, outcome.kind == "bonus")
            if got != want:
                failures.append(
                    f"item with drafts={drafts[item].tolist()}, u={uniforms[item].tolist()}: batch {got}, single {want}"
                )
                break
    return property_result("batch_matches_sequential", failures, total)
