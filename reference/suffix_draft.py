"""Suffix drafting: propose the most frequent observed continuation of the longest matching suffix.

SuffixDecoding (Oliaro et al. 2024) in its simplest exact form. Two depth-bounded suffix trees
(uncompressed: one node per token, depth <= ``depth``) count every substring of length <= depth:

    request tree   over this request's prompt + output so far (grown online, O(depth) per token)
    cache tree     over the outputs of earlier requests (bounded in tokens, oldest evicted first;
                   optionally persisted with ``--draft-cache PATH``, written atomically)

A node for the string s holds ``count`` = occurrences of s, ``total`` = occurrences of s followed by
a token (the sum of its children's counts) and ``last`` = a stamp of its most recent occurrence.

    propose(history, k):
      s      = the longest suffix of history (min_match <= |s| <= max_match, |s| < depth) that some
               tree has seen followed by a token; the request tree wins ties in length
      walk   from s's node, repeatedly to the child c with the largest (count(s c), last(s c)),
             while the path probability prod(count(child) / total(parent)) >= min_prob,
             until k tokens or depth is reached; then match again on history + tokens so far

Deterministic, so the proposal's law is one-hot (``Proposal.q is None``): verification is the same
lossless rule as for ngram, at any temperature. The frequency counts steer WHAT is proposed only.

Exact claims (tests/test_suffix_draft.py checks them against a brute-force scan of the text):
counts equal the true substring counts for lengths <= depth; the match is the longest qualifying
suffix; each step takes the most frequent continuation, ties to the most recent occurrence.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from verispec.reference.draft_cache_file import SEQUENCE_TOKENS, VERSION, read_texts, write_texts
from verispec.reference.draft_control import MAX_ACCEPT, Calibration, VerifyCost, best_k, best_size
from verispec.reference.errors import DraftError
from verispec.reference.seams import DraftContext, Proposal
from verispec.reference.suffix_index import SuffixIndex
from verispec.reference.tree_decode import TreeProposal, plain_pass, score_tree
from verispec.reference.tree_speculative import DraftTree

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from verispec.reference.tokenizer import Tokenizer

    F32 = npt.NDArray[np.float32]

DEPTH = 24  # longest substring a tree counts (match + continuation walked without re-matching)
MAX_MATCH = 16  # longest suffix matched
MIN_MATCH = 2  # shortest suffix acted on (see NGRAM_MIN in reference/drafts.py: 1-grams rarely pay)
MIN_PROB = 0.0  # path probability below which the walk stops
CACHE_TOKENS = 1 << 16  # cross-request cache bound (tokens over all remembered outputs)
CACHE_SEQUENCE_TOKENS = SEQUENCE_TOKENS  # one remembered output is cut to its first this many tokens
CACHE_FILE_BYTES = 64 * 1024 * 1024  # a cache file larger than this is refused before reading
CACHE_VERSION = VERSION
CALIBRATION_BUCKETS = 8  # matched-context lengths >= this share one calibration bucket
MAX_TIMED_ROWS = 64  # score() calls over more rows (the prompt's prefill) do not inform c(r)
TREE_WIDTH = 4  # ``suffix:tree``: most children per draft-tree node
TREE_NODES = 32  # most draft nodes per tree (the cost model usually verifies fewer)
PLAIN_PROBE = 64  # tree mode: a plain step at least every this many cycles, so c(1) stays measured


class Node:
    """A suffix-tree node: the string spelled by the path from the root."""

    __slots__ = ("children", "count", "total", "last")

    def __init__(self) -> None:
        self.children: dict[int, Node] = {}
        self.count = 0  # occurrences of the string
        self.total = 0  # occurrences followed by a token (sum of the children's counts)
        self.last = -1  # stamp of the most recent occurrence (ties between continuations)


class SuffixTree:
    """All substrings of length <= ``depth`` of the inserted text(s), with occurrence counts."""

    def __init__(self, depth: int = DEPTH) -> None:
        if depth < 2:
            raise DraftError(f"suffix tree depth must be >= 2, got {depth}")
        self.depth = depth
        self.root = Node()
        self.nodes = 1
        self._ends: list[Node] = [self.root]  # nodes of the suffixes (length < depth) ending at the last appended token
        self._stamp = 0

    # -- building -----------------------------------------------------------------------------------

    def append(self, token: int) -> None:
        """Extend the current text by ``token``: every suffix ending at it gains one occurrence."""
        self._stamp += 1
        grown: list[Node] = [self.root]
        for depth, node in enumerate(self._ends):  # self._ends[d] spells a suffix of length d
            child = self._bump(node, token, +1)
            if depth + 1 < self.depth:
                grown.append(child)
        self._ends = grown

    def end_text(self) -> None:
        """The next append starts a new text (no substring spans the boundary)."""
        self._ends = [self.root]

    def add_text(self, tokens: Sequence[int]) -> None:
        self.end_text()
        for t in tokens:
            self.append(t)
        self.end_text()

    def _bump(self, node: Node, token: int, delta: int) -> Node:
        child = node.children.get(token)
        if child is None:
            child = node.children[token] = Node()
            self.nodes += 1
        child.count += delta
        child.last = self._stamp
        node.total += delta
        return child

    # -- querying -----------------------------------------------------------------------------------

    def find(self, tokens: Sequence[int]) -> Node | None:
        node = self.root
        for t in tokens:
            child = node.children.get(t)
            if child is None:
                return None
            node = child
        return node

    def longest_match(self, history: Sequence[int], max_match: int, min_match: int) -> tuple[int, Node] | None:
        """``(m, node)`` for the longest suffix of ``history`` of length m in [min_match, max_match],
        m < depth, seen followed by a token (``node.total > 0``); None when there is none."""
        longest = min(max_match, self.depth - 1, len(history))
        for m in range(longest, max(1, min_match) - 1, -1):
            node = self.find(history[len(history) - m :])
            if node is not None and node.total > 0:
                return m, node
        return None


class TrieNode(Protocol):
    """What the walk reads of a node: :class:`Node` (the request tree) and
    :class:`reference.suffix_index.IndexNode` (the cache) both have it."""

    @property
    def children(self) -> Mapping[int, "TrieNode"]: ...
    @property
    def count(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def last(self) -> int: ...


class Trie(Protocol):
    """What the walk asks of a structure: :class:`SuffixTree` and :class:`SuffixIndex`."""

    @property
    def depth(self) -> int: ...

    def longest_match(self, history: Sequence[int], max_match: int, min_match: int) -> tuple[int, TrieNode] | None: ...


def best_child(node: TrieNode) -> tuple[int, TrieNode]:
    """The most frequent continuation; ties to the most recent occurrence (then the smaller id)."""
    token = max(node.children, key=lambda t: (node.children[t].count, node.children[t].last, -t))
    return token, node.children[token]


def walk(
    trees: Sequence[Trie],
    history: Sequence[int],
    k: int,
    max_match: int = MAX_MATCH,
    min_match: int = MIN_MATCH,
    min_prob: float = MIN_PROB,
) -> list[int]:
    """Up to ``k`` tokens continuing ``history`` (the algorithm in the module docstring)."""
    return [step.token for step in walk_steps(trees, history, k, max_match, min_match, min_prob)]


@dataclass(frozen=True)
class Step:
    """One walked token: ``estimate`` = count(child) / (total(parent) + 2 / context), its observed
    frequency smoothed toward 0 for rarely seen SHORT contexts (seen once after 2 matched tokens:
    1/2; after 8: 4/5: a long context seen once already predicts well); ``context`` = the length of
    the context it was chosen in (match length + tokens walked since the match)."""

    token: int
    estimate: float
    context: int


def walk_steps(
    trees: Sequence[Trie],
    history: Sequence[int],
    k: int,
    max_match: int = MAX_MATCH,
    min_match: int = MIN_MATCH,
    min_prob: float = MIN_PROB,
) -> list[Step]:
    """:func:`walk`, with each token's :class:`Step` evidence."""
    steps: list[Step] = []
    while len(steps) < k:
        context = [*history, *(s.token for s in steps)] if steps else history
        best: tuple[int, TrieNode, Trie] | None = None
        for tree in trees:  # earlier trees win ties in match length
            found = tree.longest_match(context, max_match, min_match)
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], found[1], tree)
        if best is None:
            break
        depth, node, tree = best
        prob = 1.0
        stepped = False
        while depth < tree.depth and len(steps) < k and node.total > 0:
            token, child = best_child(node)
            prob *= child.count / node.total
            if prob < min_prob:
                break
            steps.append(Step(token, child.count / (node.total + 2 / depth), depth))
            node, depth, stepped = child, depth + 1, True
        if not stepped:
            break
    return steps


