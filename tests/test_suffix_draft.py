"""Suffix drafting (reference/suffix_draft.py): proposals equal a brute-force scan of the text
(Hypothesis, random strings), counts are exact, the cache stays within its bound and survives a
persistence round trip, bad cache files are refused with a DraftError, and greedy speculative
decoding with it equals plain greedy decoding on tiny models and on SmolLM2."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec.reference.decode import SpeculativeOptions, speculative_generate
from verispec.reference.drafts import DraftSpec, make_draft, parse_draft_spec
from verispec.reference.errors import DraftError
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.sampling import SamplingParams
from verispec.reference.suffix_draft import SuffixCache, SuffixDraft, SuffixTree, walk
from verispec.reference.suffix_index import SuffixIndex

GREEDY = SamplingParams(temperature=0.0)


# -- brute force ------------------------------------------------------------------------------------


def occurrences(text: Sequence[int], pattern: Sequence[int]) -> list[int]:
    """Start positions of ``pattern`` in ``text`` (overlapping)."""
    m = len(pattern)
    return [p for p in range(len(text) - m + 1) if list(text[p : p + m]) == list(pattern)]


def brute_force(
    trees: Sequence[Sequence[Sequence[int]]],
    history: Sequence[int],
    k: int,
    depth: int,
    max_match: int,
    min_match: int,
    min_prob: float,
) -> list[int]:
    """The module docstring's algorithm by scanning text: ``trees[i]`` is the list of texts tree i
    holds (no substring spans two texts); trees[0] ranks first on ties in match length."""
    tokens: list[int] = []
    while len(tokens) < k:
        context = [*history, *tokens]
        chosen: tuple[int, Sequence[Sequence[int]]] | None = None
        for texts in trees:
            for m in range(min(max_match, depth - 1, len(context)), max(1, min_match) - 1, -1):
                if _followers(texts, context[len(context) - m :]):  # seen followed by a token
                    if chosen is None or m > chosen[0]:
                        chosen = (m, texts)
                    break
        if chosen is None:
            break
        m, texts = chosen
        path = list(context[len(context) - m :])
        prob, stepped = 1.0, False
        while len(path) < depth and len(tokens) < k:
            followers = _followers(texts, path)  # (next token, its position in insertion order)
            if not followers:
                break
            # most frequent next token; ties to the most recent occurrence of path + token, then smaller id
            stats = {
                t: (sum(1 for u, _ in followers if u == t), max(at for u, at in followers if u == t))
                for t, _ in followers
            }
            token = max(stats, key=lambda t: (stats[t][0], stats[t][1], -t))
            prob *= stats[token][0] / len(followers)
            if prob < min_prob:
                break
            tokens.append(token)
            path.append(token)
            stepped = True
        if not stepped:
            break
    return tokens


def _followers(texts: Sequence[Sequence[int]], pattern: Sequence[int]) -> list[tuple[int, int]]:
    """Every token that follows an occurrence of ``pattern``, with its position over all texts."""
    out: list[tuple[int, int]] = []
    offset = 0
    for text in texts:
        out.extend(
            (text[p + len(pattern)], offset + p + len(pattern))
            for p in occurrences(text, pattern)
            if p + len(pattern) < len(text)
        )
        offset += len(text)
    return out


def tree_of(text: Sequence[int], depth: int) -> SuffixTree:
    tree = SuffixTree(depth)
    for t in text:
        tree.append(t)
    return tree


texts_st = st.lists(st.integers(0, 3), min_size=0, max_size=60)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    text=texts_st,
    k=st.integers(1, 12),
    depth=st.integers(2, 8),
    max_match=st.integers(1, 8),
    min_match=st.integers(1, 3),
    min_prob=st.sampled_from([0.0, 0.3, 0.55]),
)
def test_request_tree_proposals_equal_brute_force(
    text: list[int], k: int, depth: int, max_match: int, min_match: int, min_prob: float
) -> None:
    tree = tree_of(text, depth)
    got = walk([tree], text, k, max_match, min_match, min_prob)
    assert got == brute_force([[text]], text, k, depth, max_match, min_match, min_prob)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=texts_st, earlier=st.lists(texts_st, max_size=3), k=st.integers(1, 10), depth=st.integers(2, 7))
def test_cache_tree_proposals_equal_brute_force(text: list[int], earlier: list[list[int]], k: int, depth: int) -> None:
    """The request tree and a cache of earlier texts (each a separate text: no match spans two)."""
    cache = SuffixCache(max_tokens=10_000, depth=depth)
    for e in earlier:
        cache.remember(e)
    kept = [e for e in earlier if len(e) >= 2]
    got = walk([tree_of(text, depth), cache.tree], text, k, 6, 1, 0.0)
    assert got == brute_force([[text], kept], text, k, depth, 6, 1, 0.0)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=texts_st, depth=st.integers(2, 6))
def test_counts_are_substring_counts(text: list[int], depth: int) -> None:
    tree = tree_of(text, depth)
    seen: set[tuple[int, ...]] = set()
    for start in range(len(text)):
        for m in range(1, depth + 1):
            if start + m <= len(text):
                seen.add(tuple(text[start : start + m]))
    for pattern in seen:
        node = tree.find(pattern)
        assert node is not None and node.count == len(occurrences(text, pattern)), pattern
        assert node.total == sum(c.count for c in node.children.values())
    assert tree.nodes == 1 + len(seen)  # exactly one node per distinct substring of length <= depth


def test_walk_examples() -> None:
    # "1 2" was followed by 3 twice and by 4 once: the most frequent continuation beats the most recent
    text = [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 2]
    assert walk([tree_of(text, 8)], text, 2, max_match=2, min_match=2) == [3, 0]
    # the longer match "0 1 2" was followed by 3 once and 4 once: the tie goes to the most recent
    assert walk([tree_of(text, 8)], text, 2, min_match=2) == [4, 0]
    assert walk([tree_of([5, 6, 7], 8)], [5, 6, 7], 3) == []  # nothing recurs
    assert walk([tree_of(text, 8)], text, 2, max_match=2, min_match=2, min_prob=0.7) == []  # 2/3 < 0.7


# -- cache bounds and persistence -------------------------------------------------------------------


def test_cache_evicts_oldest_and_frees_nodes() -> None:
    cache = SuffixCache(max_tokens=10, depth=4)
    cache.remember([1, 2, 3, 4, 5, 6])
    cache.remember([7, 8, 9])
    assert cache.tokens == 9 and len(cache.texts) == 2
    cache.remember([1, 1, 1])  # 12 > 10: the oldest text goes
    assert cache.tokens == 6 and [list(t) for t in cache.texts] == [[7, 8, 9], [1, 1, 1]]
    assert cache.tree.find([2, 3]) is None and cache.tree.find([8, 9]) is not None
    fresh = SuffixTree(4)
    fresh.add_text([7, 8, 9])
    fresh.add_text([1, 1, 1])
    assert cache.tree.nodes == fresh.nodes
    cache.remember(list(range(20)))  # longer than the whole bound: not remembered
    assert cache.tokens == 6
    cache.remember([3])  # a single token has no continuation: not remembered
    assert cache.tokens == 6


@settings(max_examples=100, deadline=None, derandomize=True)
@given(texts=st.lists(st.lists(st.integers(0, 4), max_size=12), max_size=8), bound=st.integers(0, 30))
def test_cache_bound_holds_and_tree_matches_kept_texts(texts: list[list[int]], bound: int) -> None:
    cache = SuffixCache(max_tokens=bound, depth=5)
    for t in texts:
        cache.remember(t)
        assert cache.tokens == sum(len(x) for x in cache.texts) <= bound
    rebuilt = SuffixTree(5)
    for t in cache.texts:
        rebuilt.add_text(t)
    assert cache.tree.nodes == rebuilt.nodes
    assert _counts(cache.tree.root) == _counts(rebuilt.root)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(texts=st.lists(st.lists(st.integers(0, 3), max_size=25), max_size=5), depth=st.integers(2, 7))
def test_the_cache_index_equals_the_tree_node_for_node(texts: list[list[int]], depth: int) -> None:
    """The lazily built index (reference.suffix_index) and the tree over the same texts have the
    same nodes with the same count and total, and ``last`` orders occurrences as the tree's
    stamps do (the index's positions count one separator per text: mapped back, they are equal)."""
    tree = SuffixTree(depth)
    for t in texts:
        tree.add_text(t)
    index = SuffixIndex(texts, depth)
    separators_before = np.cumsum([0] + [len(t) + 1 for t in texts])

    def stamp(position: int) -> int:  # the tree's stamp of the token at this index position
        text = int(np.searchsorted(separators_before, position, side="right")) - 1
        return position - text + 1

    def nodes(node: Any, prefix: tuple[int, ...], lasts: bool) -> dict[tuple[int, ...], tuple[int, int, int]]:
        last = stamp(node.last) if lasts and prefix else node.last
        out = {prefix: (node.count, node.total, last)}
        for t, child in node.children.items():
            out.update(nodes(child, (*prefix, t), lasts))
        return out

    assert nodes(index.root, (), True) == nodes(tree.root, (), False)
    assert index.nodes == tree.nodes


def _counts(node: Any, prefix: tuple[int, ...] = ()) -> dict[tuple[int, ...], int]:
    out = {prefix: node.count}
    for t, child in node.children.items():
        out.update(_counts(child, (*prefix, t)))
    return out


def test_cache_persistence_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cache.json"
    cache = SuffixCache(max_tokens=100, fingerprint="abc")
    cache.remember([1, 2, 3, 4])
    cache.remember([9, 8, 7])
    cache.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["cache.json"]  # no temp file left behind
    loaded = SuffixCache.load(path, n_vocab=10, fingerprint="abc", max_tokens=100)
    assert loaded.texts == cache.texts and _counts(loaded.tree.root) == _counts(cache.tree.root)
    assert SuffixCache.load(tmp_path / "absent.json", n_vocab=10).tokens == 0  # a new cache


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not JSON"),
        ('{"version": 99, "texts": []}', "version-1"),
        ('{"version": 1, "fingerprint": "zzz", "texts": []}', "another vocabulary"),
        ('{"version": 1, "fingerprint": "abc", "texts": [[1, 2, 10]]}', "outside 0..9"),
        ('{"version": 1, "fingerprint": "abc", "texts": [[1, true]]}', "outside 0..9"),
        ('{"version": 1, "fingerprint": "abc", "texts": [[1, -1]]}', "outside 0..9"),
        ('{"version": 1, "fingerprint": "abc", "texts": "x"}', "version-1"),
    ],
)
def test_bad_cache_files_are_refused(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "cache.json"
    path.write_text(content)
    with pytest.raises(DraftError) as info:
        SuffixCache.load(path, n_vocab=10, fingerprint="abc")
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_draft_remembers_outputs_across_requests(tmp_path: Path) -> None:
    """A second request drafts from the first one's output (and the file carries it to a new process)."""
    path = tmp_path / "cache.json"
    draft = SuffixDraft(SuffixCache.load(path, n_vocab=50), path, control=False)
    first = [1, 2]
    draft.propose(first, 3)  # the request's prompt
    draft.finish([10, 11, 12, 13, 14])
    reborn = SuffixDraft(SuffixCache.load(path, n_vocab=50), path, control=False)
    assert reborn.propose([7, 10, 11], 3).tokens == (12, 13, 14)
    assert SuffixDraft(control=False).propose([7, 10, 11], 3).tokens == ()  # without the cache nothing recurs


def test_parse_and_make() -> None:
    assert parse_draft_spec("suffix") == DraftSpec("suffix") and str(DraftSpec("suffix")) == "suffix"
    with pytest.raises(DraftError, match="--draft suffix"):
        make_draft(DraftSpec("ngram"), None, cache_path=Path("x.json"))  # type: ignore[arg-type]


# -- lossless on models ------------------------------------------------------------------------------


class _FakeTokenizer:
    eog_ids: frozenset[int] = frozenset()
    bos_id = None

    def stream_decoder(self) -> Any:
        class D:
            def push(self, token: int) -> str:
                return chr(ord("a") + token % 26)

            def flush(self) -> str:
                return ""

        return D()


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_suffix_equals_plain_on_a_tiny_model(tiny_gguf: Callable[..., Path], k: int) -> None:
    from verispec.reference.model import Model

    model = Model.load(tiny_gguf("llama", n_vocab=32, n_layer=2, weight_scale=1.0, seed=3))
    tok: Any = _FakeTokenizer()
    for control in (False, True):
        draft = SuffixDraft(SuffixCache(), control=control)
        for prompt in [(1, 2, 3, 1, 2, 3), (5,), (7, 7, 7, 7)]:
            request = GenerationRequest(prompt, GREEDY, max_tokens=24)
            plain = generate(model, tok, request)
            for adaptive in (False, True):
                result = speculative_generate(model, tok, request, draft, SpeculativeOptions(k=k, adaptive=adaptive))
                assert result.generation.ids == plain.ids, (prompt, control, adaptive)


@pytest.mark.model
def test_greedy_suffix_equals_plain_on_smollm2(smollm2_path: Path, tmp_path: Path, f32_real_model: Any) -> None:
    """On the real model (the fast engine's default f32 mode, ``load_model(path)``: the session's,
    tests/conftest.py), with a persisted cache across two requests (the second repeats the first)."""
    from verispec.engine.sampling import target_distribution
    from verispec.reference.tokenizer import Tokenizer

    model: Any = f32_real_model("smollm2-135m")
    tokenizer = Tokenizer.from_file(smollm2_path)
    prompt = "List the days of the week, one per line, then list them again in reverse order.\n"
    ids = tuple(tokenizer.encode(prompt, add_bos=tokenizer.add_bos))
    request = GenerationRequest(ids, GREEDY, max_tokens=40)
    plain = generate(model, tokenizer, request)
    cache_path = tmp_path / "cache.json"
    passes = []
    for _ in range(2):
        draft = make_draft(parse_draft_spec("suffix"), model, tokenizer, cache_path=cache_path)
        assert isinstance(draft, SuffixDraft)
        draft.control = False  # this test is about the cache; the cost model's choices depend on timing
        result = speculative_generate(
            model, tokenizer, request, draft, SpeculativeOptions(k=6, adaptive=False), law=target_distribution
        )
        assert result.generation.ids == plain.ids
        assert isinstance(draft, SuffixDraft)
        draft.finish(result.generation.ids)
        passes.append(len(result.cycles))
    # the second request drafts its answer from the cached first one
    assert passes[1] < passes[0]
    assert SuffixCache.load(cache_path, tokenizer.vocab_size).texts[0] == tuple(plain.ids)


def test_estimates_are_smoothed_frequencies() -> None:
    from verispec.reference.suffix_draft import Step, walk_steps

    text = [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 2]
    steps = walk_steps([tree_of(text, 8)], text, 2, max_match=2, min_match=2)
    # "1 2" -> 3 twice of 3 (context 2: 2 / (3 + 2/2)); then "1 2 3" -> 0 twice of 2 (2 / (2 + 2/3))
    assert steps == [Step(3, 2 / (3 + 2 / 2), 2), Step(0, 2 / (2 + 2 / 3), 3)]


def test_control_verifies_only_what_pays() -> None:
    """A context seen once (estimate 1/2) under a steep cost curve is not worth a wide pass: the
    draft proposes fewer tokens than the walk found, and none when rows are very expensive."""
    from verispec.reference.draft_control import VerifyCost

    text = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6]
    cheap, steep = SuffixDraft(), SuffixDraft()
    for draft, per_row in ((cheap, 0.01), (steep, 2.0)):
        draft.cost = VerifyCost(prior_row_cost=per_row)
    assert SuffixDraft(control=False).propose(text, 6).tokens == (7, 8, 9, 10, 11, 12)
    assert 1 <= len(cheap.propose(text, 6).tokens) <= 6
    assert steep.propose(text, 6).tokens == ()


