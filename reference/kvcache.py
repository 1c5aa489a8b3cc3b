"""The key/value cache: what every layer has already computed for the committed positions.

Slots are filled in order. Slot ``s`` holds, for every layer, the rotated key and the value of one
token, and ``positions[s]`` holds that token's position (the attention mask is computed from
positions, not slots, so a sliding window and causality mean the same thing whatever the slot).

``length`` is the number of committed slots. A forward pass writes its span into the slots
``[length, length + T)`` of every layer it runs, then commits them (:meth:`KVCache.advance`).
Rolling back after a rejected speculation is :meth:`KVCache.truncate`: it only moves ``length``, in
O(1); the stale slots past it are simply overwritten by the next span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ContextOverflow, ModelError

if TYPE_CHECKING:
    from verispec.reference.config import Config

_INITIAL_SLOTS = 64


class KVCache:
    """Per-layer K and V arrays ``[L, n_kv, slots, head_dim]`` float32, grown on demand up to
    ``capacity`` slots, plus the position of every slot."""

    def __init__(self, config: "Config", capacity: int) -> None:
        if capacity <= 0:
            raise ModelError(f"KV cache capacity {capacity} must be positive")
        self.config = config
        self.capacity = capacity
        self.length = 0
        slots = self._initial_slots(capacity)
        self.k: npt.NDArray[np.float32] = self._zeros(slots)  # [L, n_kv, S, d]
        self.v: npt.NDArray[np.float32] = self._zeros(slots)  # [L, n_kv, S, d]
        self.positions: npt.NDArray[np.int64] = np.zeros(slots, dtype=np.int64)  # [S]

    def _initial_slots(self, capacity: int) -> int:
        """Slots allocated up front (a few: the cache grows by doubling as a span needs)."""
        return min(capacity, _INITIAL_SLOTS)

    def _zeros(self, slots: int) -> npt.NDArray[np.float32]:
        """One of K, V for ``slots`` slots, zeroed: ``[L, n_kv, slots, d]``."""
        cfg = self.config
        return np.zeros((cfg.n_layer, cfg.n_head_kv, slots, cfg.head_dim), dtype=np.float32)

    def truncate(self, length: int) -> None:
        """Forget every slot at or after ``length`` (0 <= length <= self.length). O(1)."""
        if not 0 <= length <= self.length:
            raise ModelError(f"cannot truncate a KV cache of length {self.length} to {length}")
        self.length = length

    def keep(self, start: int, slots: Sequence[int]) -> None:
        """Keep, past the first ``start`` slots, only ``slots`` (committed, strictly increasing,
        each ``>= start``), moved down to ``start, start + 1, ...``; the length becomes
        ``start + len(slots)``. After a token-tree verification this keeps the accepted path's K, V
        and positions and drops the other candidates: O(len(slots)) copies (a slot already in place
        is not copied), whatever the tree's size.

        Moving in increasing order is safe: slot j's destination ``start + j`` is below every later
        source (``slots[j'] > slots[j] >= start + j``), so no source is overwritten before it is read.
        """
        rows = [int(s) for s in slots]
        if not 0 <= start <= self.length:
            raise ModelError(f"cannot keep slots after {start} in a KV cache of length {self.length}")
        for j, slot in enumerate(rows):
            if not start + j <= slot < self.length or (j and slot <= rows[j - 1]):
                raise ModelError(f"slots to keep must be strictly increasing committed slots >= {start}, got {rows}")
        for j, slot in enumerate(rows):
            if slot != start + j:
                self.k[:, :, start + j] = self.k[:, :, slot]
                self.v[:, :, start + j] = self.v[:, :, slot]
                self.positions[start + j] = self.positions[slot]
        self.length = start + len(rows)

    def reserve(self, n_tokens: int, start: int | None = None) -> int:
        """Make room for ``n_tokens`` slots from ``start`` (default: ``length``); return ``start``.

        Raises :class:`ContextOverflow` before anything is written when they do not fit.
        """
        start = self.length if start is None else start
        if not 0 <= start <= self.length:
            raise ModelError(f"span start {start} is outside the committed length {self.length}")
        end = start + n_tokens
        if end > self.capacity:
            raise ContextOverflow(
                f"{n_tokens} tokens from slot {start} need {end} slots; the KV cache holds {self.capacity}"
            )
        slots = self.k.shape[2]
        if end > slots:
            grown = min(self.capacity, max(end, 2 * slots))
            self.k = self._grown(self.k, grown)
            self.v = self._grown(self.v, grown)
            positions = np.zeros(grown, dtype=np.int64)
            positions[:slots] = self.positions
            self.positions = positions
        return start

    def store(
        self,
        layer: int,
        start: int,
        k: npt.NDArray[np.float32],  # [n_kv, T, d]
        v: npt.NDArray[np.float32],  # [n_kv, T, d]
        positions: npt.NDArray[np.int64],  # [T]
    ) -> None:
        """Write one layer's keys and values for the span at slots ``[start, start + T)``.

        Call :meth:`reserve` first. Does not commit: :meth:`advance` does.
        """
        end = start + k.shape[1]
        self.k[layer, :, start:end] = k
        self.v[layer, :, start:end] = v
        self.positions[start:end] = positions

    def keys(self, layer: int, end: int) -> npt.NDArray[np.float32]:
        """Layer ``layer``'s keys of slots ``[0, end)``: ``[n_kv, end, d]`` (a view)."""
        return self.k[layer, :, :end]

    def values(self, layer: int, end: int) -> npt.NDArray[np.float32]:
        """Layer ``layer``'s values of slots ``[0, end)``: ``[n_kv, end, d]`` (a view)."""
        return self.v[layer, :, :end]

    def advance(self, n_tokens: int) -> None:
        """Commit ``n_tokens`` more slots (written by :meth:`store` for every layer)."""
        if not 0 <= self.length + n_tokens <= self.k.shape[2]:
            raise ModelError(f"cannot commit {n_tokens} slots past length {self.length}")
        self.length += n_tokens

    def _grown(self, a: npt.NDArray[np.float32], slots: int) -> npt.NDArray[np.float32]:
        """``a`` ``[L, n_kv, S, d]`` copied into the first S of ``slots`` slots."""
        grown = self._zeros(slots)
        grown[:, :, : a.shape[2]] = a
        return grown