@dataclass(frozen=True)
class TreeNode:
    """One node of a grown draft tree: its parent's id (0 = the root), its token, the raw
    :class:`Step`-style ``estimate`` and ``context``, and ``reach`` = the product of the
    calibrated estimates along its path (the estimated probability that it is accepted)."""

    parent: int
    token: int
    estimate: float
    context: int
    reach: float


_State = tuple[TrieNode, int, Trie]  # (suffix-tree node, its string's length, its tree)


def continuations(
    trees: Sequence[Trie],
    context: Sequence[int],
    state: _State | None,
    width: int,
    max_match: int = MAX_MATCH,
    min_match: int = MIN_MATCH,
) -> list[tuple[int, float, int, _State]]:
    """Up to ``width`` observed continuations of ``context``, most frequent first (ties: most
    recent, then smaller id: the first is :func:`walk_steps`'s choice), as ``(token, estimate,
    context length, state after it)``. ``state`` is where the previous step left off in a suffix
    tree; None, a full-depth node or a leaf means: match the longest suffix again, as the walk does."""
    if state is None or state[1] >= state[2].depth or state[0].total == 0:
        best: _State | None = None
        for tree in trees:  # earlier trees win ties in match length
            found = tree.longest_match(context, max_match, min_match)
            if found is not None and (best is None or found[0] > best[1]):
                best = (found[1], found[0], tree)
        if best is None:
            return []
        state = best
    node, depth, tree = state
    kids = heapq.nsmallest(width, node.children.items(), key=lambda kv: (-kv[1].count, -kv[1].last, kv[0]))
    return [(t, c.count / (node.total + 2 / depth), depth, (c, depth + 1, tree)) for t, c in kids]


