"""Next-token logits after a prefix, through ONE KV cache that follows the caller's path.

A decode loop asks for the logits after a prefix that mostly extends the one it asked for last
(a draft token, the verified span) or a shorter one (a rollback). :class:`PathRows` keeps the ids
whose K,V its cache holds and the logits row after each of them; for a new prefix it truncates the
cache to the longest common prefix (rollback is O(1)) and runs only the remaining ids, so a whole
generation costs one token's forward per new prefix instead of one forward of the whole prefix
(:class:`spec.decoder.check.ReferenceLogits`, whose memo of every prefix also grows without bound).

The rows are our reference forward's, computed in spans of other lengths than one pass over the
whole prefix: equal up to float32 rounding (the batch-shape noise, ~1e-5 on the tiny models),
as the rows of any incremental decoder are; a loop on these rows is a decoder of our numerics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
CAPACITY = 512  # cache slots first allocated (grown by doubling up to the context length)


class PathRows:
    """``rows(prefix) -> logits [V]`` after ``prefix`` (prompt + tokens, non-empty)."""

    def __init__(self, model: Any, capacity: int = CAPACITY) -> None:
        self.model = model
        self.capacity = min(capacity, int(model.config.context_length))
        self.cache = model.new_cache(self.capacity)
        self.ids: list[int] = []
        self.rows: list[F32] = []  # rows[i]: the logits after ids[: i + 1]
        self.forwards = 0

    def __call__(self, prefix: Sequence[int]) -> F32:
        ids = [int(t) for t in prefix]
        if not ids:
            raise ValueError("the logits after an empty prefix are not defined")
        common = self._common(ids)
        if common == len(ids):
            return self.rows[common - 1]
        if len(ids) > self.capacity:
            self._grow(len(ids))
            common = 0
        self.cache.truncate(common)
        del self.ids[common:], self.rows[common:]
        out = self.model.forward(ids[common:], self.cache).logits  # [len(ids) - common, V]
        self.forwards += 1
        self.ids.extend(ids[common:])
        self.rows.extend(np.asarray(row, dtype=np.float32) for row in out)
        return self.rows[-1]

    def _common(self, ids: list[int]) -> int:
        n = min(len(ids), len(self.ids))
        for i in range(n):
            if ids[i] != self.ids[i]:
                return i
        return n

    def _grow(self, needed: int) -> None:
        limit = int(self.model.config.context_length)
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        self.capacity = min(capacity, limit)
        self.cache = self.model.new_cache(self.capacity)
        self.ids, self.rows = [], []
