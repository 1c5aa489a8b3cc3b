"""reference/speculative.py: the protocol on hand-checked cases, contract errors, batch == single,
the generator forms, and the logits-to-rows pipeline."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from verispec.reference import speculative
from verispec.reference.errors import VerificationError
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.speculative import (
    Verdict,
    speculative_rows,
    verify_greedy,
    verify_sampled,
    verify_sampled_batch,
    verify_sampled_batch_rng,
    verify_sampled_rng,
    verify_step,
)
from verispec.spec.properties import SHAPES, draw_drafts, small_case

P = np.array([[0.5, 0.25, 0.25, 0.0], [0.25, 0.25, 0.25, 0.25]])
Q = np.array([[0.25, 0.5, 0.25, 0.0]])


def test_accept_iff_u_q_below_p() -> None:
    # draft 1: p/q = 1/2. u = 0.49 accepts; u = 0.5 hits the boundary (0.25 < 0.25 is false): reject
    assert verify_sampled(P, Q, [1], [0.49, 0.0]) == Verdict(1, 0, "bonus")
    assert verify_sampled(P, Q, [1], [0.5, 0.0]) == Verdict(0, 0, "repair")
    # draft 0: p > q always accepts, even at the top uniform
    assert verify_sampled(P, Q, [0], [float(np.nextafter(1.0, 0.0)), 0.99]).accepted == 1


def test_repair_draws_from_the_normalized_residual() -> None:
    # residual max(p - q, 0) = [0.25, 0, 0, 0]: every repair is token 0, whatever the uniform
    for u in (0.0, 0.5, 0.999):
        assert verify_sampled(P, Q, [1], [0.9, u]) == Verdict(0, 0, "repair")
    p = np.array([[0.5, 0.0, 0.5], [1.0, 0.0, 0.0]])
    q = np.array([[0.0, 1.0, 0.0]])  # disjoint supports: always reject, residual = p
    assert verify_sampled(p, q, [1], [0.0, 0.49]) == Verdict(0, 0, "repair")
    assert verify_sampled(p, q, [1], [0.0, 0.5]) == Verdict(0, 2, "repair")


def test_bonus_draws_from_the_last_row_by_inverse_cdf() -> None:
    p = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.25, 0.25, 0.5]])
    q = np.array([[1.0, 0.0, 0.0, 0.0]])
    assert [verify_sampled(p, q, [0], [0.3, u]).token for u in (0.0, 0.25, 0.4999, 0.5, 0.9)] == [1, 2, 2, 3, 3]


def test_p_equal_q_never_rejects() -> None:
    row = np.array([0.1, 0.2, 0.3, 0.4])
    p, q = np.stack([row, row, row]), np.stack([row, row])
    for u in (0.0, 0.5, float(np.nextafter(1.0, 0.0))):
        assert verify_sampled(p, q, [3, 0], [u, u, 0.5]).kind == "bonus"


def test_zero_residual_after_rejection_draws_from_p() -> None:
    tiny = 5e-324  # 0.75 * tiny rounds back to tiny, so u * q(x) < p(x) fails although p == q
    row = np.array([0.5, 0.25, 0.125, 0.125, 0, 0, 0, 0, tiny])
    verdict = verify_sampled(np.stack([row, row]), row[None], [8], [0.75, 0.3])
    assert verdict == Verdict(0, 0, "repair")
    batch = verify_sampled_batch(np.stack([row, row]), row[None], np.array([[8]]), np.array([[0.75, 0.3]]))
    assert (int(batch.accepted[0]), int(batch.token[0]), bool(batch.is_bonus[0])) == (0, 0, False)


def test_emitted() -> None:
    assert Verdict(2, 7, "repair").emitted([4, 5, 6]) == [4, 5, 7]
    assert Verdict(3, 1, "bonus").emitted([4, 5, 6]) == [4, 5, 6, 1]


@pytest.mark.parametrize(
    ("p", "q", "drafts", "uniforms", "needle"),
    [
        (P[:1], Q[:0], [], [0.5], "k >= 1"),
        (P * 0.9, Q, [1], [0.5, 0.5], "sums to"),
        (P, np.array([[-0.25, 1.25, 0.0, 0.0]]), [1], [0.5, 0.5], "negative"),
        (P, np.array([[0.25, 0.75, 0.0]]), [1], [0.5, 0.5], "vocab sizes disagree"),
        (P, Q, [3], [0.5, 0.5], "q = 0"),
        (P, Q, [4], [0.5, 0.5], "outside the vocabulary"),
        (P, Q, [1], [1.0, 0.5], "outside \\[0, 1\\)"),
        (P, Q, [1], [0.5], "k \\+ 1 = 2 uniforms"),
        (P[:1], Q, [1], [0.5, 0.5], "k \\+ 1 = 2 rows"),
        (np.where(P == 0.0, np.nan, P), Q, [1], [0.5, 0.5], "non-finite"),
    ],
)
def test_contract_violations(
    p: np.ndarray, q: np.ndarray, drafts: list[int], uniforms: list[float], needle: str
) -> None:
    with pytest.raises(VerificationError, match=needle):
        verify_sampled(p, q, drafts, uniforms)
    if len(drafts) == 1 and len(uniforms) == 2:
        with pytest.raises(VerificationError):
            verify_sampled_batch(p, q, np.array([drafts]), np.array([uniforms]))


def test_greedy_verification() -> None:
    logits = np.array([[0.0, 3.0, 3.0], [5.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert verify_greedy(logits, [1, 0]) == Verdict(2, 2, "bonus")
    assert verify_greedy(logits, [2, 0]) == Verdict(0, 1, "repair")  # tie: lowest id is the argmax
    assert verify_greedy(logits, [1, 2]) == Verdict(1, 0, "repair")
    with pytest.raises(VerificationError):
        verify_greedy(logits, [1, 3])
    with pytest.raises(VerificationError):
        verify_greedy(logits[:2], [1, 0])


@settings(max_examples=examples(100))
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.integers(1, 17),
    k=st.integers(1, 8),
    shape=st.sampled_from(SHAPES),
    bits=st.sampled_from([3, 6, 40]),
)
def test_batch_equals_single_for_the_same_draws(seed: int, vocab: int, k: int, shape: str, bits: int) -> None:
    rng = np.random.default_rng(seed)
    p, q = small_case(rng, vocab, k, shape, bits)
    drafts = draw_drafts(rng, q, 64)
    uniforms = rng.random((64, k + 1))
    uniforms[::7, -1] = np.nextafter(1.0, 0.0)
    shared = verify_sampled_batch(p, q, drafts, uniforms)
    per_item = verify_sampled_batch(np.repeat(p[None], 64, 0), np.repeat(q[None], 64, 0), drafts, uniforms)
    # the token work in chunks of 5 items (64 = 12 x 5 + 4: a short last chunk), as at large V
    with mock.patch.object(speculative, "BATCH_ROW_ELEMENTS", 5 * p.shape[-1]):
        chunked = verify_sampled_batch(p, q, drafts, uniforms)
    for n in range(64):
        single = verify_sampled(p, q, drafts[n].tolist(), uniforms[n].tolist())
        for batch in (shared, per_item, chunked):
            assert (int(batch.accepted[n]), int(batch.token[n]), bool(batch.is_bonus[n])) == (
                single.accepted,
                single.token,
                single.kind == "bonus",
            )


def test_generator_forms_read_k_plus_1_uniforms_each() -> None:
    rng = np.random.default_rng(3)
    p, q = small_case(rng, 5, 3, "independent")
    drafts = draw_drafts(rng, q, 200)
    singles = [verify_sampled_rng(p, q, d.tolist(), gen) for gen in [np.random.default_rng(11)] for d in drafts]
    batch = verify_sampled_batch_rng(p, q, drafts, np.random.default_rng(11))
    explicit = np.random.default_rng(11).random((200, 4))
    assert [(v.accepted, v.token) for v in singles] == list(zip(batch.accepted.tolist(), batch.token.tolist()))
    assert singles[5] == verify_sampled(p, q, drafts[5].tolist(), explicit[5].tolist())


def test_speculative_rows_use_history_plus_previous_drafts() -> None:
    rng = np.random.default_rng(5)
    t_logits, d_logits = rng.normal(size=(3, 6)), rng.normal(size=(2, 6))
    tp = SamplingParams(temperature=0.8, repeat_penalty=2.0, top_k=4)
    dp = SamplingParams(temperature=0.0)
    p, q = speculative_rows(t_logits, d_logits, [1], [2, 3], tp, dp)
    for i, hist in enumerate([[1], [1, 2], [1, 2, 3]]):
        np.testing.assert_array_equal(p[i], target_distribution(t_logits[i], hist, tp))
    for i, hist in enumerate([[1], [1, 2]]):
        np.testing.assert_array_equal(q[i], target_distribution(d_logits[i], hist, dp))
    assert set(np.unique(q)) <= {0.0, 1.0}  # a greedy draft's law is one-hot


def test_verify_step_dispatches_on_the_target_params() -> None:
    t_logits = np.array([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    d_logits = np.array([[0.0, 0.0, 5.0]])
    greedy = verify_step(t_logits, d_logits, [], [2], [0.0, 0.0], SamplingParams(temperature=0.0), SamplingParams())
    assert greedy == Verdict(0, 1, "repair")  # draft 2 is not the target's argmax 1
    sampled = verify_step(t_logits, d_logits, [], [2], [0.0, 0.99], SamplingParams(), SamplingParams())
    assert sampled.accepted == 1 and sampled.kind == "bonus"  # u = 0 accepts any x with p(x) > 0
