"""The speculative decode loop on tiny random GGUF models (fast): greedy equivalence with plain
decoding for every draft source, stopping inside an accepted span, the trace's bookkeeping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.fake_tokenizer import FakeTokenizer
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import DraftSource, LayerSkipDraft, ModelDraft, NgramDraft, make_draft, parse_draft_spec
from verispec.reference.errors import DraftError
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture
def tiny(tiny_gguf: Callable[..., Path]) -> tuple[Model, Path]:
    path = tiny_gguf("llama", n_vocab=32, n_layer=4, weight_scale=1.0, seed=3)
    return Model.load(path), path


def sources(model: Model, path: Path) -> list[DraftSource]:
    return [
        NgramDraft(),
        ModelDraft(model, "self"),
        LayerSkipDraft(model.config.n_layer, 1),
        LayerSkipDraft(model.config.n_layer, 3),
        make_draft(parse_draft_spec(f"model:{path}"), model),
    ]


PROMPTS = [(1, 2, 3, 1, 2, 3), (5,), (7, 7, 7, 7), (0, 9, 4, 0, 9)]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_equals_plain_every_source(tiny: tuple[Model, Path], k: int) -> None:
    model, path = tiny
    tok: Any = FakeTokenizer()
    for prompt in PROMPTS:
        request = GenerationRequest(prompt, GREEDY, max_tokens=20)
        plain = generate(model, tok, request)
        for draft in sources(model, path):
            for adaptive in (False, True):
                result = speculative_generate(model, tok, request, draft, SpeculativeOptions(k=k, adaptive=adaptive))
                assert result.generation.ids == plain.ids, (draft.name, prompt, k, adaptive)
                assert result.generation.text == plain.text
                _check_trace(result.cycles, result.generation.ids, k)
                assert result.generation.stats.target_passes == len(result.cycles)


def _check_trace(cycles: Sequence[Any], ids: Sequence[int], k: int) -> None:
    out: list[int] = []
    for c in cycles:
        assert len(c.drafted) <= min(c.k, k)
        assert 0 <= c.accepted <= len(c.drafted)
        assert list(c.emitted) == [*c.drafted[: c.accepted], c.token][: len(c.emitted)]
        assert c.kind == ("plain" if not c.drafted else "bonus" if c.accepted == len(c.drafted) else "repair")
        out.extend(c.emitted)
    assert tuple(out) == tuple(ids)


def test_self_draft_accepts_everything(tiny: tuple[Model, Path]) -> None:
    model, _ = tiny
    tok: Any = FakeTokenizer()
    result = speculative_generate(
        model,
        tok,
        GenerationRequest((1, 2, 3), GREEDY, max_tokens=16),
        ModelDraft(model, "self"),
        SpeculativeOptions(k=4),
    )
    drafted = sum(len(c.drafted) for c in result.cycles)
    assert drafted > 0 and sum(c.accepted for c in result.cycles) == drafted
    assert len(result.cycles) == 4  # 16 tokens in cycles of k + 1 = 5 (the last one cut by max_tokens)


def test_ngram_repeats_a_loop(tiny: tuple[Model, Path]) -> None:
    """On a greedy loop the prompt lookup is accepted: fewer target passes than tokens."""
    model, _ = tiny
    tok: Any = FakeTokenizer()
    request = GenerationRequest((1, 2, 3, 1, 2, 3), GREEDY, max_tokens=30)
    result = speculative_generate(model, tok, request, NgramDraft(), SpeculativeOptions(k=4))
    assert result.generation.ids == generate(model, tok, request).ids
    assert sum(c.accepted for c in result.cycles) > 0


def test_stop_inside_accepted_span(tiny: tuple[Model, Path]) -> None:
    """EOG and stop strings met inside an accepted span end the output there, as plain decoding does."""
    model, path = tiny
    plain_ids = generate(model, FakeTokenizer(), GenerationRequest((1, 2, 3), GREEDY, max_tokens=16)).ids  # type: ignore[arg-type]
    eog = plain_ids[5]
    cut = plain_ids.index(eog) + 1
    tok: Any = FakeTokenizer(frozenset({eog}))
    text = "".join(chr(ord("a") + t % 26) for t in plain_ids)
    stop = text[7:9]
    for draft in sources(model, path):
        result = speculative_generate(
            model, tok, GenerationRequest((1, 2, 3), GREEDY, max_tokens=16), draft, SpeculativeOptions(k=5)
        )
        assert result.generation.ids == plain_ids[:cut] and result.generation.stop_reason == "eog"
        plain = generate(model, FakeTokenizer(), GenerationRequest((1, 2, 3), GREEDY, max_tokens=16, stop=(stop,)))  # type: ignore[arg-type]
        spec = speculative_generate(
            model,
            FakeTokenizer(),
            GenerationRequest((1, 2, 3), GREEDY, max_tokens=16, stop=(stop,)),  # type: ignore[arg-type]
            draft,
            SpeculativeOptions(k=5),
        )
        assert (spec.generation.ids, spec.generation.text, spec.generation.stop_reason) == (
            plain.ids,
            plain.text,
            plain.stop_reason,
        ) and plain.stop_reason == "stop"


def test_max_tokens_and_zero(tiny: tuple[Model, Path]) -> None:
    model, _ = tiny
    tok: Any = FakeTokenizer()
    for n in (0, 1, 2, 7):
        result = speculative_generate(
            model,
            tok,
            GenerationRequest((1, 2, 3), GREEDY, max_tokens=n),
            ModelDraft(model, "self"),
            SpeculativeOptions(k=4),
        )
        assert len(result.generation.ids) == n


def test_sampled_run_is_seeded_and_in_support(tiny: tuple[Model, Path]) -> None:
    model, path = tiny
    tok: Any = FakeTokenizer()
    params = SamplingParams(temperature=0.8, top_p=0.95)
    request = GenerationRequest((1, 2, 3), params, max_tokens=12, seed=7)
    for draft in sources(model, path):
        a = speculative_generate(model, tok, request, draft, SpeculativeOptions(k=3))
        b = speculative_generate(model, tok, request, draft, SpeculativeOptions(k=3))
        assert a.generation.ids == b.generation.ids and a.mode == "sampled"


def test_bad_options_fail_before_work(tiny: tuple[Model, Path]) -> None:
    model, _ = tiny
    tok: Any = FakeTokenizer()
    request = GenerationRequest((1, 2, 3), GREEDY, max_tokens=4)
    for options in (
        SpeculativeOptions(k=0),
        SpeculativeOptions(k=-2),
        SpeculativeOptions(p_min=1.5),
        SpeculativeOptions(p_min=float("nan")),
    ):
        with pytest.raises(DraftError):
            speculative_generate(model, tok, request, NgramDraft(), options)
    for layer in (0, 4, -1):
        with pytest.raises(DraftError, match=str(layer)):
            LayerSkipDraft(model.config.n_layer, layer)


def test_p_min_one_stops_model_drafts(tiny: tuple[Model, Path]) -> None:
    """p-min 1: a draft whose top probability is below 1 proposes nothing (all plain steps)."""
    model, _ = tiny
    tok: Any = FakeTokenizer()
    request = GenerationRequest((1, 2, 3), GREEDY, max_tokens=6)
    result = speculative_generate(model, tok, request, ModelDraft(model, "self"), SpeculativeOptions(k=3, p_min=1.0))
    assert all(not c.drafted for c in result.cycles)
    assert result.generation.ids == generate(model, tok, request).ids


def test_cache_position_continuity(tiny: tuple[Model, Path]) -> None:
    """After a run, the committed target cache length is the history minus the last token."""
    model, _ = tiny
    lengths: list[int] = []

    class Spy(NgramDraft):
        def propose(self, history: Sequence[int], k: int) -> Any:
            assert self.ctx is not None
            lengths.append(len(history) - self.ctx.cache.length)
            return super().propose(history, k)

    tok: Any = FakeTokenizer()
    speculative_generate(
        model, tok, GenerationRequest((1, 2, 3, 1, 2, 3), GREEDY, max_tokens=20), Spy(), SpeculativeOptions(k=4)
    )
    assert lengths[0] == 6 and all(n == 1 for n in lengths[1:])
    assert np.all(np.asarray(lengths) >= 1)
