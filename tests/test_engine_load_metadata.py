"""FastModel.load drops its own file handle's tokenizer-size metadata lists once the config is read
(a load's peak RSS), and nothing else: settings and short lists stay."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from verispec.engine.model import LARGE_METADATA_ITEMS, drop_large_metadata


def test_only_tokenizer_size_lists_are_dropped() -> None:
    metadata: dict[str, Any] = {
        "general.architecture": "llama",
        "llama.block_count": 30,
        "tokenizer.ggml.tokens": ["a"] * LARGE_METADATA_ITEMS,
        "tokenizer.ggml.scores": [0.0] * (LARGE_METADATA_ITEMS + 1),
        "llama.rope.dimension_sections": [1, 2, 3],
        "tokenizer.ggml.merges": ["a b"] * (LARGE_METADATA_ITEMS - 1),
    }
    handle = SimpleNamespace(metadata=metadata)
    drop_large_metadata(handle)  # type: ignore[arg-type]
    assert sorted(handle.metadata) == [
        "general.architecture",
        "llama.block_count",
        "llama.rope.dimension_sections",
        "tokenizer.ggml.merges",
    ]
