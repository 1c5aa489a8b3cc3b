"""k from the measured verify-cost curve: Leviathan's expected tokens per cycle over c(k+1)
(reference.drafts.best_k_for_cost), the engine's measured curve (engine/verify_cost.py), and
``--adaptive`` capping its k by it (AdaptiveK's ``cost``, wired in reference/decode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from verispec.engine import sampling as fast_sampling
from verispec.engine import verify_cost
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import AdaptiveK, best_k_for_cost, make_draft, parse_draft_spec
from verispec.reference.generate import GenerationRequest
from verispec.reference.sampling import SamplingParams


def _expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha^k, summed term by term (independent of the closed form)."""
    return sum(alpha**i for i in range(k + 1))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.9, 1.0])
def test_best_k_is_the_argmax_of_tokens_per_cost(alpha: float) -> None:
    cost = {2: 1.05, 3: 1.12, 4: 1.3, 5: 1.5, 6: 1.9, 7: 2.4, 8: 2.6, 9: 3.0}  # an int8-like curve
    rates = [1.0] + [_expected_tokens(alpha, k) / cost[k + 1] for k in range(1, 9)]
    want = max(range(9), key=lambda k: (rates[k], -k))
    assert best_k_for_cost(alpha, cost, 8) == want


def test_best_k_by_hand() -> None:
    assert best_k_for_cost(0.5, {2: 1.0, 3: 2.0}, 2) == 1  # k=1: 1.5 / 1; k=2: 1.75 / 2
    assert best_k_for_cost(0.5, {r: 1.0 for r in range(2, 10)}, 8) == 8  # free rows: draft all
    assert best_k_for_cost(0.9, {r: float(r) for r in range(2, 10)}, 8) == 0  # rows cost linearly: never pays
    assert best_k_for_cost(1.0, {2: 1.5}, 4) == 1  # rows not measured are not chosen


def test_adaptive_k_is_capped_by_the_cost_curve() -> None:
    cost = {2: 1.0, 3: 1.05, 4: 3.0, 5: 4.0}  # past 2 drafts a pass costs 3x: never worth it
    capped, free = AdaptiveK(4, cost=cost), AdaptiveK(4)
    for a in (capped, free):
        a.plain_step(1.0)
        for _ in range(4):
            k = a.next_k()
            a.update(k, k, 0.0, 1.0)  # everything accepted: the HF rule grows k by 2
    assert free.next_k() == 4
    assert capped.next_k() == best_k_for_cost(1.0, cost, 4) == 2


def test_engine_curve_is_measured_once_per_model(tiny_gguf: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = FastModel.load(tiny_gguf("llama"))
    calls: list[int] = []
    real = verify_cost.measure_curve

    def counting(m: FastModel, max_rows: int, repeats: int = 1) -> dict[int, float]:
        calls.append(max_rows)
        return real(m, max_rows, repeats=1)

    monkeypatch.setattr(verify_cost, "measure_curve", counting)
    curve = model.verify_cost_curve(4)
    assert sorted(curve) == [1, 2, 3, 4] and curve[1] == 1.0 and all(c >= 1.0 for c in curve.values())
    assert model.verify_cost_curve(3) == {r: curve[r] for r in (1, 2, 3)}
    assert calls == [4]  # cached: fewer rows reuse the measurement
    model.verify_cost_curve(6)
    assert calls == [4, 6]  # more rows: measured again


@pytest.mark.model  # the smollm2 tokenizer renders the ids
def test_adaptive_decode_on_the_engine_uses_the_curve_and_stays_lossless(
    tiny_gguf: Any, smollm2_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = FastModel.load(tiny_gguf("llama", n_vocab=64, context_length=96))
    asked: list[int] = []

    def flat_curve(rows: int) -> dict[int, float]:
        asked.append(rows)
        return {r: 1.0 for r in range(1, rows + 1)}

    monkeypatch.setattr(model, "verify_cost_curve", flat_curve)
    prompt = (5, 9, 12, 5, 9, 12, 5, 9, 12, 5, 9)
    request = GenerationRequest(prompt, params=SamplingParams(temperature=0.0), max_tokens=16, seed=1)
    plain = speculative_generate(
        model,
        smollm2_tokenizer,
        request,
        make_draft(parse_draft_spec("ngram"), model),
        SpeculativeOptions(k=3),
        law=fast_sampling.target_distribution,
    )
    adaptive = speculative_generate(
        model,
        smollm2_tokenizer,
        request,
        make_draft(parse_draft_spec("ngram"), model),
        SpeculativeOptions(k=3, adaptive=True),
        law=fast_sampling.target_distribution,
    )
    assert asked == [4]  # k + 1 rows
    assert adaptive.generation.ids == plain.generation.ids  # greedy: lossless whatever k is chosen
