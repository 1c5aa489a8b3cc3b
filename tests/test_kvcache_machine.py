"""The KV cache as a state machine: append / verify / rewrite / rollback against a plain list model.

The model is a Python list of committed slots, each ``(keys [L, n_kv, d], values, position)``.
Operations, as the decode loop and the drafts use them:

    append(T)           reserve, store every layer, advance           (a forward pass)
    verify(k, a)        append k + 1 slots, then truncate to before + 1 + a   (speculative cycle)
    rewrite(s, T)       store some layers at committed slots [s, s + T) without advancing
                        (layer-skip verification writes layers M..L-1 over its drafted span)
    rollback(n)         truncate to n <= length

Invariants after every step: ``length`` equals the list's length; keys, values and positions of the
committed slots equal the list's; a bad truncate or an overflowing reserve raises and changes
nothing.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.support.profiles import examples
from verispec.reference.errors import ContextOverflow, ModelError
from verispec.reference.kvcache import KVCache

N_LAYER, N_KV, HEAD_DIM, CAPACITY = 3, 2, 4, 150  # capacity > 64: growth is exercised

F32 = npt.NDArray[np.float32]


class KVCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        config: Any = SimpleNamespace(n_layer=N_LAYER, n_head_kv=N_KV, head_dim=HEAD_DIM)
        self.cache = KVCache(config, CAPACITY)
        self.slots: list[tuple[F32, F32, int]] = []  # the model: committed (k [L, n_kv, d], v, pos)
        self.counter = 0

    def _fresh(self, n: int) -> tuple[F32, F32, npt.NDArray[np.int64]]:
        """Distinct values for n new slots: k, v ``[L, n_kv, n, d]``, positions ``[n]``."""
        base = self.counter + np.arange(n, dtype=np.float32)
        self.counter += n
        k = np.broadcast_to(base[None, None, :, None], (N_LAYER, N_KV, n, HEAD_DIM)) + np.arange(
            HEAD_DIM, dtype=np.float32
        )
        v = -k * 0.5
        positions = self.cache.length + np.arange(n, dtype=np.int64)
        return np.ascontiguousarray(k, dtype=np.float32), np.ascontiguousarray(v, dtype=np.float32), positions

    def _write(self, start: int, n: int, layers: range) -> list[tuple[F32, F32, int]]:
        k, v, positions = self._fresh(n)
        positions = start + np.arange(n, dtype=np.int64)
        self.cache.reserve(n, start)
        for layer in layers:
            self.cache.store(layer, start, k[layer], v[layer], positions)
        return [(k[:, :, i], v[:, :, i], int(positions[i])) for i in range(n)]

    @rule(n=st.integers(1, 9))
    def append(self, n: int) -> None:
        if len(self.slots) + n > CAPACITY:
            before = self.cache.length
            with pytest.raises(ContextOverflow):
                self.cache.reserve(n)
            assert self.cache.length == before
            return
        new = self._write(self.cache.length, n, range(N_LAYER))
        self.cache.advance(n)
        self.slots.extend(new)

    @rule(k=st.integers(1, 6), data=st.data())
    def verify(self, k: int, data: st.DataObject) -> None:
        if len(self.slots) + k + 1 > CAPACITY:
            return
        accepted = data.draw(st.integers(0, k), label="accepted")
        before = self.cache.length
        new = self._write(before, k + 1, range(N_LAYER))
        self.cache.advance(k + 1)
        self.cache.truncate(before + 1 + accepted)
        self.slots.extend(new[: 1 + accepted])

    @precondition(lambda self: len(self.slots) > 0)
    @rule(data=st.data())
    def rewrite(self, data: st.DataObject) -> None:
        length = len(self.slots)
        start = data.draw(st.integers(0, length - 1), label="start")
        n = data.draw(st.integers(1, length - start), label="n")
        first = data.draw(st.integers(0, N_LAYER - 1), label="first layer")
        new = self._write(start, n, range(first, N_LAYER))
        for i, (k, v, pos) in enumerate(new):
            old_k, old_v, _ = self.slots[start + i]
            k_mixed, v_mixed = old_k.copy(), old_v.copy()
            k_mixed[first:], v_mixed[first:] = k[first:], v[first:]
            self.slots[start + i] = (k_mixed, v_mixed, pos)

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, len(self.slots)), label="to")
        self.cache.truncate(n)
        del self.slots[n:]

    @rule(extra=st.integers(1, 5))
    def bad_truncate(self, extra: int) -> None:
        before = self.cache.length
        with pytest.raises(ModelError):
            self.cache.truncate(before + extra)
        with pytest.raises(ModelError):
            self.cache.truncate(-extra)
        assert self.cache.length == before

    @invariant()
    def matches_the_list(self) -> None:
        n = len(self.slots)
        assert self.cache.length == n
        if n == 0:
            return
        want_k = np.stack([s[0] for s in self.slots], axis=2)  # [L, n_kv, n, d]
        want_v = np.stack([s[1] for s in self.slots], axis=2)
        for layer in range(N_LAYER):
            np.testing.assert_array_equal(self.cache.keys(layer, n), want_k[layer])
            np.testing.assert_array_equal(self.cache.values(layer, n), want_v[layer])
        np.testing.assert_array_equal(self.cache.positions[:n], [s[2] for s in self.slots])


KVCacheMachine.TestCase.settings = settings(max_examples=examples(150), stateful_step_count=30, deadline=None)
TestKVCacheMachine = KVCacheMachine.TestCase