def grow_tree(
    trees: Sequence[Trie],
    history: Sequence[int],
    max_depth: int,
    max_nodes: int,
    width: int,
    calibrate: Callable[[list[float], list[int]], list[float]],
    max_match: int = MAX_MATCH,
    min_match: int = MIN_MATCH,
) -> list[TreeNode]:
    """A draft tree grown best-first: repeatedly add the candidate with the largest ``reach``.

    Every added node offers its ``width`` most frequent continuations as candidates; their reach
    is the node's times each one's calibrated estimate (siblings' estimates scaled to sum to at
    most MAX_ACCEPT: they are disjoint events). A child's reach never exceeds its parent's, so the
    nodes come out in nonincreasing reach and every prefix of the list is a tree (parents first):
    node i of the list is draft-tree node i + 1, and the cost model may cut the list anywhere
    (:func:`reference.draft_control.best_size`). With ``width == 1`` this is the walk's chain.
    """
    nodes: list[TreeNode] = []
    paths: list[list[int]] = [[]]
    depth = [0]
    order = itertools.count()
    heap: list[tuple[float, int, int, int, float, int, _State]] = []

    def offer(parent: int, reach: float, state: _State | None) -> None:
        found = continuations(trees, [*history, *paths[parent]], state, width, max_match, min_match)
        if not found:
            return
        buckets = [min(c, CALIBRATION_BUCKETS) for _, _, c, _ in found]
        accept = calibrate([e for _, e, _, _ in found], buckets)
        total = sum(accept)
        scale = MAX_ACCEPT / total if total > MAX_ACCEPT else 1.0
        for (token, estimate, context, after), a in zip(found, accept):
            heapq.heappush(heap, (-reach * a * scale, next(order), parent, token, estimate, context, after))

    if max_depth < 1 or max_nodes < 1:
        return nodes
    offer(0, 1.0, None)
    while heap and len(nodes) < max_nodes:
        neg_reach, _, parent, token, estimate, context, after = heapq.heappop(heap)
        nodes.append(TreeNode(parent, token, estimate, context, -neg_reach))
        node_id = len(nodes)
        paths.append([*paths[parent], token])
        depth.append(depth[parent] + 1)
        if depth[node_id] < max_depth:
            offer(node_id, -neg_reach, after)
    return nodes


