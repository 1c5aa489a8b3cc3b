"""The cross-request draft cache's suffix structure: a depth-bounded suffix trie built lazily.

:class:`reference.suffix_draft.SuffixTree` builds one node per distinct substring of length <=
depth as the text arrives: right for the request tree (grown by one token per step), but for a
cache of up to 65,536 kept tokens that is up to 1.5 million Python objects built before the
first proposal (6-10 s). :class:`SuffixIndex` answers the same questions over the same texts
and builds only what a query touches:

    tokens   the kept texts concatenated, each followed by a separator (-1), one NumPy array
    node s   the ascending start positions of the occurrences of s (s holds no separator, so no
             occurrence spans two texts); count = how many; last = the END position of the
             newest occurrence (positions increase with the order the texts were remembered,
             so it orders occurrences as the tree's stamps do)
    children of s (computed on first use, then kept): the token after each occurrence, grouped
             by a stable sort, so each child's starts stay ascending; an occurrence followed by
             the separator has no continuation (so ``total`` = the occurrences followed by a
             token, the sum of the children's counts); a node of length ``depth`` has none

Building is one concatenation (linear in the kept tokens); a node's children cost a sort of its
occurrences, paid once, on the first query that reaches it. Node for node it equals the tree
over the same texts (tests/test_suffix_draft.py compares counts, totals and proposals), so the
walk in :mod:`reference.suffix_draft` proposes exactly what it proposed with the tree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
SEPARATOR = -1


Starts = (
    I64 | list[int]
)  # ascending occurrence starts: an array, or a list for a few (a Python loop beats NumPy's call overhead)
SMALL = 48  # a node with at most this many occurrences groups its children in a Python loop


class IndexNode:
    """The string spelled by its occurrences' first ``length`` tokens (see the module docstring)."""

    __slots__ = ("_index", "_starts", "length", "count", "last", "_children", "_total")

    def __init__(self, index: "SuffixIndex", starts: Starts, length: int, count: int, last: int) -> None:
        self._index = index
        self._starts = starts  # ascending start positions of the occurrences
        self.length = length
        self.count = count
        self.last = last
        self._children: Mapping[int, IndexNode] | None = None
        self._total = 0

    @property
    def children(self) -> Mapping[int, "IndexNode"]:
        if self._children is None:
            self._children, self._total = self._index.children_of(self._starts, self.length)
        return self._children

    @property
    def total(self) -> int:
        """Occurrences followed by a token (the sum of the children's counts)."""
        if self._children is None:
            self._children, self._total = self._index.children_of(self._starts, self.length)
        return self._total


class _Children(Mapping[int, IndexNode]):
    """A node's continuations: token -> child, each child made on first access."""

    __slots__ = ("_index", "_keys", "_bounds", "_starts", "_length", "_made")

    def __init__(self, index: "SuffixIndex", keys: I64, bounds: I64, starts: I64, length: int) -> None:
        self._index = index
        self._keys = keys  # [c] distinct next tokens, ascending
        self._bounds = bounds  # [c + 1] child i's starts are starts[bounds[i]:bounds[i + 1]]
        self._starts = starts  # the occurrences grouped by next token (ascending within a group)
        self._length = length  # the child's string length
        self._made: dict[int, IndexNode] = {}

    def __getitem__(self, token: int) -> IndexNode:
        made = self._made.get(token)
        if made is not None:
            return made
        i = int(np.searchsorted(self._keys, token))
        if i >= self._keys.size or int(self._keys[i]) != token:
            raise KeyError(token)
        starts = self._starts[self._bounds[i] : self._bounds[i + 1]]
        node = IndexNode(self._index, starts, self._length, int(starts.size), int(starts[-1]) + self._length - 1)
        self._made[token] = node
        return node

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys.tolist())

    def __len__(self) -> int:
        return int(self._keys.size)

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, int):
            return False
        i = int(np.searchsorted(self._keys, token))
        return i < self._keys.size and int(self._keys[i]) == token


_NO_KEYS = np.zeros(0, dtype=np.int64)


class SuffixIndex:
    """Every substring of length <= ``depth`` of ``texts`` (each a separate text), with counts."""

    def __init__(self, texts: Sequence[Sequence[int]], depth: int) -> None:
        self.depth = depth
        parts: list[I64] = []
        for text in texts:
            parts.append(np.asarray(text, dtype=np.int64))
            parts.append(np.full(1, SEPARATOR, dtype=np.int64))
        self.tokens: I64 = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        self._tokens = self.tokens.tolist()  # the same, for the Python loop over a few occurrences
        starts = np.flatnonzero(self.tokens != SEPARATOR).astype(np.int64)
        self.root = IndexNode(self, starts, 0, 0, -1)  # the empty string (count 0, as the tree's root)

    def children_of(self, starts: Starts, length: int) -> tuple[Mapping[int, IndexNode], int]:
        """(the continuations of the string of length ``length`` occurring at ``starts``, their total)."""
        if length >= self.depth or len(starts) == 0:
            return {}, 0
        if len(starts) <= SMALL:
            tokens = self._tokens
            listed = starts if isinstance(starts, list) else starts.tolist()
            if len(listed) == 1:  # the commonest node in a large cache: one occurrence, one continuation
                p = listed[0]
                t = tokens[p + length]
                return ({}, 0) if t == SEPARATOR else ({t: IndexNode(self, listed, length + 1, 1, p + length)}, 1)
            groups: dict[int, list[int]] = {}
            total = 0
            for p in listed:
                t = tokens[p + length]
                if t != SEPARATOR:
                    groups.setdefault(t, []).append(p)
                    total += 1
            return {t: IndexNode(self, g, length + 1, len(g), g[-1] + length) for t, g in groups.items()}, total
        array = np.asarray(starts, dtype=np.int64)
        nxt = self.tokens[array + length]
        followed = array[nxt != SEPARATOR]
        order = np.argsort(nxt[nxt != SEPARATOR], kind="stable")  # stable: each group's starts stay ascending
        grouped, keys_sorted = followed[order], nxt[nxt != SEPARATOR][order]
        cuts = np.flatnonzero(keys_sorted[1:] != keys_sorted[:-1]) + 1
        bounds = np.concatenate([[0], cuts, [keys_sorted.size]]).astype(np.int64)
        keys = keys_sorted[bounds[:-1]] if keys_sorted.size else _NO_KEYS
        return _Children(self, keys, bounds, grouped, length + 1), int(followed.size)

    def find(self, tokens: Sequence[int]) -> IndexNode | None:
        node = self.root
        for t in tokens:
            child = node.children.get(int(t))
            if child is None:
                return None
            node = child
        return node

    def longest_match(self, history: Sequence[int], max_match: int, min_match: int) -> tuple[int, IndexNode] | None:
        """As :meth:`reference.suffix_draft.SuffixTree.longest_match`."""
        longest = min(max_match, self.depth - 1, len(history))
        for m in range(longest, max(1, min_match) - 1, -1):
            node = self.find(history[len(history) - m :])
            if node is not None and node.total > 0:
                return m, node
        return None

    @property
    def nodes(self) -> int:
        """How many nodes the tree over the same texts has (1 + the distinct substrings of length
        <= depth): a full traversal that builds every node, for tests, never on the serve path."""
        count = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count
