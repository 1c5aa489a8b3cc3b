"""Speculative decoding on the engine: the same trace as on the reference, cycle by cycle.

The loop is reference/decode.py's; only the model (FastModel) and the law (engine.sampling's,
bit-identical) change. Same draft, same seed -> the same drafts, accepted counts, verdict kinds,
tokens and emitted spans. Tiny random models keep the reference side fast; the smollm2 tokenizer
only renders ids (< 64) and supplies EOG ids, identically for both sides.
"""

from __future__ import annotations

from typing import Any

import pytest

from verispec.engine import sampling as fast_sampling
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, SpeculativeResult, speculative_generate
from verispec.reference.drafts import make_draft, parse_draft_spec
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


def _trace(result: SpeculativeResult) -> list[tuple[Any, ...]]:
    return [(c.k, c.drafted, c.accepted, c.kind, c.token, c.emitted) for c in result.cycles]


@pytest.mark.model
@pytest.mark.parametrize("draft_spec", ["ngram", "layerskip:1", "self"])
@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0.0), SamplingParams(temperature=1.5, top_k=40, top_p=0.95)]
)
def test_speculative_trace_identical(
    tiny_gguf: Any, smollm2_tokenizer: Any, draft_spec: str, params: SamplingParams
) -> None:
    path = tiny_gguf(
        "gemma3", sliding_window=3, n_vocab=64, context_length=96, weight_scale=0.3
    )  # flat enough laws that sampled drafts get rejected and repaired
    ref, fast = Model.load(path), FastModel.load(path)
    prompt = (5, 9, 12, 5, 9, 12, 5, 9, 12, 5, 9)  # repetitive: the n-gram draft has something to find
    request = GenerationRequest(prompt, params=params, max_tokens=24, seed=42)
    options = SpeculativeOptions(k=3)
    want = speculative_generate(ref, smollm2_tokenizer, request, make_draft(parse_draft_spec(draft_spec), ref), options)
    draws: list[int] = []

    def draw(probs: Any, rng: Any) -> int:  # the engine's draw, counted: a plain cycle's token comes from it
        draws.append(fast_sampling.sample(probs, rng))
        return draws[-1]

    got = speculative_generate(
        fast,
        smollm2_tokenizer,
        request,
        make_draft(parse_draft_spec(draft_spec), fast),
        options,
        law=fast_sampling.target_distribution,
        draw=draw,
    )
    assert _trace(got) == _trace(want)
    assert draws == [c.token for c in got.cycles if c.kind == "plain"]
    assert got.generation.ids == want.generation.ids
    assert any(c.drafted for c in want.cycles)  # drafting happened: the comparison covers verification
    assert any(c.accepted for c in want.cycles)  # and acceptance
    if draft_spec == "ngram":
        assert any(c.kind == "repair" for c in want.cycles)  # and rejection + repair
