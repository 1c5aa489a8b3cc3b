"""Lossless, exactly: Hypothesis properties over exact Fraction laws (spec/exact.py).

- one verification with fixed rows: the emitted tokens, completed with target draws, are
  distributed as prod_j p_j (so the first emitted token is distributed as p_0);
- toy autoregressive targets and drafts (vocab <= 4, k <= 3, m <= 3): the first m emitted tokens
  are distributed exactly as m tokens sampled from the target;
- processors: with q the exact law the draft sampled from (its own processors, greedy included),
  the law equals the PROCESSED target law; with any other q it can differ (a counterexample);
- the float reference follows the protocol bit for bit on dyadic inputs.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec import exact

MODES = ("independent", "equal", "disjoint", "one_hot_p", "one_hot_q")


@st.composite
def rows(draw: st.DrawFn, vocab: int, support: frozenset[int] | None = None) -> exact.Row:
    """A probability row over ``vocab`` ids from small integer weights (zeros, ties, one-hot)."""
    allowed = sorted(support) if support is not None else list(range(vocab))
    weights = [0] * vocab
    for token in allowed:
        weights[token] = draw(st.integers(0, 4))
    if sum(weights) == 0:
        weights[draw(st.sampled_from(allowed))] = 1
    return exact.exact_row(weights)


@st.composite
def row_pairs(draw: st.DrawFn, vocab: int) -> tuple[exact.Row, exact.Row]:
    """(p, q) with a structure: independent, equal, disjoint supports, one-hot p or q."""
    mode = draw(st.sampled_from(MODES))
    if mode == "equal":
        p = draw(rows(vocab))
        return p, p
    if mode == "disjoint" and vocab >= 2:
        in_p = frozenset(draw(st.sets(st.integers(0, vocab - 1), min_size=1, max_size=vocab - 1)))
        return draw(rows(vocab, in_p)), draw(rows(vocab, frozenset(range(vocab)) - in_p))
    if mode == "one_hot_p":
        return exact.exact_row(np.eye(vocab, dtype=np.int64)[draw(st.integers(0, vocab - 1))]), draw(rows(vocab))
    if mode == "one_hot_q":
        return draw(rows(vocab)), exact.exact_row(np.eye(vocab, dtype=np.int64)[draw(st.integers(0, vocab - 1))])
    return draw(rows(vocab)), draw(rows(vocab))


@st.composite
def fixed_rows(draw: st.DrawFn) -> tuple[list[exact.Row], list[exact.Row]]:
    """Target rows p_0..p_k and draft rows q_0..q_{k-1} (vocab <= 4, k <= 3)."""
    vocab, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    pairs = [draw(row_pairs(vocab)) for _ in range(k)]
    return [p for p, _ in pairs] + [draw(rows(vocab))], [q for _, q in pairs]


@st.composite
def toy_models(draw: st.DrawFn) -> tuple[exact.Model, exact.Model, int]:
    """Autoregressive target and draft: the row depends on the prefix through a small table."""
    vocab = draw(st.integers(1, 4))
    table = [draw(row_pairs(vocab)) for _ in range(draw(st.integers(1, 3)))]

    def index(prefix: exact.Outcome) -> int:
        return (len(prefix) + 2 * sum(prefix)) % len(table)

    return (lambda prefix: table[index(prefix)][0]), (lambda prefix: table[index(prefix)][1]), vocab


@settings(max_examples=examples(200))
@given(fixed_rows())
def test_one_verification_is_lossless(case: tuple[list[exact.Row], list[exact.Row]]) -> None:
    p, q = case
    emitted = exact.emitted_law_fixed_rows(p, q)
    assert exact.extend_with_target(emitted, p) == exact.product_law(p)
    first: dict[int, Fraction] = {}
    for seq, mass in emitted.items():
        first[seq[0]] = first.get(seq[0], Fraction(0)) + mass
    assert first == {t: m for t, m in enumerate(p[0]) if m}


@settings(max_examples=examples(200))
@given(fixed_rows())
def test_enumerated_verdict_law_equals_closed_form(case: tuple[list[exact.Row], list[exact.Row]]) -> None:
    p, q = case
    law = exact.verdict_law_fixed_rows(p, q)
    assert law == exact.verdict_law_closed_form(p, q)
    assert sum(law.values()) == 1


@settings(max_examples=examples(60), deadline=None)
@given(toy_models(), st.integers(1, 3), st.integers(1, 3))
def test_first_m_tokens_autoregressive_are_the_target_law(
    models: tuple[exact.Model, exact.Model, int], k: int, m: int
) -> None:
    target, draft, _vocab = models
    law = exact.first_tokens_law(lambda prefix: exact.speculative_step_law(target, draft, k, prefix), m)
    assert law == exact.target_sequence_law(target, m)


def test_a_wrong_q_breaks_the_law() -> None:
    """The spec's precondition has teeth: verify with a q the draft did not sample from."""
    p, true_q, claimed_q = exact.exact_row([1, 1]), exact.exact_row([1, 0]), exact.exact_row([1, 1])
    law = exact.speculative_step_law(
        lambda _: p, lambda _: true_q, 1, (), rows=lambda _prefix, _drafts: ([p, p], [claimed_q])
    )
    first: dict[int, Fraction] = {}
    for seq, mass in law.items():
        first[seq[0]] = first.get(seq[0], Fraction(0)) + mass
    assert (
        first == {0: Fraction(1)} != {0: p[0], 1: p[1]}
    )  # the draft always says 0 and p/q_claimed = 1 always accepts it


