"""Token trees on the engine's int8 mode: its batch-invariant attention, tree path.

The int8 mode's law must not depend on how a row was batched (its int8 rounding turns any float32
difference upstream into a different token), so every row of a tree pass must get BIT FOR BIT what
a 1-row pass at its depth along its own root-to-row path gives (``FastModel._attend_tree_invariant``).
No tolerance anywhere here: ``np.array_equal``.

- The attention function alone (f32 tiny gemma3: GQA, a sliding window of 3 that a depth-4 path
  crosses): each tree row equals the 1-row call over a cache holding prefix + its path, and the
  span's K, V and positions are left as they were stored.
- The whole forward on a synthetic block-quantized model in the int8 mode: every node's logits of
  ONE tree pass equal those of sequential 1-row passes along each root-to-leaf path; after keeping
  a path, the next step equals the sequential one; greedy tree decoding (wide trees forced) emits
  greedy plain decoding's tokens on that mode; and the same on SmolLM2 (slow).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tests.support.fake_tokenizer import FakeTokenizer
from tests.support.synthetic import write_synthetic
from tests.support.tree import PARENTS, path_of, wide_suffix
from tests.support.tree import PROMPTS as TREE_PROMPTS
from verispec.engine import sampling as fast_sampling
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.generate import GenerationRequest
from verispec.reference.sampling import SamplingParams
from verispec.reference.tree_attention import ancestor_mask, check_parents, depths

GREEDY = SamplingParams(temperature=0.0)
PREFIX = (5, 9, 1, 30, 2, 17, 4)
TOKENS = (7, 11, 12, 13, 20, 21, 22, 23, 24)  # one per PARENTS row; row 0 is the pending token


@pytest.fixture(scope="module", params=[True, False], ids=["fused", "per-matrix"])
def int8_tiny(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> FastModel:
    """A synthetic llama (GQA 8:1) whose every matrix is block-quantized, so the int8 mode runs all
    of them through its int8 kernel (float matrices stay float32 there: not what is tested); both
    of the mode's layer paths (engine/fused.py's two graphs a layer, and one matmul a matrix)."""
    path = tmp_path_factory.mktemp("int8") / "tinyllama-q.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    model = FastModel.load(path, weights="int8", fused=bool(request.param))
    assert model.batch_invariant and model.fused == request.param and not model.store.float_matrices
    return model


def _sequential(model: FastModel, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
    """Logits ``[len(tokens), V]`` of the prefix pass then one 1-row pass per token."""
    cache = model.new_cache(32)
    model.forward(list(PREFIX[:-1]), cache)
    return np.concatenate([model.forward([t], cache).logits for t in tokens])


def test_tree_rows_attend_as_one_row_passes_along_their_paths(tiny_gguf: Any) -> None:
    model = FastModel.load(tiny_gguf("gemma3", sliding_window=3, softcap=30.0, head_dim=16, weight_scale=1.0, seed=4))
    cfg = model.config
    rng = np.random.default_rng(0)
    parents = check_parents(PARENTS, len(PARENTS))
    visible = ancestor_mask(parents)
    prefix, n = 6, len(PARENTS)
    positions = (prefix + depths(parents)).astype(np.int64)
    cache = model.new_cache(32)
    cache.reserve(prefix + n)
    for layer in range(cfg.n_layer):  # random K, V in every slot; the span's with the tree's positions
        k = rng.standard_normal((cfg.n_head_kv, prefix + n, cfg.head_dim)).astype(np.float32)
        v = rng.standard_normal((cfg.n_head_kv, prefix + n, cfg.head_dim)).astype(np.float32)
        cache.store(layer, 0, k, v, np.concatenate([np.arange(prefix), positions]))
    before: tuple[npt.NDArray[Any], ...] = (cache.k.copy(), cache.v.copy(), cache.positions.copy())
    q = rng.standard_normal((n, cfg.n_head, cfg.head_dim)).astype(np.float32)
    window_crossed = False
    for layer in range(cfg.n_layer):
        rows = model._attend_invariant(q, layer, cache, positions, prefix + n, visible)
        after: tuple[npt.NDArray[Any], ...] = (cache.k, cache.v, cache.positions)
        assert all(np.array_equal(a, b) for a, b in zip(after, before))  # the span's slots put back
        for row in range(n):  # the 1-row pass along the row's path: prefix, then the path in order
            path = path_of(PARENTS, row)
            alone = model.new_cache(32)
            alone.reserve(prefix + len(path))
            slots = [*range(prefix), *(prefix + r for r in path)]
            for lay in range(cfg.n_layer):
                alone.store(lay, 0, cache.k[lay][:, slots], cache.v[lay][:, slots], cache.positions[slots])
            want = model._attend(q[row : row + 1], layer, alone, positions[row : row + 1], prefix + len(path))
            assert np.array_equal(rows[row : row + 1], want), f"layer {layer} row {row}"
            window_crossed |= cfg.is_sliding(layer) and len(path) > cfg.sliding_window
    assert window_crossed
    # the check can fail: the span's rows attending as a chain differ
    chain = model._attend_invariant(q, 0, cache, positions, prefix + n)
    assert not np.array_equal(chain, model._attend_invariant(q, 0, cache, positions, prefix + n, visible))


def test_int8_tree_pass_is_bit_identical_to_sequential_paths(int8_tiny: FastModel) -> None:
    model = int8_tiny
    cache = model.new_cache(32)
    model.forward(list(PREFIX[:-1]), cache)
    tree = model.forward([PREFIX[-1], *TOKENS[1:]], cache, tree_parents=PARENTS).logits
    leaves = [r for r in range(len(PARENTS)) if r not in PARENTS]
    covered: set[int] = set()
    for leaf in leaves:  # sequential 1-row passes along each root-to-leaf path
        path = path_of(PARENTS, leaf)
        alone = _sequential(model, [PREFIX[-1], *(TOKENS[r] for r in path[1:])])
        for step, row in enumerate(path):
            assert np.array_equal(tree[row], alone[step]), f"leaf {leaf}, row {row}"
        covered.update(path)
    assert covered == set(range(len(PARENTS)))
    # keeping an accepted path: the next 1-row pass equals the sequential one
    for accepted in ((1, 4, 6, 8), (3, 7), ()):
        cache = model.new_cache(32)
        model.forward(list(PREFIX[:-1]), cache)
        model.forward([PREFIX[-1], *TOKENS[1:]], cache, tree_parents=PARENTS)
        start = len(PREFIX)
        cache.keep(start, [start - 1 + r for r in accepted])
        nxt = model.forward([40], cache).logits
        want = _sequential(model, [PREFIX[-1], *(TOKENS[r] for r in accepted), 40])[-1:]
        assert np.array_equal(nxt, want), f"after keeping {accepted}"


def test_greedy_int8_trees_give_plain_int8_tokens(int8_tiny: FastModel) -> None:
    tok: Any = FakeTokenizer()
    wide = 0
    for prompt in TREE_PROMPTS:
        request = GenerationRequest(prompt, GREEDY, max_tokens=24, seed=0)
        plain = fast_generate(int8_tiny, tok, request)
        spec = speculative_generate(
            int8_tiny, tok, request, wide_suffix(), SpeculativeOptions(k=4), law=fast_sampling.target_distribution
        )
        assert spec.generation.ids == plain.ids, prompt
        wide += sum(c.width >= 2 for c in spec.cycles)
    assert wide >= 3, f"trees not exercised: {wide} wide cycles"


@pytest.mark.model
@pytest.mark.slow
def test_greedy_int8_trees_give_plain_int8_tokens_smollm2(smollm2_path: Path, int8_real_model: Any) -> None:
    from verispec.reference.tokenizer import Tokenizer

    model = int8_real_model("smollm2-135m", None)  # FastModel.load(smollm2_path, weights="int8"), shared
    tokenizer = Tokenizer.from_file(smollm2_path)
    text = "one two three four five six seven eight nine ten. one two three four five six seven eight nine ten. one two"
    request = GenerationRequest(tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos)), GREEDY, max_tokens=24, seed=0)
    plain = fast_generate(model, tokenizer, request)
    spec = speculative_generate(
        model, tokenizer, request, wide_suffix(), SpeculativeOptions(k=4), law=fast_sampling.target_distribution
    )
    assert spec.generation.ids == plain.ids
    assert any(c.width >= 2 for c in spec.cycles) and sum(c.accepted for c in spec.cycles) > 0


# The default draft (--draft auto, reference/draft_choice.py) on the default engine mode: chat
# requests of the kinds it is for (a passage to answer from, a function to edit), greedy.
AUTO_PROMPTS = (
    "Answer from the passage. Passage: The ferry to Arden leaves at 7:15 and 16:40 every day except "
    "Sunday; the crossing takes fifty minutes and bicycles travel free. Question: When does the ferry "
    "to Arden leave, and can I take my bicycle?",
    "Rename the variable x to total in this function and return it whole:\n"
    "def add_all(values):\n    x = 0\n    for v in values:\n        x = x + v\n    return x\n",
)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_greedy_auto_gives_plain_int8_tokens(
    name: str, smollm2_path: Path, gemma3_path: Path, int8_real_model: Any
) -> None:
    from verispec.reference.chat import chat_format
    from verispec.reference.draft_choice import AutoDraft
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.tokenizer import Tokenizer

    model = int8_real_model(name, None)
    path = smollm2_path if name == "smollm2-135m" else gemma3_path
    with GGUFFile.open(path) as f:
        tokenizer, chat = Tokenizer.from_gguf(f.metadata), chat_format(f.metadata)
    drafted = 0
    for text in AUTO_PROMPTS:
        ids = tuple(tokenizer.encode(chat.wrap(text), add_bos=tokenizer.add_bos, parse_special=True))
        request = GenerationRequest(ids, GREEDY, max_tokens=40, seed=0, ignore_eog=True)
        plain = fast_generate(model, tokenizer, request)
        spec = speculative_generate(
            model, tokenizer, request, AutoDraft(), SpeculativeOptions(k=6), law=fast_sampling.target_distribution
        )
        assert spec.generation.ids == plain.ids, text
        drafted += sum(c.accepted for c in spec.cycles)
    assert drafted > 0  # verification accepted drafts: the comparison covers it