# -- token trees (suffix:tree) ---------------------------------------------------------------------


def _raw(estimates: list[float], buckets: list[int]) -> list[float]:
    return [min(0.99, a) for a in estimates]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=texts_st, depth=st.integers(2, 8), max_depth=st.integers(1, 10))
def test_width_one_tree_is_the_walk(text: list[int], depth: int, max_depth: int) -> None:
    """A width-1 tree grown without a node limit is the walk's chain (same tokens, same order)."""
    from verispec.reference.suffix_draft import grow_tree

    tree = tree_of(text, depth)
    nodes = grow_tree([tree], text, max_depth, 64, 1, _raw)
    assert [n.token for n in nodes] == walk([tree], text, max_depth)
    assert [n.parent for n in nodes] == list(range(len(nodes)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    text=texts_st,
    depth=st.integers(2, 8),
    max_depth=st.integers(1, 6),
    width=st.integers(1, 4),
    max_nodes=st.integers(1, 24),
)
def test_tree_is_best_first(text: list[int], depth: int, max_depth: int, width: int, max_nodes: int) -> None:
    """Parents first, reach nonincreasing along the list, siblings distinct and each a continuation
    actually observed after the node's context; a node's reach is its parent's times its own
    estimate (siblings scaled to at most MAX_ACCEPT together)."""
    from verispec.reference.draft_control import MAX_ACCEPT
    from verispec.reference.suffix_draft import grow_tree

    tree = tree_of(text, depth)
    nodes = grow_tree([tree], text, max_depth, max_nodes, width, _raw)
    assert len(nodes) <= max_nodes
    reach = [1.0] + [n.reach for n in nodes]
    paths: list[list[int]] = [[]]
    for i, n in enumerate(nodes, start=1):
        assert 0 <= n.parent < i
        paths.append([*paths[n.parent], n.token])
        assert len(paths[i]) <= max_depth
        assert n.reach <= reach[n.parent] + 1e-12
        assert 0 < n.reach / reach[n.parent] <= min(n.estimate, MAX_ACCEPT) + 1e-12
        context = [*text, *paths[n.parent]]
        assert any(
            context[j : j + n.context + 1] == [*context[len(context) - n.context :], n.token]
            for j in range(len(context) - n.context)
        )  # "context + token" occurred in the text
    assert all(a >= b - 1e-12 for a, b in zip(reach[1:], reach[2:]))
    for v in range(len(nodes) + 1):
        kids = [n.token for n in nodes if n.parent == v]
        assert len(kids) == len(set(kids)) and len(kids) <= width
