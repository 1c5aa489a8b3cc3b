"""``--draft auto`` (reference/draft_choice.py): the proposers it merges, the choice by measured
acceptance, and greedy outputs equal to plain greedy (tiny models here; the real models in
tests/test_tree_int8.py and tests/test_spec_equivalence.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fake_tokenizer import FakeTokenizer
from verispec.engine import sampling as fast_sampling
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.draft_choice import AutoDraft, Candidate, NgramIndex, ngram_lookup
from verispec.reference.drafts import DEFAULT_DRAFT, lookup, make_draft, parse_draft_spec
from verispec.reference.errors import DraftError
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.seams import DraftContext

GREEDY = SamplingParams(temperature=0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.integers(1, 6))
def test_ngram_index_is_prompt_lookup(text: list[int], k: int) -> None:
    """The O(1) index proposes what the scan of reference/drafts.py proposes, at every prefix."""
    index = NgramIndex()
    for i, token in enumerate(text):
        index.append(token)
        prefix = text[: i + 1]
        n, tokens = index.lookup(k)
        assert (n, tokens) == ngram_lookup(prefix, k)
        assert tokens == lookup(prefix, k, 4, 2)


class _Cache:
    """Only ``length`` is read by the draft outside a target pass."""

    def __init__(self) -> None:
        self.length = 0


def _two_proposers(first: int, second: int) -> Callable[[Sequence[int], int], list[Candidate]]:
    """Candidates as two disagreeing proposers offer them: suffix ``first``, ngram ``second``, each
    with the same raw estimate, so only what was measured can tell them apart."""

    def candidates(history: Sequence[int], max_depth: int) -> list[Candidate]:
        return [Candidate(-1, first, 0.6, 2, 0), Candidate(-1, second, 0.6, 20, 1)]

    return candidates


def _run_phase(draft: AutoDraft, cache: _Cache, history: list[int], truth: int, cycles: int) -> list[int]:
    """``cycles`` cycles in which the target commits ``truth`` after every proposal; the token the
    draft verified first each cycle (-1: a plain step)."""
    chosen = []
    for _ in range(cycles):
        cache.length = len(history) - 1  # one pending token: a drafting cycle
        tree = draft.propose_tree(history, 4, 8).tree
        chosen.append(tree.tokens[1] if tree.size > 1 else -1)
        history.append(truth)
    return chosen


def test_the_chooser_follows_the_proposer_that_is_accepted() -> None:
    """Two proposers disagree every cycle. While the target commits what ngram offers, ngram's
    token is verified; once it commits the suffix proposer's instead, the choice switches within a
    few cycles (the calibration decays), and switches back when ngram is right again."""
    draft = AutoDraft(cost={2: 1.0, 3: 50.0})  # one draft node pays, two never: the tree is the choice
    cache = _Cache()
    draft.start(DraftContext(None, cache, GREEDY, None, 0.0, None))  # type: ignore[arg-type]
    draft.candidates = _two_proposers(7, 9)  # type: ignore[method-assign]
    history = [1, 2, 3]
    ngram_right = _run_phase(draft, cache, history, 9, 12)
    assert ngram_right[-6:] == [9] * 6
    suffix_right = _run_phase(draft, cache, history, 7, 12)
    assert suffix_right[:1] == [9]  # the measured past still favours ngram at first
    assert suffix_right[-6:] == [7] * 6  # then the suffix proposer, which is being accepted
    switch = suffix_right.index(7)
    assert switch <= 6, suffix_right
    back = _run_phase(draft, cache, history, 9, 12)
    assert back[-6:] == [9] * 6


def test_nothing_pays_gives_a_plain_step() -> None:
    """A proposer that is never accepted is not verified when a row costs what it may buy."""
    draft = AutoDraft(cost={2: 1.6, 3: 2.2})
    cache = _Cache()
    draft.start(DraftContext(None, cache, GREEDY, None, 0.0, None))  # type: ignore[arg-type]
    draft.candidates = _two_proposers(7, 9)  # type: ignore[method-assign]
    chosen = _run_phase(draft, cache, [1, 2, 3], 5, 16)
    assert chosen[-8:] == [-1] * 8


def test_merged_tree_counts_one_node_per_path_and_token() -> None:
    """Two proposers offering the same token under the same path give one node (its estimate the
    larger); siblings are disjoint events, their reaches sum to at most MAX_ACCEPT."""
    draft = AutoDraft(cost={r: 1.0 for r in range(2, 10)})
    candidates = [
        Candidate(-1, 4, 0.5, 2, 0),
        Candidate(0, 5, 0.9, 3, 0),
        Candidate(-1, 6, 0.4, 2, 0),
        Candidate(-1, 4, 0.8, 20, 1),
        Candidate(3, 5, 0.8, 21, 1),
    ]
    nodes = draft.choose(candidates, [c.estimate for c in candidates], 4, 8)
    keys = [(n.parent, n.token) for n in nodes]
    assert len(keys) == len(set(keys)) == 3
    first = [n for n in nodes if n.parent == 0]
    assert sorted(n.token for n in first) == [4, 6]
    assert sum(n.reach for n in first) <= 0.99 + 1e-12  # MAX_ACCEPT (exact: scaled sums of floats)
    four = next(n for n in first if n.token == 4)
    assert four.accept == 0.8


def test_auto_is_the_default_and_parses() -> None:
    assert DEFAULT_DRAFT == "auto"
    assert str(parse_draft_spec("auto")) == "auto"
    with pytest.raises(DraftError, match="auto"):
        parse_draft_spec("automatic")


@pytest.fixture
def tiny_path(tiny_gguf: Callable[..., Path]) -> Path:
    return tiny_gguf("llama", n_vocab=32, n_layer=4, weight_scale=1.0, seed=3)


PROMPTS = [(1, 2, 3, 1, 2, 3, 1, 2), (5,), (7, 7, 7, 7), (0, 9, 4, 0, 9, 4, 0)]


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_auto_equals_plain_reference(tiny_path: Path, k: int) -> None:
    model = Model.load(tiny_path)
    tok: Any = FakeTokenizer()
    drafted = 0
    for prompt in PROMPTS:
        request = GenerationRequest(prompt, GREEDY, max_tokens=24)
        plain = generate(model, tok, request)
        result = speculative_generate(
            model, tok, request, make_draft(parse_draft_spec("auto"), model), SpeculativeOptions(k=k)
        )
        assert result.generation.ids == plain.ids, (prompt, k)
        drafted += sum(len(c.drafted) for c in result.cycles)
    assert drafted > 0  # the comparison covers verification


def test_greedy_auto_equals_plain_engine(tiny_path: Path) -> None:
    """On the fast engine the prompt's pass computes the head on its last row only."""
    model = FastModel.load(tiny_path)
    tok: Any = FakeTokenizer()
    for prompt in PROMPTS:
        request = GenerationRequest(prompt, GREEDY, max_tokens=24)
        plain = fast_generate(model, tok, request)
        draft = AutoDraft()
        result = speculative_generate(
            model, tok, request, draft, SpeculativeOptions(k=4), law=fast_sampling.target_distribution
        )
        assert result.generation.ids == plain.ids, prompt
        assert result.cycles[0].kind == "plain"  # the prompt's pass


def test_sampled_auto_with_a_fixed_cost_curve_is_seeded(tiny_path: Path) -> None:
    """Without online timings every choice is a function of the history: same seed, same tokens."""
    model = Model.load(tiny_path)
    tok: Any = FakeTokenizer()
    params = SamplingParams(temperature=0.8, top_k=8)
    request = GenerationRequest((1, 2, 3, 1, 2, 3, 1, 2), params, max_tokens=24, seed=5)
    curve = {r: 1.0 + 0.1 * (r - 1) for r in range(2, 10)}
    results = [
        speculative_generate(model, tok, request, AutoDraft(cost=curve, online=False), SpeculativeOptions(k=4))
        for _ in range(2)
    ]
    runs = [r.generation.ids for r in results]
    assert any(c.drafted for c in results[0].cycles)
    assert runs[0] == runs[1]
    assert len(runs[0]) == 24
