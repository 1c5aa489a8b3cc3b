"""The KV cache: spans append, truncation is O(1) and exact (what speculative rollback relies on).

Float tolerance: a span-by-span or truncated-and-reforwarded pass and one batched pass are two
float32 evaluations of the same forward, rounded in different orders; each logit may differ by its
derived tolerance (tests/support/tolerances.py: 2 lambda sigma, sigma its float32 rounding spread under the
probabilistic rounding model, propagated through the layers), never by a hand-picked atol.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support.tolerances import assert_within, forward_spread
from verispec.reference.errors import ContextOverflow, ModelError
from verispec.reference.model import Model

TOKENS = [5, 17, 3, 60, 22, 9, 9, 41, 0, 33, 12, 7, 7, 7, 50]

pytestmark = pytest.mark.usefixtures("blas_single_thread")


def test_incremental_equals_batched(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("gemma3", n_layer=7, sliding_window=4))
    batched = model.forward(TOKENS, model.new_cache(32)).logits
    cache = model.new_cache(32)
    rows = [model.forward(TOKENS[:4], cache).logits]
    rows += [model.forward([t], cache).logits for t in TOKENS[4:9]]
    rows.append(model.forward(TOKENS[9:], cache).logits)
    assert cache.length == len(TOKENS)
    spread = forward_spread(model, tuple(TOKENS)).logits
    assert spread is not None
    assert_within(np.concatenate(rows), batched, spread.tolerance, "span-by-span vs batched logits")


def test_truncate_and_reforward_equals_fresh(tiny_gguf: Any) -> None:
    """A rejected speculation: forward a span, roll back, forward other tokens. The result must be
    what a fresh cache gives for the accepted history."""
    model = Model.load(tiny_gguf("llama"))
    cache = model.new_cache(32)
    model.forward(TOKENS[:6], cache)
    model.forward([1, 2, 3, 4], cache)  # drafts, to be rejected
    k_buffer = cache.k
    cache.truncate(7)  # accept one of them
    assert cache.length == 7 and cache.k is k_buffer  # O(1): only the length moved
    cache.truncate(6)
    got = model.forward(TOKENS[6:10], cache).logits
    fresh = model.forward(TOKENS[:10], model.new_cache(32)).logits
    spread = forward_spread(model, tuple(TOKENS[:10])).logits
    assert spread is not None
    assert_within(got, fresh[6:], spread.tolerance[6:], "re-forwarded vs fresh logits")


def test_truncate_bounds(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama"))
    cache = model.new_cache(8)
    model.forward([1, 2, 3], cache)
    with pytest.raises(ModelError, match="truncate"):
        cache.truncate(4)
    with pytest.raises(ModelError, match="truncate"):
        cache.truncate(-1)
    cache.truncate(0)
    assert cache.length == 0


def test_overflow_is_refused_before_any_work(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama", context_length=16))
    cache = model.new_cache(5)
    model.forward([1, 2, 3], cache)
    before = cache.k.copy()
    with pytest.raises(ContextOverflow, match="holds 5"):
        model.forward([4, 5, 6], cache)
    assert cache.length == 3 and np.array_equal(cache.k, before)
    with pytest.raises(ContextOverflow, match="context length 16"):
        model.new_cache(17)
    assert model.new_cache().capacity == 16


def test_cache_grows_past_its_first_allocation(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama", context_length=256))
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 64, 150)]
    batched = model.forward(tokens, model.new_cache(200)).logits
    cache = model.new_cache(200)
    rows = [model.forward(tokens[i : i + 50], cache).logits for i in range(0, 150, 50)]
    assert cache.k.shape[2] >= 150
    spread = forward_spread(model, tuple(tokens)).logits
    assert spread is not None
    assert_within(np.concatenate(rows), batched, spread.tolerance, "chunked vs batched logits")


@pytest.mark.model
def test_real_model_rollback(smollm2_model: Model) -> None:
    model = smollm2_model
    prompt = [504, 1463, 282, 260, 7510, 1757, 5634]
    cache = model.new_cache(32)
    model.forward(prompt, cache)
    model.forward([351, 260, 9999, 12], cache)
    cache.truncate(len(prompt) + 2)
    got = model.forward([10531, 282], cache).logits
    fresh = model.forward(prompt + [351, 260, 10531, 282], model.new_cache(32)).logits
    spread = forward_spread(model, tuple(prompt + [351, 260, 10531, 282]), samples=16).logits
    assert spread is not None
    assert_within(got, fresh[-2:], spread.tolerance[-2:], "rolled-back vs fresh logits")
    assert np.array_equal(got.argmax(1), fresh[-2:].argmax(1))
