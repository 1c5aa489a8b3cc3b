"""``FastModel.forward_many``: several spans, each on its own cache, in one pass.

The contract is bit-identity: each span's logits (and what its cache holds after) equal what
``forward`` gives that span alone. It is checked on spans of different lengths (1-row decode
steps, 3-row verify spans, a prefill) at different cache lengths, on a synthetic llama whose every
matrix is block-quantized (the int8 kernel on every matrix, GQA 8:1), on a synthetic gemma3 (sliding
window, q/k norms, softcap, post norms; its float matrices stay float32 in the int8 mode) and,
marked ``model``, on SmolLM2's real int8 kernels. Equality is exact (``array_equal``): no
tolerance, the mode's law is bit-for-bit batch invariance. Errors leave every cache uncommitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.synthetic import write_synthetic
from verispec.engine.model import FastModel
from verispec.reference.errors import ContextOverflow, ModelError

# (prefix already in the cache, the span run now): decode steps, verify spans and a fresh prefill
CASES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((5, 9, 1, 30, 2), (17,)),
    ((3, 4), (8, 2, 19)),
    ((), (7, 7, 12, 1, 40, 2)),
    ((11, 12, 13, 14, 15, 16, 17, 18, 19), (6, 5)),
    ((1,), (9,)),
)


@pytest.fixture(scope="module")
def int8_tiny(tmp_path_factory: pytest.TempPathFactory) -> FastModel:
    path = tmp_path_factory.mktemp("many") / "tinyllama-q.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    model = FastModel.load(path, weights="int8")
    assert model.batches_spans and not model.store.float_matrices
    return model


def primed(model: FastModel, prefix: Sequence[int], capacity: int = 32) -> Any:
    cache = model.new_cache(capacity)
    if prefix:
        model.forward(list(prefix), cache)
    return cache


def assert_many_equals_alone(
    model: FastModel, cases: Sequence[tuple[Sequence[int], Sequence[int]]], last_only: bool = False
) -> None:
    alone_caches = [primed(model, prefix) for prefix, _ in cases]
    alone = [
        model.forward(list(span), cache, last_only=last_only).logits for (_, span), cache in zip(cases, alone_caches)
    ]
    many_caches = [primed(model, prefix) for prefix, _ in cases]
    many = model.forward_many(
        [(list(span), cache) for (_, span), cache in zip(cases, many_caches)], last_only=last_only
    )
    for a, m, ca, cm in zip(alone, many, alone_caches, many_caches):
        assert m.logits.shape == a.shape and np.array_equal(m.logits, a)
        assert cm.length == ca.length
        assert np.array_equal(cm.k[:, :, : ca.length], ca.k[:, :, : ca.length])
        assert np.array_equal(cm.v[:, :, : ca.length], ca.v[:, :, : ca.length])


@pytest.mark.parametrize("last_only", [False, True])
def test_each_span_gets_what_forward_gives_it_alone(int8_tiny: FastModel, last_only: bool) -> None:
    assert_many_equals_alone(int8_tiny, CASES, last_only)


def test_a_span_does_not_depend_on_its_companions(int8_tiny: FastModel) -> None:
    """The same span beside other spans, in another order, gives the same bits."""
    assert_many_equals_alone(int8_tiny, CASES[::-1])
    assert_many_equals_alone(int8_tiny, CASES[1::2])


def test_a_sliding_window_gemma3_span_is_batch_invariant(tiny_gguf: Any) -> None:
    model = FastModel.load(
        tiny_gguf("gemma3", sliding_window=3, softcap=30.0, head_dim=16, weight_scale=1.0, seed=4), weights="int8"
    )
    assert model.batches_spans
    assert_many_equals_alone(model, CASES)


def test_errors_commit_no_span(int8_tiny: FastModel) -> None:
    good, short = primed(int8_tiny, (1, 2, 3)), primed(int8_tiny, (1, 2), capacity=3)
    with pytest.raises(ContextOverflow):
        int8_tiny.forward_many([([4], good), ([5, 6], short)])
    with pytest.raises(ModelError, match="outside the vocabulary"):
        int8_tiny.forward_many([([4], good), ([10**6], short)])
    with pytest.raises(ModelError, match="at least one token"):
        int8_tiny.forward_many([([4], good), ([], short)])
    with pytest.raises(ModelError, match="distinct cache"):
        int8_tiny.forward_many([([4], good), ([5], good)])
    assert (good.length, short.length) == (3, 2)


def test_non_finite_logits_raise_and_commit_nothing(tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    model = FastModel.load(path, weights="int8")
    huge = model.store.embed_rows(np.array([3], dtype=np.int64))
    assert np.isfinite(huge).all()
    model.store.embed_rows = lambda ids: np.where(
        np.asarray(ids)[:, None] == 3,
        np.float32(np.inf),  # type: ignore[method-assign]
        np.ones((len(ids), model.config.n_embd), np.float32),
    )
    fine, bad = model.new_cache(8), model.new_cache(8)
    with pytest.raises(ModelError, match="non-finite"):
        model.forward_many([([4, 5], fine), ([3], bad)])
    assert (fine.length, bad.length) == (0, 0)


def test_other_modes_run_one_forward_a_span(tiny_gguf: Any) -> None:
    """f32: no stacking (its BLAS rows depend on the row count); the results are forward's by definition."""
    model = FastModel.load(tiny_gguf("llama"), weights="f32")
    assert not model.batches_spans
    assert_many_equals_alone(model, CASES)
    good, short = primed(model, (1, 2, 3)), primed(model, (1, 2), capacity=3)
    with pytest.raises(ContextOverflow):
        model.forward_many([([4], good), ([5, 6], short)])
    assert (good.length, short.length) == (3, 2)  # the first span, already run, was rolled back


@pytest.mark.model
def test_smollm2_int8_spans_are_batch_invariant(int8_real_model: Any) -> None:
    model = int8_real_model("smollm2-135m", None)
    assert model.batches_spans
    cases = [
        ((1, 504, 2354, 3844, 335, 260), (4789,)),
        ((1, 504, 2354), (3844, 335, 260)),
        ((), (1, 504, 2354, 3844)),
        ((1, 9, 45, 3107, 28, 4000, 5, 88, 201, 7), (17, 6)),
    ]
    assert_many_equals_alone(model, cases)


@pytest.mark.model
@pytest.mark.slow  # ~10-20 s on the shared 2-core machine: 48 prefix passes, 24 alone, one wide pass
def test_smollm2_int8_a_block_wide_pass_is_batch_invariant(int8_real_model: Any) -> None:
    """24 spans of 2-4 rows (a depth block is up to 50 generations): a pass of over 64 rows, more
    than a 64-token teacher-forced pass, where a kernel could switch its blocking."""
    model = int8_real_model("smollm2-135m", None)
    rng = np.random.default_rng(11)
    cases = [
        (
            tuple(int(t) for t in rng.integers(1, 49152, int(rng.integers(1, 7)))),
            tuple(int(t) for t in rng.integers(1, 49152, int(rng.integers(2, 5)))),
        )
        for _ in range(24)
    ]
    assert sum(len(span) for _, span in cases) > 64
    assert_many_equals_alone(model, cases)
