"""Token-tree verification in one target pass: the tree attention mask and the KV keep.

Differential: for a random tree hanging off a cached prefix, the logits of every tree row from ONE
forward with ``tree_parents`` equal those of a plain forward over prefix + that row's path (its
last row), for the reference and the fast engine, on tiny models of every attention feature
(GQA, sliding window across the tree, softcap). Tolerance: tests/support/tolerances.py's derived 2 lambda
sigma of the plain forward over prefix + path (both sides are float32 evaluations of that one
function: different matrix shapes, different roundings). Each test also checks the check can
fail: without the mask (the rows attending to every earlier row of the span, as a chain would)
the same comparison is off by far more than the tolerance.

KV: after keeping an accepted path (:meth:`KVCache.keep`), the cache's committed K, V and
positions equal a fresh forward's over prefix + path (its derived spreads), and the next forward
over the cache gives the fresh logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.support.tolerances import assert_within, forward_spread
from tests.support.tree import PARENTS, path_of
from verispec.engine.model import FastModel
from verispec.reference.errors import ModelError
from verispec.reference.model import Model
from verispec.reference.tree_attention import ancestor_mask, check_parents, depths

SAMPLES = 16  # Monte Carlo samples per tolerance (one per tree row: cheaper; lambda widens to 31)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama", {"weight_scale": 1.0, "seed": 3}),
    ("gemma3", {"sliding_window": 3, "softcap": 30.0, "head_dim": 16, "weight_scale": 1.0, "seed": 4}),
]

PREFIX = (5, 9, 1, 30, 2)
TOKENS = (7, 11, 12, 13, 20, 21, 22, 23, 24)


def test_ancestor_mask_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        parents = [int(rng.integers(-1, i)) if i else -1 for i in range(n)]
        mask = ancestor_mask(check_parents(parents, n))
        for i in range(n):
            assert set(np.flatnonzero(mask[i]).tolist()) == set(path_of(parents, i))
        assert depths(np.asarray(parents)).tolist() == [len(path_of(parents, i)) - 1 for i in range(n)]


def test_bad_parents_are_a_model_error(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama"))
    for parents in ((-1, 1), (-1, 0, 5), (0, 0), (-2, 0), (-1,)):
        with pytest.raises(ModelError):
            model.forward([1, 2], model.new_cache(8), tree_parents=parents)


def _tree_logits(model: Any, parents: Sequence[int]) -> Any:
    cache = model.new_cache(32)
    model.forward(list(PREFIX[:-1]), cache)  # the committed prefix but its last (pending) token
    return model.forward([PREFIX[-1], *TOKENS[1:]], cache, tree_parents=parents).logits, cache


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("arch,options", CASES, ids=[c[0] for c in CASES])
def test_tree_rows_equal_plain_forward_of_their_path(
    tiny_gguf: Any, engine: str, arch: str, options: dict[str, Any]
) -> None:
    path = tiny_gguf(arch, **options)
    ref = Model.load(path)
    model: Any = ref if engine == "reference" else FastModel.load(path)
    logits, cache = _tree_logits(model, PARENTS)
    chain_logits, _ = _tree_logits(model, list(range(-1, len(PARENTS) - 1)))  # the mutant: no tree mask
    assert cache.length == len(PREFIX) + len(PARENTS) - 1
    assert cache.positions[len(PREFIX) - 1 : cache.length].tolist() == [
        len(PREFIX) - 1 + d for d in depths(np.asarray(PARENTS)).tolist()
    ]
    caught = 0
    for row in range(len(PARENTS)):
        seq = (*PREFIX, *(TOKENS[r] for r in path_of(PARENTS, row)[1:]))
        want = ref.forward(list(seq), ref.new_cache(32)).logits[-1]
        spread = forward_spread(ref, seq, head_rows=1, samples=SAMPLES).logits
        assert spread is not None
        assert_within(logits[row], want, spread.tolerance[0], f"tree row {row} vs plain forward of its path")
        if np.any(np.abs(chain_logits[row] - want) > spread.tolerance[0]):
            caught += 1
    # every row with a non-ancestor earlier in the span is wrong without the mask
    off_chain = sum(1 for row in range(len(PARENTS)) if path_of(PARENTS, row) != list(range(row + 1)))
    assert off_chain > 0 and caught == off_chain


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("arch,options", CASES, ids=[c[0] for c in CASES])
def test_keep_accepted_path_equals_fresh_prefix(
    tiny_gguf: Any, engine: str, arch: str, options: dict[str, Any]
) -> None:
    path = tiny_gguf(arch, **options)
    ref = Model.load(path)
    model: Any = ref if engine == "reference" else FastModel.load(path)
    for accepted in ((), (1,), (3, 7), (1, 4, 6, 8), (2,)):
        _, cache = _tree_logits(model, PARENTS)
        start = len(PREFIX)
        cache.keep(start, [start - 1 + r for r in accepted])  # the root's slot is start - 1
        seq = (*PREFIX, *(TOKENS[r] for r in accepted))
        assert cache.length == len(seq)
        assert cache.positions[: cache.length].tolist() == list(range(len(seq)))
        fresh = forward_spread(ref, seq, head=False, samples=SAMPLES)
        n = cache.length
        assert_within(cache.k[:, :, :n], fresh.k.value, fresh.k.tolerance, f"K after keeping {accepted}")
        assert_within(cache.v[:, :, :n], fresh.v.value, fresh.v.tolerance, f"V after keeping {accepted}")
        nxt = model.forward([40], cache).logits[-1]  # decoding goes on from the kept path
        full = (*seq, 40)
        spread = forward_spread(ref, full, head_rows=1, samples=SAMPLES).logits
        assert spread is not None
        assert_within(nxt, ref.forward(list(full), ref.new_cache(32)).logits[-1], spread.tolerance[0], "next step")


def test_keep_rejects_bad_slots(tiny_gguf: Any) -> None:
    model = Model.load(tiny_gguf("llama"))
    cache = model.new_cache(16)
    model.forward([1, 2, 3, 4, 5, 6], cache)
    for start, slots in ((2, [1]), (2, [4, 3]), (2, [4, 4]), (2, [6]), (7, [])):
        with pytest.raises(ModelError):
            cache.keep(start, slots)
    cache.keep(2, [3, 5])
    assert cache.length == 4
