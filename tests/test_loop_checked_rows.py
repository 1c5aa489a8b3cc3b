"""The decode loop runs the row code the spec checks: a mutant of it breaks decoding.

``reference.decode.speculative_generate`` computes its target rows with
:func:`reference.speculative.target_rows` (the function :func:`~reference.speculative.speculative_rows`,
and so every spec property, vector and pipeline mutant, is built from) and picks its verifier with
:func:`~reference.speculative.verification_mode`. Each test below first shows the decode-level
check passing, then puts a mutant into ``reference.speculative`` (nowhere else) and shows the same
check failing: were the loop to recompute the rows itself, as it once did, the mutant would go
unseen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.support.fake_tokenizer import FakeTokenizer
from verispec.reference import speculative
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import ModelDraft, NgramDraft
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams, target_distribution

F64 = npt.NDArray[np.float64]
RowsFn = Callable[..., F64]

# Greedy with a repeat penalty: the target law depends on the history, so the rows must see the
# drafts before their position (spec/mutants.py: HistoryWithoutAcceptedDrafts).
PENALIZED = SamplingParams(temperature=0.0, repeat_penalty=1.8, repeat_last_n=64)
GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [(1, 2, 3, 1, 2, 3), (5, 6, 5, 6, 5), (7, 7, 7, 7), (0, 9, 4, 0, 9)]


def stale_history_rows(
    target_logits: Any,
    history: Sequence[int],
    drafts: Sequence[int],
    params: SamplingParams,
    law: Any = target_distribution,
) -> F64:
    """Mutant (spec/mutants.py HistoryWithoutAcceptedDrafts): every row sees the cycle's starting
    history, so a repeat penalty misses the drafts before the row's position."""
    logits = np.asarray(target_logits)
    return np.stack([law(logits[i], list(history), params) for i in range(len(drafts) + 1)])


def shifted_rows(
    target_logits: Any,
    history: Sequence[int],
    drafts: Sequence[int],
    params: SamplingParams,
    law: Any = target_distribution,
) -> F64:
    """Mutant: off by one position, row i scored with the logits of row i + 1 (the last repeated)."""
    logits = np.asarray(target_logits)
    k = len(drafts)
    return np.stack([law(logits[min(i + 1, k)], [*history, *drafts[:i]], params) for i in range(k + 1)])


@pytest.fixture
def tiny(tiny_gguf: Callable[..., Path]) -> Model:
    return Model.load(tiny_gguf("llama", n_vocab=32, n_layer=4, weight_scale=1.0, seed=3))


def _mismatches(model: Model, params: SamplingParams) -> list[str]:
    """Prompts and drafts for which speculative decoding differs from plain greedy decoding."""
    tok: Any = FakeTokenizer()
    bad = []
    for prompt in PROMPTS:
        request = GenerationRequest(prompt, params, max_tokens=16)
        plain = generate(model, tok, request)
        for draft in (NgramDraft(), ModelDraft(model, "self")):
            spec = speculative_generate(model, tok, request, draft, SpeculativeOptions(k=4))
            if spec.generation.ids != plain.ids:
                bad.append(f"{draft.name} {prompt}")
    return bad


@pytest.mark.parametrize(("mutant", "params"), [(stale_history_rows, PENALIZED), (shifted_rows, GREEDY)])
def test_a_row_mutant_breaks_greedy_equivalence(
    tiny: Model, monkeypatch: pytest.MonkeyPatch, mutant: RowsFn, params: SamplingParams
) -> None:
    assert _mismatches(tiny, params) == []
    monkeypatch.setattr(speculative, "target_rows", mutant)
    assert _mismatches(tiny, params) != [], "the decode loop did not run reference.speculative.target_rows"


def test_the_spec_sees_the_same_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant the loop runs is also what the spec's pipeline (speculative_rows) computes."""
    rng = np.random.default_rng(0)
    t_logits, d_logits = rng.normal(size=(3, 6)), rng.normal(size=(2, 6))
    history, drafts = [1, 2], [3, 4]  # drafts not in the history: the penalty must see them
    sampled = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.8)
    p_ok, _ = speculative.speculative_rows(t_logits, d_logits, history, drafts, sampled, sampled)
    monkeypatch.setattr(speculative, "target_rows", stale_history_rows)
    p_bad, _ = speculative.speculative_rows(t_logits, d_logits, history, drafts, sampled, sampled)
    assert not np.array_equal(p_ok, p_bad)


def test_verification_mode_decides_the_loop(tiny: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampled target verified greedily (mutant of verification_mode) stops reading uniforms:
    the loop's trace for a seed changes; with the real mode it is reproducible."""
    tok: Any = FakeTokenizer()
    request = GenerationRequest(
        (1, 2, 3, 1, 2, 3), SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), max_tokens=24, seed=11
    )

    def run() -> tuple[int, ...]:
        return speculative_generate(
            tiny, tok, request, ModelDraft(tiny, "self"), SpeculativeOptions(k=3)
        ).generation.ids

    first = run()
    assert run() == first
    monkeypatch.setattr(speculative, "verification_mode", lambda target, draft: "greedy")
    assert run() != first, "the decode loop did not ask reference.speculative.verification_mode"