# -- the cross-request cache ------------------------------------------------------------------------


class SuffixCache:
    """Earlier requests' outputs, at most ``max_tokens`` tokens (oldest evicted), queried through
    a :class:`reference.suffix_index.SuffixIndex` over them (built on the first query after a
    change: linear in the kept tokens, each node's children on first use)."""

    def __init__(self, max_tokens: int = CACHE_TOKENS, depth: int = DEPTH, fingerprint: str = "") -> None:
        if max_tokens < 0:
            raise DraftError(f"draft cache size must be >= 0 tokens, got {max_tokens}")
        if depth < 2:
            raise DraftError(f"suffix tree depth must be >= 2, got {depth}")
        self.max_tokens = max_tokens
        self.depth = depth
        self.fingerprint = fingerprint  # of the vocabulary the ids belong to ("" = unchecked)
        self.texts: deque[tuple[int, ...]] = deque()
        self.tokens = 0
        self._index: SuffixIndex | None = None

    @property
    def tree(self) -> SuffixIndex:
        """The structure over the kept texts (rebuilt after :meth:`remember` changed them)."""
        if self._index is None:
            self._index = SuffixIndex(self.texts, self.depth)
        return self._index

    def remember(self, output: Sequence[int]) -> None:
        """Add one output (cut to CACHE_SEQUENCE_TOKENS), evicting the oldest past ``max_tokens``."""
        text = tuple(int(t) for t in output[:CACHE_SEQUENCE_TOKENS])
        if len(text) < 2 or len(text) > self.max_tokens:
            return
        while self.tokens + len(text) > self.max_tokens:
            self.tokens -= len(self.texts.popleft())
        self.texts.append(text)
        self.tokens += len(text)
        self._index = None

    def save(self, path: Path) -> None:
        """Write the cache atomically, in the current format (:mod:`reference.draft_cache_file`)."""
        write_texts(path, self.texts, fingerprint=self.fingerprint, depth=self.depth, max_tokens=self.max_tokens)

    @classmethod
    def load(
        cls, path: Path, n_vocab: int, fingerprint: str = "", max_tokens: int = CACHE_TOKENS, depth: int = DEPTH
    ) -> "SuffixCache":
        """The cache at ``path`` (an empty one if nothing is there); DraftError if it is not a
        regular file, larger than CACHE_FILE_BYTES, malformed, of another version or vocabulary,
        or holds an id outside [0, n_vocab) (:mod:`reference.draft_cache_file`). Linear in the
        file: every id is checked once (vectorized), only the texts that survive eviction are
        kept, and no structure is built until the first query."""
        cache = cls(max_tokens, depth, fingerprint)
        if not os.path.lexists(path):
            return cache
        for text in read_texts(path, n_vocab, fingerprint, max_tokens, CACHE_FILE_BYTES):
            cache.texts.append(text)
            cache.tokens += len(text)
        return cache

    @staticmethod
    def check_writable(path: Path) -> None:
        """DraftError now, before any work, if :meth:`save` could not write ``path``: not a
        regular file where one exists, or a directory that cannot take the temporary file."""
        if os.path.lexists(path):
            from verispec.reference.atomic import output_file
            from verispec.reference.errors import OutputError

            try:
                output_file(path)  # save()'s rule, now: a regular file (a symlink only when asked)
            except OutputError as exc:
                raise DraftError(f"draft cache {path} is not a regular file: {exc}") from None
        folder = path.parent
        while not folder.exists() and folder != folder.parent:  # save() creates missing folders
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise DraftError(f"draft cache {path} cannot be written: {folder} is not a writable directory")


def _uncalibrated(estimates: list[float], buckets: list[int]) -> list[float]:
    return [min(MAX_ACCEPT, a) for a in estimates]


