"""Token-tree speculative decoding (reference/tree_decode.py through reference/decode.py).

Greedy: ``--draft suffix:tree`` decodes plain greedy's tokens, token for token, on tiny models
(reference and fast engine, every cycle's trees wide: ``control=False`` verifies the whole grown
tree) and on the golden prompts of both real models (near-ties handled as
tests/test_spec_equivalence.py does: :func:`compare`).

KV, after every cycle (greedy and sampled, rejections included): the cache the next pass reads
equals a fresh forward's K, V over the committed history (tests/support/tolerances.py's derived spread),
and the logits of the root and the last node of every tree equal a fresh
forward over the history plus the node's path (every node of a fixed tree: test_tree_attention.py).

Law (SmolLM2, temperature 0.8, top-p 0.95): the first two tokens of the tree loop, with a
deterministic draft proposing a wide two-level tree, have the exact law without speculation
(chi-square as in test_spec_equivalence; its own line of the alpha budget).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.conftest import GOLDEN_KEYS
from tests.support.equivalence import SAMPLED, compare, first_two_tokens_law, near_ties
from tests.support.fake_tokenizer import FakeTokenizer
from tests.support.shared_decodes import memo_target, plain_greedy
from tests.support.tolerances import ForwardSpread, assert_within, forward_spread
from tests.support.tree import PROMPTS, wide_suffix
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import make_draft, parse_draft_spec
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.seams import DraftContext, Proposal
from verispec.reference.suffix_draft import SuffixDraft
from verispec.reference.tokenizer import Tokenizer
from verispec.reference.tree_decode import TreeProposal, node_path, span_parents
from verispec.reference.tree_speculative import DraftTree
from verispec.spec.decoder.check import MemoTargetModel
from verispec.spec.statistics import ALPHA_BUDGET, chi_square, power_of, required_sample_size

F32 = npt.NDArray[np.float32]
GREEDY = SamplingParams(temperature=0.0)
SAMPLES = 16  # Monte Carlo samples per tolerance (lambda 31): one forward_spread per cycle

_spreads: dict[tuple[str, tuple[int, ...], bool, int | None], ForwardSpread] = {}
_weights_digest: dict[int, tuple[Model, str]] = {}


def spread_of(
    model: Model, tokens: tuple[int, ...], *, head: bool = True, head_rows: int | None = None
) -> ForwardSpread:
    """``forward_spread(model, tokens, head=head, head_rows=head_rows, samples=SAMPLES)``, memoized by
    the model's config and weights (a digest of their bytes) and the arguments: the spread is a
    deterministic function of them (fixed seed), and the tiny tests' four variants (two engines,
    greedy and sampled) decode the same tiny model from the same prompts, so most of their
    sequences repeat (measured: 408 calls, 170 distinct)."""
    if id(model) not in _weights_digest:
        digest = hashlib.sha256(repr(model.config).encode())
        named = [
            (f.name, getattr(model.weights, f.name)) for f in dataclasses.fields(model.weights) if f.name != "layers"
        ]
        for layer in model.weights.layers:
            named += [(f.name, getattr(layer, f.name)) for f in dataclasses.fields(layer)]
        for name, value in named:
            digest.update(name.encode() + (b"-" if value is None else np.ascontiguousarray(value).tobytes()))
        _weights_digest[id(model)] = (model, digest.hexdigest())  # the model kept: its id is never reused
    key = (_weights_digest[id(model)][1], tokens, head, head_rows)
    if key not in _spreads:
        _spreads[key] = forward_spread(model, tokens, head=head, head_rows=head_rows, samples=SAMPLES)
    return _spreads[key]


class TreeRecorder:
    """Delegates to a tree draft; at each ``score_tree`` checks the cache against a fresh forward
    over the committed history, then records (history, tree, logits)."""

    def __init__(self, inner: SuffixDraft, model: Model) -> None:
        self.inner, self.model = inner, model
        self.name = inner.name
        self.calls: list[tuple[list[int], DraftTree, F32]] = []
        self.history: list[int] = []

    tree_width = property(lambda self: self.inner.tree_width)
    draft_passes = property(lambda self: self.inner.draft_passes)
    draft_time_s = property(lambda self: self.inner.draft_time_s)

    def start(self, context: DraftContext) -> None:
        self.cache = context.cache
        self.inner.start(context)

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        raise AssertionError("the tree loop proposes trees")

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        raise AssertionError("the tree loop scores trees")

    def propose_tree(self, history: Sequence[int], max_depth: int, max_nodes: int) -> TreeProposal:
        self.history = list(history)
        return self.inner.propose_tree(history, max_depth, max_nodes)

    def observe_cycle(self, rows: int, seconds: float) -> None:
        self.inner.observe_cycle(rows, seconds)

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> F32:
        n = self.cache.length
        assert self.history[n:] == list(pending)
        if n:  # the committed slots are exactly a fresh forward's over history[:n]
            fresh = spread_of(self.model, tuple(self.history[:n]), head=False)
            assert self.cache.positions[:n].tolist() == list(range(n))
            assert_within(self.cache.k[:, :, :n], fresh.k.value, fresh.k.tolerance, "cached K")
            assert_within(self.cache.v[:, :, :n], fresh.v.value, fresh.v.tolerance, "cached V")
        logits = self.inner.score_tree(pending, tree)
        self.calls.append((list(self.history), tree, np.array(logits)))
        return logits


def check_tree_run(
    model: Model, engine: Any, prompt: tuple[int, ...], params: SamplingParams, n: int, k: int
) -> tuple[int, int, int]:
    """One tree-decoded request with every check of the module docstring; (wide trees, repairs,
    accepted paths that were not already in place: the cache had to move their K, V)."""
    recorder = TreeRecorder(wide_suffix(), model)
    tok: Any = FakeTokenizer()
    result = speculative_generate(
        engine, tok, GenerationRequest(prompt, params, max_tokens=n, seed=7), recorder, SpeculativeOptions(k=k)
    )
    assert len(recorder.calls) == len(result.cycles)
    history = list(prompt)
    wide = repairs = moved = 0
    for cycle, (seen, tree, logits) in zip(result.cycles, recorder.calls):
        assert seen == history
        assert tree.tokens[1:] == cycle.drafted
        for v in sorted({0, tree.size - 1}):  # the root and the deepest-last node (every node: test_tree_attention.py)
            seq = (*history, *node_path(tree, v))
            want = model.forward(list(seq), model.new_cache(len(seq))).logits[-1]
            spread = spread_of(model, seq, head_rows=1).logits
            assert spread is not None
            assert_within(logits[v], want, spread.tolerance[0], f"tree node {v} vs a fresh forward of its path")
        wide += cycle.width >= 2
        repairs += cycle.kind == "repair"
        moved += cycle.path != tuple(range(1, len(cycle.path) + 1))
        history.extend(cycle.emitted)
    assert tuple(history[len(prompt) :]) == result.generation.ids
    if params.greedy:
        assert result.generation.ids == generate(model, tok, GenerationRequest(prompt, params, max_tokens=n)).ids
    return wide, repairs, moved


# the fast engine's variants are slow-marked (~15 s each on the 2-core machine): its tree mask is
# checked in the gate by tests/test_tree_attention.py, node by node
@pytest.mark.parametrize("engine", ["reference", pytest.param("fast", marks=pytest.mark.slow)])
@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.9, top_k=8)], ids=["greedy", "sampled"])
def test_tree_decoding_tiny(tiny_gguf: Callable[..., Path], engine: str, params: SamplingParams) -> None:
    path = tiny_gguf("llama", n_vocab=32, n_layer=4, weight_scale=1.0, seed=3)
    model = Model.load(path)
    target: Any = model if engine == "reference" else FastModel.load(path)
    wide = repairs = moved = 0
    for prompt in PROMPTS:
        w, r, m = check_tree_run(model, target, prompt, params, 16, 4)
        wide, repairs, moved = wide + w, repairs + r, moved + m
    assert wide >= 3 and repairs >= 3 and moved >= 1, (
        f"trees not exercised: {wide} wide cycles, {repairs} repairs, {moved} moved paths"
    )


def test_tree_decoding_tiny_gemma3_window(tiny_gguf: Callable[..., Path]) -> None:
    """Sliding-window layers (window 4) with trees deeper than the window."""
    path = tiny_gguf("gemma3", n_vocab=32, n_layer=3, sliding_window=4, weight_scale=1.0, seed=4)
    model = Model.load(path)
    wide = sum(check_tree_run(model, model, prompt, GREEDY, 16, 6)[0] for prompt in PROMPTS[:2])
    assert wide > 0


def test_span_parents() -> None:
    tree = DraftTree((-1, 0, 0, 1), (-1, 5, 6, 7))
    assert span_parents(1, tree) == [-1, 0, 0, 1]
    assert span_parents(3, tree) == [-1, 0, 1, 2, 2, 3]


def test_parse_suffix_tree() -> None:
    spec = parse_draft_spec("suffix:tree")
    assert spec.kind == "suffix" and spec.tree and str(spec) == "suffix:tree"


# -- real models: greedy equals plain ----------------------------------------------------------


def run_greedy_tree(model: Model, tokenizer: Tokenizer, prompts: list[dict[str, Any]], n: int, name: str) -> None:
    for entry in prompts:
        prompt = tuple(int(t) for t in entry["prompt_ids"])
        request = GenerationRequest(prompt, GREEDY, max_tokens=n)
        plain = plain_greedy(model, tokenizer, prompt, n)  # shared with tests/test_spec_equivalence.py
        for draft in (make_draft(parse_draft_spec("suffix:tree"), model, tokenizer), wide_suffix()):
            result = speculative_generate(model, tokenizer, request, draft, SpeculativeOptions(k=4))
            compare(model, prompt, plain, result.generation.ids, f"{name} {draft.name} {entry['prompt']!r}")
    if near_ties:
        print(f"near-ties tolerated: {len(near_ties)}: " + "; ".join(near_ties))


@pytest.mark.model
def test_greedy_tree_equals_plain_smollm2(
    smollm2_model: Model, smollm2_tokenizer: Tokenizer, golden: dict[str, Any]
) -> None:
    prompts = golden["models"][GOLDEN_KEYS["smollm2-135m"]]["greedy"]
    run_greedy_tree(smollm2_model, smollm2_tokenizer, prompts, 10, "smollm2")


@pytest.mark.model
def test_greedy_tree_equals_plain_gemma3(
    gemma3_model: Model, gemma3_tokenizer: Tokenizer, golden: dict[str, Any]
) -> None:
    prompts = [
        e for e in golden["models"][GOLDEN_KEYS["gemma3-270m"]]["greedy"] if e["prompt"] == "The capital of France is"
    ]
    assert prompts, "golden prompt missing"
    run_greedy_tree(gemma3_model, gemma3_tokenizer, prompts, 8, "gemma3")


# -- the sampling law of the tree loop -----------------------------------------------------------


class FixedTreeDraft:
    """A deterministic tree: below the root, the target's 2nd, 4th and 1st most likely logits
    (on the test's prompt at T 0.8, top-p 0.95 their probabilities are ~0.15, 0 and ~0.85, the
    3rd's ~0.006: a first sibling accepted; a zero-probability sibling rejected; the last sibling
    accepted after two rejections, only right if the residual was updated; all rejected, then the
    draw from the residual); below each, its own most likely token (depth 2: bonus draws)."""

    name = "fixed-tree"
    tree_width = 3
    draft_passes = 0
    draft_time_s = 0.0

    def __init__(self, target: MemoTargetModel) -> None:
        self.target = target
        self.memo: dict[tuple[int, ...], TreeProposal] = {}  # deterministic in the history

    def start(self, context: DraftContext) -> None:
        self.ctx = context

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        raise AssertionError("tree loop")

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        raise AssertionError("tree loop")

    def observe_cycle(self, rows: int, seconds: float) -> None:
        pass

    def propose_tree(self, history: Sequence[int], max_depth: int, max_nodes: int) -> TreeProposal:
        key = (*history, max_depth)
        if key not in self.memo:
            self.memo[key] = self._tree(history, max_depth)
        return self.memo[key]

    def _tree(self, history: Sequence[int], max_depth: int) -> TreeProposal:
        if max_depth < 1:
            return TreeProposal(DraftTree((-1,), (-1,)))
        order = np.argsort(-self.target.row(tuple(history)), kind="stable")
        firsts = [int(order[1]), int(order[3]), int(order[0])]
        if max_depth < 2:
            return TreeProposal(DraftTree((-1, 0, 0, 0), (-1, *firsts)))
        seconds = [int(np.argmax(self.target.row((*history, t)))) for t in firsts]
        return TreeProposal(DraftTree((-1, 0, 0, 0, 1, 2, 3), (-1, *firsts, *seconds)))

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> F32:
        from verispec.reference.tree_decode import score_tree

        return score_tree(self.target, self.ctx.cache, pending, tree)


PROMPT = "The history of the printing press begins"
# alpha: this test's line of the suite's budget (spec/statistics.py, shared with the single-path
# decode law test); N from the power analysis: power >= 0.99 against ANY bias of TV >= 0.05
ALPHA = ALPHA_BUDGET["tree_decode_first_two_tokens"]
TV = 0.05
N_CELLS = 12
N = required_sample_size(N_CELLS, ALPHA, TV)


@pytest.mark.model
def test_tree_first_two_tokens_law(smollm2_model: Model, smollm2_tokenizer: Tokenizer, golden: dict[str, Any]) -> None:
    entry = next(e for e in golden["models"][GOLDEN_KEYS["smollm2-135m"]]["greedy"] if e["prompt"] == PROMPT)
    prompt = tuple(int(t) for t in entry["prompt_ids"])
    target, law = memo_target(smollm2_model)  # the memo tests/test_spec_equivalence.py's law test reads too
    exact, pairs, probs = first_two_tokens_law(target, law, prompt, N_CELLS)
    index = {pair: i for i, pair in enumerate(pairs)}

    draft = FixedTreeDraft(target)
    counts = np.zeros(len(pairs) + 1, dtype=np.int64)
    first_node = {1: 0, 2: 0, 3: 0, None: 0}  # which sibling the accepted path starts with (None: none)
    kinds = {"bonus": 0, "repair": 0, "plain": 0}
    rng = np.random.default_rng(20261130)
    for _ in range(N):
        request = GenerationRequest(prompt, SAMPLED, max_tokens=2, seed=int(rng.integers(2**63)))
        result = speculative_generate(target, smollm2_tokenizer, request, draft, SpeculativeOptions(k=2), law=law)
        ids = result.generation.ids
        assert len(ids) == 2 and (ids[0], ids[1]) in exact, f"impossible pair {ids}"
        counts[index.get((ids[0], ids[1]), len(pairs))] += 1
        cycle = result.cycles[0]
        first_node[cycle.path[0] if cycle.path else None] += 1
        kinds[cycle.kind] += 1
    test = chi_square(counts, probs)
    power = power_of(N, test.df, ALPHA, TV)
    print(
        f"tree: N={N} chi2={test.statistic:.2f} df={test.df} p={test.p_value:.4f} alpha={ALPHA} power={power:.3f} "
        f"vs TV>={TV}; first cycles {kinds}, accepted path starts at {first_node}; target forwards {target.forwards}"
    )
    # the branches of the rule are exercised (FixedTreeDraft): first sibling accepted, last one
    # after two rejections, none (a residual draw: ~0.6% of the runs), bonus at depth 2
    assert first_node[1] > N // 50 and first_node[3] > N // 50 and first_node[None] > 0, first_node
    assert kinds["bonus"] > N // 50, kinds
    assert test.passed(ALPHA), f"tree loop: law of the first two tokens differs (p={test.p_value:.2e})"
