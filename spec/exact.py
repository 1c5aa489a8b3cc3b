"""What "lossless" means, in exact arithmetic (``fractions.Fraction``).

Laws are dicts from outcomes to exact probabilities. Three layers:

1. One verification with fixed rows: the protocol's accept probability ``min(1, p(x)/q(x))`` and
   repair law ``normalize((p - q)^+)`` (p itself when the residual is all zero), the law of the
   verdict given the drafts, and (enumerating draft paths x ~ q) the law of the emitted tokens.
2. The protocol itself, exactly: :func:`protocol_verdict` maps given uniforms to a verdict with
   rational comparisons. For dyadic inputs (every value a multiple of a small power of two) all
   float64 operations of the protocol are exact, so the float reference must agree with it bit
   for bit, boundaries included.
3. Autoregressive toys: a model is a function prefix -> row. :func:`first_tokens_law` gives the
   exact law of the first m emitted tokens of speculative decoding (enumerating draft paths at
   every step); the claim is that it equals :func:`target_sequence_law`, the law of sampling the
   target token by token.

The claim that q must be the EXACT law the draft sampled from is built in: draft paths are
weighted by the draft's true law, and the verification is given rows by a separate function, so a
pipeline that hands the verifier another q (raw logits, softmax of a greedy draft, ...) is scored
by what it really does.

Independent oracle by design: written from spec/protocol.md alone and never importing reference,
it carries its own draw (:func:`inverse_cdf_exact`) and residual rule in exact rationals, so a
mistake in the float reference (reference.sampling.inverse_cdf, reference.speculative.residual_law)
cannot hide in both.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Literal, TypeVar

Row = tuple[Fraction, ...]
Outcome = tuple[int, ...]
Law = dict[Outcome, Fraction]
Kind = Literal["repair", "bonus"]
VerdictKey = tuple[int, int, Kind]  # (accepted, token, kind)
VerdictLaw = dict[VerdictKey, Fraction]
Model = Callable[[Outcome], Row]  # prefix (tokens emitted so far) -> the law of the next token
# (target rows [k+1], draft rows [k], drafts) -> law of the verdict given those drafts
VerifyLaw = Callable[[Sequence[Row], Sequence[Row], Outcome], VerdictLaw]
# (prefix, drafts) -> (target rows [k+1], draft rows [k]) handed to the verification
RowsFn = Callable[[Outcome, Outcome], tuple[Sequence[Row], Sequence[Row]]]

K = TypeVar("K")
ZERO = Fraction(0)
ONE = Fraction(1)


# -----------------------------------------------------------------------------------------------
# rows


def exact_row(values: Iterable[float | int | Fraction], *, normalize: bool = True) -> Row:
    """A row of exact Fractions (floats convert exactly); normalized to sum 1 when asked."""
    row = tuple(Fraction(v) for v in values)
    if any(v < 0 for v in row):
        raise ValueError(f"negative probability in {row}")
    if not normalize:
        return row
    total = sum(row, ZERO)
    if total <= 0:
        raise ValueError("row has zero mass")
    return tuple(v / total for v in row)


def add_to(law: dict[K, Fraction], key: K, mass: Fraction) -> None:
    """law[key] += mass, skipping zero masses (so laws compare equal as dicts)."""
    if mass:
        law[key] = law.get(key, ZERO) + mass


def total_variation(a: Mapping[K, Fraction], b: Mapping[K, Fraction]) -> Fraction:
    """TV distance between two laws: half the L1 distance, exactly."""
    keys = set(a) | set(b)
    return sum((abs(a.get(key, ZERO) - b.get(key, ZERO)) for key in keys), ZERO) / 2


# -----------------------------------------------------------------------------------------------
# one verification, fixed rows


def accept_probability(p_x: Fraction, q_x: Fraction) -> Fraction:
    """min(1, p(x)/q(x)) for a drafted token (q(x) > 0)."""
    return ONE if p_x >= q_x else p_x / q_x


def repair_law(p_row: Row, q_row: Row) -> Row:
    """normalize((p - q)^+); p itself when the residual is all zero (then no rejection can occur)."""
    residual = tuple(max(ZERO, a - b) for a, b in zip(p_row, q_row))
    mass = sum(residual, ZERO)
    if mass == 0:
        total = sum(p_row, ZERO)
        return tuple(v / total for v in p_row)
    return tuple(v / mass for v in residual)


def protocol_verdict_law(p_rows: Sequence[Row], q_rows: Sequence[Row], drafts: Outcome) -> VerdictLaw:
    """Law of the verdict of the reference protocol given fixed rows and drafts."""
    k = len(drafts)
    law: VerdictLaw = {}
    reach = ONE  # P(drafts[:i] all accepted)
    for i, x in enumerate(drafts):
        accept = accept_probability(p_rows[i][x], q_rows[i][x])
        reject = reach * (ONE - accept)
        if reject:
            for token, mass in enumerate(repair_law(p_rows[i], q_rows[i])):
                add_to(law, (i, token, "repair"), reject * mass)
        reach *= accept
    if reach:
        total = sum(p_rows[k], ZERO)
        for token, mass in enumerate(p_rows[k]):
            add_to(law, (k, token, "bonus"), reach * mass / total)
    return law


def greedy_verdict_law(p_rows: Sequence[Row], q_rows: Sequence[Row], drafts: Outcome) -> VerdictLaw:
    """Law (a point mass) of greedy verification: accept while x == argmax p (lowest id)."""
    for i, x in enumerate(drafts):
        best = argmax(p_rows[i])
        if x != best:
            return {(i, best, "repair"): ONE}
    return {(len(drafts), argmax(p_rows[len(drafts)]), "bonus"): ONE}


def argmax(row: Sequence[Fraction]) -> int:
    """Index of the first maximum (lowest id on ties)."""
    best = 0
    for i, value in enumerate(row):
        if value > row[best]:
            best = i
    return best


def draft_paths(q_rows_for: Callable[[Outcome], Row], k: int, vocab: int) -> Iterable[tuple[Outcome, Fraction]]:
    """Every draft path x_1..x_k with positive probability under the draft's TRUE law.

    ``q_rows_for(x_prefix)`` is the law of the next draft token after ``x_prefix``.
    """

    def extend(prefix: Outcome, mass: Fraction) -> Iterable[tuple[Outcome, Fraction]]:
        if len(prefix) == k:
            yield prefix, mass
            return
        row = q_rows_for(prefix)
        for token in range(vocab):
            if row[token]:
                yield from extend(prefix + (token,), mass * row[token])

    yield from extend((), ONE)


def emitted_law_fixed_rows(p_rows: Sequence[Row], q_rows: Sequence[Row], rule: VerifyLaw = protocol_verdict_law) -> Law:
    """Law of the emitted tokens (accepted drafts + token) of ONE verification with fixed rows,
    drafts drawn x_i ~ q_i independently (enumerating all V^k draft paths)."""
    k, vocab = len(q_rows), len(p_rows[0])
    law: Law = {}
    for drafts, path_mass in draft_paths(lambda prefix: q_rows[len(prefix)], k, vocab):
        for (accepted, token, _kind), mass in rule(p_rows, q_rows, drafts).items():
            add_to(law, drafts[:accepted] + (token,), path_mass * mass)
    return law


def verdict_law_fixed_rows(p_rows: Sequence[Row], q_rows: Sequence[Row]) -> VerdictLaw:
    """Law of the verdict (accepted, token, kind) with fixed rows, by enumerating draft paths."""
    k, vocab = len(q_rows), len(p_rows[0])
    law: VerdictLaw = {}
    for drafts, path_mass in draft_paths(lambda prefix: q_rows[len(prefix)], k, vocab):
        for key, mass in protocol_verdict_law(p_rows, q_rows, drafts).items():
            add_to(law, key, path_mass * mass)
    return law


def verdict_law_closed_form(p_rows: Sequence[Row], q_rows: Sequence[Row]) -> VerdictLaw:
    """The same law without enumeration (for k up to 8 and larger V): with beta_i =
    sum_x min(p_i(x), q_i(x)) (the acceptance probability at row i),
    P(a = i, repair t) = beta_0..beta_{i-1} (1 - beta_i) repair_i(t),  P(a = k, bonus t) = prod beta * p_k(t).
    """
    k = len(q_rows)
    law: VerdictLaw = {}
    reach = ONE
    for i in range(k):
        beta = sum((min(a, b) for a, b in zip(p_rows[i], q_rows[i])), ZERO)
        for token, mass in enumerate(repair_law(p_rows[i], q_rows[i])):
            add_to(law, (i, token, "repair"), reach * (ONE - beta) * mass)
        reach *= beta
    for token, mass in enumerate(p_rows[k]):
        add_to(law, (k, token, "bonus"), reach * mass)
    return law


def extend_with_target(law: Law, p_rows: Sequence[Row]) -> Law:
    """Complete each emitted sequence to length k+1 with fresh target draws y_j ~ p_j.

    For fixed rows, "lossless" means: the result is the product law prod_j p_j(y_j).
    """
    length = len(p_rows)
    out: Law = {}
    for seq, mass in law.items():
        tails: list[tuple[Outcome, Fraction]] = [((), ONE)]
        for j in range(len(seq), length):
            tails = [(t + (y,), m * p_rows[j][y]) for t, m in tails for y in range(len(p_rows[j])) if p_rows[j][y]]
        for tail, tail_mass in tails:
            add_to(out, seq + tail, mass * tail_mass)
    return out


def product_law(rows: Sequence[Row]) -> Law:
    """The law of independent draws y_j ~ rows[j]."""
    law: Law = {(): ONE}
    for row in rows:
        law = {seq + (y,): m * row[y] for seq, m in law.items() for y in range(len(row)) if row[y]}
    return law


# -----------------------------------------------------------------------------------------------
# the protocol, exactly


def protocol_verdict(
    p_rows: Sequence[Row], q_rows: Sequence[Row], drafts: Outcome, uniforms: Sequence[Fraction]
) -> VerdictKey:
    """The random-draw protocol (spec/protocol.md) in rational arithmetic.

    For dyadic rows and uniforms (few mantissa bits) every float64 step of the protocol is exact,
    so a conforming float implementation returns exactly this verdict.
    """
    k = len(drafts)
    final_u = uniforms[k]
    for i, x in enumerate(drafts):
        if uniforms[i] * q_rows[i][x] < p_rows[i][x]:
            continue
        residual = tuple(max(ZERO, a - b) for a, b in zip(p_rows[i], q_rows[i]))
        weights = residual if any(residual) else tuple(p_rows[i])
        return (i, inverse_cdf_exact(weights, final_u), "repair")
    return (k, inverse_cdf_exact(tuple(p_rows[k]), final_u), "bonus")


def inverse_cdf_exact(weights: Sequence[Fraction], u: Fraction) -> int:
    """The first id t with u * total < cumsum[t] (exact)."""
    total = sum(weights, ZERO)
    running = ZERO
    for token, weight in enumerate(weights):
        running += weight
        if u * total < running:
            return token
    raise AssertionError("unreachable for u < 1 and total > 0")


# -----------------------------------------------------------------------------------------------
# autoregressive toys: the law of the first m emitted tokens


def speculative_step_law(
    target: Model,
    draft: Model,
    k: int,
    prefix: Outcome,
    *,
    rows: RowsFn | None = None,
    rule: VerifyLaw = protocol_verdict_law,
) -> Law:
    """Law of the tokens emitted by ONE speculative step from ``prefix``.

    Drafts are drawn from the draft's true law ``draft(prefix + x_<i)``. The verification gets the
    rows ``rows(prefix, drafts)`` (default: the true target and draft rows) and follows ``rule``.
    """
    vocab = len(target(prefix))
    rows_fn: RowsFn = rows if rows is not None else default_rows(target, draft)
    law: Law = {}
    for drafts, path_mass in draft_paths(lambda x: draft(prefix + x), k, vocab):
        p_rows, q_rows = rows_fn(prefix, drafts)
        for (accepted, token, _kind), mass in rule(p_rows, q_rows, drafts).items():
            add_to(law, drafts[:accepted] + (token,), path_mass * mass)
    return law


def default_rows(target: Model, draft: Model) -> RowsFn:
    """Rows of a correct pipeline: p_i = target(prefix + x_<i) (i = 0..k), q_i = draft(prefix + x_<i)."""

    def rows(prefix: Outcome, drafts: Outcome) -> tuple[list[Row], list[Row]]:
        k = len(drafts)
        p_rows = [target(prefix + drafts[:i]) for i in range(k + 1)]
        q_rows = [draft(prefix + drafts[:i]) for i in range(k)]
        return p_rows, q_rows

    return rows


def first_tokens_law(step: Callable[[Outcome], Law], m: int) -> Law:
    """Exact law of the first m tokens emitted by repeating ``step`` (prefix -> emission law).

    A step may emit nothing (a broken decoder that drops rejected steps): with probability e it
    stays at the same prefix, so the law from that prefix is the nonempty part divided by 1 - e.
    """
    cache: dict[Outcome, Law] = {}

    def law_from(prefix: Outcome, need: int) -> Law:
        if need == 0:
            return {(): ONE}
        key = prefix  # need is determined by len(prefix) (need = m - len(prefix))
        if key in cache:
            return cache[key]
        emission = step(prefix)
        stay = emission.get((), ZERO)
        if stay == ONE:
            raise ValueError(f"the step never emits from prefix {prefix}")
        out: Law = {}
        for seq, mass in emission.items():
            if not seq:
                continue
            if len(seq) >= need:
                add_to(out, seq[:need], mass)
            else:
                for rest, rest_mass in law_from(prefix + seq, need - len(seq)).items():
                    add_to(out, seq + rest, mass * rest_mass)
        result = {seq: mass / (ONE - stay) for seq, mass in out.items()}
        cache[key] = result
        return result

    return law_from((), m)


def target_sequence_law(target: Model, m: int, prefix: Outcome = ()) -> Law:
    """Law of m tokens sampled from the target one at a time: prod_j target(y_<j)(y_j)."""
    law: Law = {(): ONE}
    for _ in range(m):
        nxt: Law = {}
        for seq, mass in law.items():
            row = target(prefix + seq)
            for y, py in enumerate(row):
                add_to(nxt, seq + (y,), mass * py)
        law = nxt
    return law


def all_sequences(vocab: int, length: int) -> Iterable[Outcome]:
    """Every token sequence of the given length (for exhaustive toy tables)."""
    return itertools.product(range(vocab), repeat=length)