def vocab_fingerprint(tokenizer: "Tokenizer") -> str:
    """sha256 over the vocabulary's token texts: a cache's ids mean nothing under another vocabulary."""
    h = hashlib.sha256()
    for i in range(tokenizer.vocab_size):
        h.update(tokenizer.token_text(i).encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


# -- the draft source -------------------------------------------------------------------------------


class RequestMemory:
    """What a draft keeps of a request for the cross-request cache: the ids seen (prompt, then
    output) and where the prompt ends. Shared by :class:`SuffixDraft` and ``--draft auto``."""

    cache: SuffixCache | None
    cache_path: Path | None
    seen: list[int]
    prompt_len: int | None

    def remember_request(self) -> None:
        """Put the output seen so far into the cache (and persist it); idempotent per request."""
        if self.cache is not None and self.prompt_len is not None:
            self.cache.remember(self.seen[self.prompt_len :])
            if self.cache_path is not None:
                self.cache.save(self.cache_path)
        self.prompt_len = None

    def finish(self, output: Sequence[int]) -> None:
        """The request ended with ``output`` (all generated ids): remember it, persist the cache."""
        if self.prompt_len is not None:
            self.seen = [*self.seen[: self.prompt_len], *output]
        self.remember_request()


class SuffixDraft(RequestMemory):
    """``--draft suffix``: the request tree, then the cross-request cache (see the module docstring).

    With ``control`` (the default) each cycle verifies only the prefix of the walk that the cost
    model of :mod:`reference.draft_control` predicts to pay (possibly none: a plain step), from the
    walk's frequency estimates, calibrated by what was accepted, and the verify-cost curve timed on
    this draft's own score() calls.

    With ``tree_width`` > 0 (``--draft suffix:tree``) it proposes token TREES instead
    (:meth:`propose_tree`, verified in one pass by :mod:`reference.tree_decode`): up to
    ``tree_width`` continuations per node, grown best-first by estimated reach, cut by the same cost
    model (:func:`reference.draft_control.best_size`) timed on whole tree cycles.
    """

    def __init__(
        self,
        cache: SuffixCache | None = None,
        cache_path: Path | None = None,
        *,
        depth: int = DEPTH,
        max_match: int = MAX_MATCH,
        min_match: int = MIN_MATCH,
        min_prob: float = MIN_PROB,
        control: bool = True,
        tree_width: int = 0,
        tree_nodes: int = TREE_NODES,
    ) -> None:
        if tree_width < 0 or tree_nodes < 1:
            raise DraftError(f"tree width must be >= 0 and tree nodes >= 1, got {tree_width} and {tree_nodes}")
        self.name = "suffix:tree" if tree_width else "suffix"
        self.tree_width = tree_width
        self.tree_nodes = tree_nodes
        self._since_plain = 0  # cycles since the last plain step (tree mode)
        self._last_tree: tuple[int, list[TreeNode]] | None = None
        self.cache = cache
        self.cache_path = cache_path
        self.depth, self.max_match, self.min_match, self.min_prob = depth, max_match, min_match, min_prob
        self.control = control
        self.cost = VerifyCost()
        self.calibration = Calibration()
        self.draft_passes = 0
        self.draft_time_s = 0.0
        self.ctx: DraftContext | None = None
        self.tree = SuffixTree(depth)
        self.seen: list[int] = []  # the text the request tree holds (prompt + output so far)
        self.prompt_len: int | None = None
        self._last: tuple[int, list[Step], list[int]] | None = None  # (history length, proposal, buckets)

    def start(self, context: DraftContext) -> None:
        self.remember_request()  # the previous request's output joins the cache
        self.ctx = context
        self.draft_passes, self.draft_time_s = 0, 0.0
        self.tree = SuffixTree(self.depth)
        self.seen, self.prompt_len, self._last, self._last_tree = [], None, None, None

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        started = time.perf_counter()
        self._learn(history)
        self._sync(history)
        trees: list[Trie] = [self.tree] if self.cache is None else [self.tree, self.cache.tree]
        steps = walk_steps(trees, history, k, self.max_match, self.min_match, self.min_prob)
        if self.control and steps:
            buckets = [min(s.context, CALIBRATION_BUCKETS) for s in steps]
            accept = self.calibration.apply([s.estimate for s in steps], buckets)
            steps = steps[: best_k(accept, self.cost)]
            self._last = (len(history), steps, buckets[: len(steps)])
        tokens = [s.token for s in steps]
        self.draft_time_s += time.perf_counter() - started
        return Proposal(tuple(tokens))

    # -- token trees ---------------------------------------------------------------------------------

    def propose_tree(self, history: Sequence[int], max_depth: int, max_nodes: int) -> TreeProposal:
        """A draft tree after ``history`` (deterministic: one-hot laws), cut by the cost model."""
        started = time.perf_counter()
        first = self.prompt_len is None  # the prompt's pass: it does not time c(1)
        self._learn_tree(history)
        self._sync(history)
        nodes: list[TreeNode] = []
        probe = self.control and not first and (1 not in self.cost.seconds or self._since_plain >= PLAIN_PROBE)
        if not probe:
            trees: list[Trie] = [self.tree] if self.cache is None else [self.tree, self.cache.tree]
            nodes = grow_tree(
                trees,
                history,
                max_depth,
                min(max_nodes, self.tree_nodes),
                max(1, self.tree_width),
                self.calibration.apply if self.control else _uncalibrated,
                self.max_match,
                self.min_match,
            )
            if self.control:
                nodes = nodes[: best_size([n.reach for n in nodes], self.cost)]
        self._since_plain = 0 if not nodes else self._since_plain + 1
        self._last_tree = (len(history), nodes) if nodes else None
        tree = DraftTree((-1, *(n.parent for n in nodes)), (-1, *(n.token for n in nodes)))
        self.draft_time_s += time.perf_counter() - started
        return TreeProposal(tree)

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> "F32":
        assert self.ctx is not None, "start() first"
        return score_tree(self.ctx.target, self.ctx.cache, pending, tree)

    def observe_cycle(self, rows: int, seconds: float) -> None:
        if rows <= MAX_TIMED_ROWS:
            self.cost.observe(rows, seconds)

    def _learn_tree(self, history: Sequence[int]) -> None:
        """Calibrate on the previous tree: below the root and each accepted node, every child was
        tried, and the one whose token came next (if any) was accepted."""
        if self._last_tree is None:
            return
        base, nodes = self._last_tree
        self._last_tree = None
        estimates: list[float] = []
        buckets: list[int] = []
        hits: list[bool] = []
        node, at = 0, base
        while at < len(history):
            kids = [i for i, n in enumerate(nodes, start=1) if n.parent == node]
            nxt = next((i for i in kids if nodes[i - 1].token == history[at]), None)
            for i in kids:
                estimates.append(nodes[i - 1].estimate)
                buckets.append(min(nodes[i - 1].context, CALIBRATION_BUCKETS))
                hits.append(i == nxt)
            if nxt is None:
                break
            node, at = nxt, at + 1
        if estimates:
            self.calibration.observe_outcomes(estimates, buckets, hits)

    def _learn(self, history: Sequence[int]) -> None:
        """Calibrate on the previous proposal: its accepted drafts are a prefix of what followed."""
        if self._last is None:
            return
        base, proposed, buckets = self._last
        self._last = None
        if not proposed or len(history) <= base:
            return
        accepted = 0
        for step, y in zip(proposed, history[base:]):
            if step.token != y:
                break
            accepted += 1
        self.calibration.observe([s.estimate for s in proposed], buckets, accepted)

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> "F32":
        assert self.ctx is not None, "start() first"
        started = time.perf_counter()
        # the plain verification pass, as reference.drafts.target_score (not imported: reference.drafts
        # builds this source, and imports stay acyclic): one forward of pending + drafts
        last = plain_pass(self.ctx.target, self.ctx.cache, pending) if not drafts else None
        if last is not None:
            return last  # the prompt's pass: not a verification pass, not timed
        span = [*pending, *drafts]
        logits: "F32" = self.ctx.target.forward(span, self.ctx.cache).logits[len(pending) - 1 :]
        rows = len(pending) + len(drafts)
        if rows <= MAX_TIMED_ROWS:
            self.cost.observe(rows, time.perf_counter() - started)
        return logits

    def _sync(self, history: Sequence[int]) -> None:
        """Grow the request tree to ``history`` (committed text only grows; anything else rebuilds)."""
        if self.prompt_len is None:
            self.prompt_len = len(history)
        n = len(self.seen)
        if len(history) < n or list(history[:n]) != self.seen:
            self.tree, self.seen = SuffixTree(self.depth), []
            n = 0
        for t in history[n:]:
            self.tree.append(int(t))
        self.seen.extend(int(t) for t in history[n:])
