"""The model seam: what a decode loop may ask of a model, reference or fast.

:class:`reference.model.Model` and :class:`engine.model.FastModel` both satisfy it, so a loop typed
against :class:`ModelLike` runs either (``tests/test_engine.py`` runs the same loops on both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from reference.config import Config
from reference.kvcache import KVCache
from reference.model import ForwardResult, TokenIds

F32 = npt.NDArray[np.float32]


class ModelLike(Protocol):
    """A forward pass over a KV cache, with the pieces an early exit or layer-skip draft needs."""

    config: Config

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty cache for ``capacity`` positions."""
        ...

    def forward(
        self,
        tokens: TokenIds,
        cache: KVCache,
        *,
        positions: Sequence[int] | None = None,
        return_hidden: bool = False,
    ) -> ForwardResult:
        """Logits ``[T, V]`` of a span (K,V committed); optionally the hidden states."""
        ...

    def forward_layers(
        self,
        hidden: F32,
        cache: KVCache,
        first_layer: int,
        last_layer: int,
        positions: Sequence[int],
        *,
        start: int | None = None,
    ) -> F32:
        """Run a layer range on a span's hidden state (nothing committed)."""
        ...

    def embed(self, tokens: TokenIds) -> F32:
        """Token embeddings ``[T, n_embd]``."""
        ...

    def head(self, hidden: F32) -> F32:
        """Exit head: hidden ``[T, n_embd]`` -> logits ``[T, V]``."""
        ...
