"""Tree attention: the candidates of a token tree scored in ONE forward pass.

A span of T rows is a forest hanging off the committed prefix: row i has a parent ``parents[i]``
with ``-1 <= parents[i] < i`` (-1: its parent is the last committed slot, i.e. it continues the
prefix). Row i stands for the sequence ``prefix + path(i)`` where path(i) is the chain of rows from
its top ancestor down to i. Two things make one pass compute, for every row, what a plain forward
over ``prefix + path(i)`` computes for its last token:

    positions   prefix length + depth(i) (depth 0 for a row with parent -1): RoPE turns by the
                row's place in ITS sequence, not by its row index in the span
    mask        row i reads every prefix slot (causal and sliding-window rules as usual) and, among
                the span's own slots, exactly its ancestors and itself (:func:`ancestor_mask`)

A chain (``parents[i] == i - 1``) gives the ordinary causal span: positions ``L + i``, and the
ancestor mask is the lower triangle. llama.cpp builds the same mask for its tree-based speculative
examples from per-token sequence ids; vLLM and SpecInfer call it a "tree attention mask".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import ModelError

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def check_parents(parents: Sequence[int], n_rows: int) -> I64:
    """``parents`` as int64 ``[T]``; ModelError unless there is one per row and ``-1 <= p < i``."""
    arr = np.asarray(parents, dtype=np.int64).reshape(-1)
    if arr.size != n_rows:
        raise ModelError(f"{arr.size} tree parents for a span of {n_rows} tokens")
    rows = np.arange(n_rows, dtype=np.int64)
    bad = np.flatnonzero((arr < -1) | (arr >= rows))
    if bad.size:
        i = int(bad[0])
        raise ModelError(f"span row {i} has tree parent {int(arr[i])}: parents must come first (-1 <= parent < {i})")
    return arr


def depths(parents: I64) -> I64:
    """``[T]``: 0 for a row whose parent is the prefix, else its parent's depth + 1."""
    out = np.zeros(parents.shape[0], dtype=np.int64)
    for i, p in enumerate(parents.tolist()):
        out[i] = 0 if p < 0 else out[p] + 1
    return out


def tree_positions(parents: I64, prefix_length: int) -> I64:
    """``[T]``: the position of each row in its own sequence, ``prefix_length + depth``."""
    return prefix_length + depths(parents)


def ancestor_mask(parents: I64) -> Mask:
    """``[T, T]``: True at [i, j] iff row j is row i or one of its ancestors in the span."""
    n = parents.shape[0]
    mask = np.zeros((n, n), dtype=np.bool_)
    for i, p in enumerate(parents.tolist()):
        if p >= 0:
            mask[i] = mask[p]  # parents come first: their row is complete
        mask[i, i] = True
    return mask


def is_chain(parents: Sequence[int]) -> bool:
    """True when the span is an ordinary causal span (row i's parent is row i - 1)."""
    return all(int(p) == i - 1 for i, p in enumerate(parents))
