"""KV rollback at the decode level: after every cycle (rejections included), the next cycle's
target logits equal those of a fresh forward over the committed prefix plus the scored span.

Every draft source is wrapped in a recorder of its ``score`` calls. Cycle i scores the committed
history H_i (prompt + everything emitted by cycles < i, from the trace) followed by the drafts; a
fresh model on a fresh cache, given H_i + drafts in one pass, must give the same rows. A cache that
kept a rejected draft, lost a committed token, or (layer skip) mixed layers of different spans
gives different logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.support.fake_tokenizer import FakeTokenizer
from tests.support.tolerances import assert_within, forward_spread
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import DraftContext, DraftSource, LayerSkipDraft, ModelDraft, NgramDraft, Proposal
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams

F32 = npt.NDArray[np.float32]


class Recorder:
    """A DraftSource that delegates and records each ``score`` call: (pending, drafts, logits)."""

    def __init__(self, inner: DraftSource) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[list[int], list[int], F32]] = []

    @property
    def draft_passes(self) -> int:
        return self.inner.draft_passes

    @property
    def draft_time_s(self) -> float:
        return self.inner.draft_time_s

    def start(self, context: DraftContext) -> None:
        self.inner.start(context)

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        return self.inner.propose(history, k)

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        logits = self.inner.score(pending, drafts)
        self.calls.append((list(pending), list(drafts), np.array(logits)))
        return logits


def check_rollback(
    model: Model, prompt: tuple[int, ...], draft: DraftSource, params: SamplingParams, n: int, k: int, samples: int
) -> int:
    """Run, then replay every cycle on a fresh cache; returns the number of cycles with a rejection.
    ``samples``: Monte Carlo samples of the tolerances: every cycle needs its own, so fewer than the
    default (cheaper; the tolerance widens by tolerances.tolerance_factor: 31 at 16, 107 at 8)."""
    recorder = Recorder(draft)
    tok: Any = FakeTokenizer()
    result = speculative_generate(
        model, tok, GenerationRequest(prompt, params, max_tokens=n, seed=5), recorder, SpeculativeOptions(k=k)
    )
    assert len(recorder.calls) == len(result.cycles)
    history = list(prompt)
    rejections = 0
    for cycle, (pending, drafts, logits) in zip(result.cycles, recorder.calls):
        assert drafts == list(cycle.drafted)
        assert history[len(history) - len(pending) :] == pending
        fresh = model.forward([*history, *drafts], model.new_cache(len(history) + len(drafts))).logits
        want = fresh[len(history) - 1 :]  # [len(drafts) + 1, V]
        assert logits.shape == want.shape
        # cached scoring vs a fresh pass: two float32 evaluations of one forward, each element within
        # the derived tolerance of tests/support/tolerances.py (2 lambda sigma, its float32 rounding spread)
        spread = forward_spread(model, (*history, *drafts), head_rows=len(want), samples=samples).logits
        assert spread is not None
        assert_within(logits, want, spread.tolerance, "cached scoring vs fresh logits")
        assert np.array_equal(np.argmax(logits, axis=-1), np.argmax(want, axis=-1))
        rejections += cycle.kind == "repair"
        history.extend(cycle.emitted)
    assert tuple(history[len(prompt) :]) == result.generation.ids
    return rejections


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, top_k=8)], ids=["greedy", "sampled"]
)
def test_rollback_tiny_every_source(tiny_gguf: Callable[..., Path], params: SamplingParams) -> None:
    path = tiny_gguf("llama", n_vocab=32, n_layer=4, weight_scale=1.0, seed=3)
    model = Model.load(path)
    total = 0
    for draft in (
        NgramDraft(),
        ModelDraft(model, "self", params=SamplingParams(temperature=1.3, top_k=5)),
        LayerSkipDraft(4, 1),
        LayerSkipDraft(4, 2),
    ):
        for prompt in ((1, 2, 3, 1, 2, 3), (4, 5, 6, 7)):
            total += check_rollback(model, prompt, draft, params, 24, 4, samples=16)
    assert total > 10, "too few rejections to exercise rollback"


def test_rollback_tiny_gemma3(tiny_gguf: Callable[..., Path]) -> None:
    """gemma3 (sliding-window layers, window 4): rollback across the window edge."""
    path = tiny_gguf("gemma3", n_vocab=32, n_layer=3, sliding_window=4, weight_scale=1.0, seed=4)
    model = Model.load(path)
    total = sum(
        check_rollback(model, (1, 2, 3, 1, 2, 3), draft, SamplingParams(temperature=0.0), 20, 3, samples=16)
        for draft in (NgramDraft(), LayerSkipDraft(3, 1), LayerSkipDraft(3, 2))
    )
    assert total > 0


@pytest.mark.model
def test_rollback_smollm2_layerskip(smollm2_model: Model, golden: dict[str, Any]) -> None:
    """The real model, layer-skip drafting (the draft writes the target's cache): rejections abound."""
    prompt = tuple(int(t) for t in golden["models"]["smollm2-135m-q4_1"]["greedy"][0]["prompt_ids"])
    rejections = check_rollback(
        smollm2_model,
        prompt,
        LayerSkipDraft(smollm2_model.config.n_layer, 20),
        SamplingParams(temperature=0.0),
        6,
        3,
        samples=8,
    )
    assert rejections > 0