@st.composite
def processor_case(draw: st.DrawFn) -> tuple[SamplingParams, SamplingParams, np.ndarray, np.ndarray, tuple[int, ...]]:
    vocab = draw(st.integers(2, 4))

    def params() -> SamplingParams:
        return SamplingParams(
            temperature=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
            top_k=draw(st.integers(0, vocab)),
            top_p=draw(st.sampled_from([1.0, 0.9, 0.5])),
            min_p=draw(st.sampled_from([0.0, 0.2])),
            repeat_penalty=draw(st.sampled_from([1.0, 1.5])),
            repeat_last_n=-1,
        )

    logits = st.integers(-6, 6).map(lambda v: v / 2)
    shape = st.lists(st.lists(logits, min_size=vocab, max_size=vocab), min_size=3, max_size=3)
    history = tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=2)))
    return params(), params(), np.array(draw(shape), dtype=np.float64), np.array(draw(shape), dtype=np.float64), history


@settings(max_examples=examples(60), deadline=None)
@given(processor_case(), st.integers(1, 2))
def test_processed_target_law_is_kept_when_q_is_the_drafts_law(
    case: tuple[SamplingParams, SamplingParams, np.ndarray, np.ndarray, tuple[int, ...]], k: int
) -> None:
    target_params, draft_params, target_logits, draft_logits, history = case

    def model(logits: np.ndarray, params: SamplingParams) -> exact.Model:
        def row(prefix: exact.Outcome) -> exact.Row:
            last = prefix[-1] if prefix else 0
            values = logits[min(len(prefix), 2)] + 0.25 * last  # position- and token-dependent
            return exact.exact_row(target_distribution(values, list(history + prefix), params))

        return row

    target, draft = model(target_logits, target_params), model(draft_logits, draft_params)
    rule = exact.greedy_verdict_law if target_params.greedy else exact.protocol_verdict_law
    law = exact.first_tokens_law(lambda prefix: exact.speculative_step_law(target, draft, k, prefix, rule=rule), 2)
    assert law == exact.target_sequence_law(target, 2)


@st.composite
def dyadic_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[int], list[Fraction]]:
    vocab, k = draw(st.integers(1, 5)), draw(st.integers(1, 3))

    def dyadic_row() -> list[int]:
        cuts = sorted(draw(st.lists(st.integers(0, 64), min_size=vocab - 1, max_size=vocab - 1)))
        return [b - a for a, b in zip([0] + cuts, cuts + [64])]

    p = np.array([dyadic_row() for _ in range(k + 1)]) / 64.0
    q = np.array([dyadic_row() for _ in range(k)]) / 64.0
    drafts = [draw(st.sampled_from([t for t in range(vocab) if q[i, t] > 0])) for i in range(k)]
    uniforms = [Fraction(draw(st.integers(0, 63)), 64) for _ in range(k + 1)]
    return p, q, drafts, uniforms


@settings(max_examples=examples(300))
@given(dyadic_case())
def test_float_reference_is_the_exact_protocol_on_dyadic_inputs(
    case: tuple[np.ndarray, np.ndarray, list[int], list[Fraction]],
) -> None:
    p, q, drafts, uniforms = case
    P = [exact.exact_row(r, normalize=False) for r in p]
    Q = [exact.exact_row(r, normalize=False) for r in q]
    expected = exact.protocol_verdict(P, Q, tuple(drafts), uniforms)
    floats = [float(u) for u in uniforms]
    verdict = verify_sampled(p, q, drafts, floats)
    assert (verdict.accepted, verdict.token, verdict.kind) == expected
    batch = verify_sampled_batch(p, q, np.array([drafts]), np.array([floats]))
    assert (int(batch.accepted[0]), int(batch.token[0]), "bonus" if batch.is_bonus[0] else "repair") == expected


def test_first_tokens_law_handles_steps_that_emit_nothing() -> None:
    """A decoder that drops rejected steps re-drafts: the law is conditioned on emitting."""
    p, q = exact.exact_row([1, 1]), exact.exact_row([3, 1])

    def no_repair_step(_prefix: exact.Outcome) -> exact.Law:
        law: exact.Law = {}
        for x, qx in enumerate(q):
            accept = exact.accept_probability(p[x], qx)
            exact.add_to(law, (x,), qx * accept)
            exact.add_to(law, (), qx * (1 - accept))
        return law

    # accepted mass min(p, q) = [1/2, 1/4], renormalized: [2/3, 1/3]
    assert exact.first_tokens_law(no_repair_step, 1) == {(0,): Fraction(2, 3), (1,): Fraction(1, 3)}
