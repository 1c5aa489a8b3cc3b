"""The tree tests' shared cases (tests/test_tree_attention.py, tests/test_tree_decode.py,
tests/test_tree_int8.py): a fixed draft tree (:data:`PARENTS`, :func:`path_of`), the repetitive
prompts that grow wide suffix trees (:data:`PROMPTS`) and the suffix draft that keeps them whole
(:func:`wide_suffix`)."""

from __future__ import annotations

from collections.abc import Sequence

from verispec.reference.suffix_draft import SuffixDraft

# rows: 0 root (pending token), 1-3 its children, 4-5 under 1, 6 under 4, 7 under 3, 8 under 6
PARENTS = (-1, 0, 0, 0, 1, 1, 4, 3, 6)


def path_of(parents: Sequence[int], row: int) -> list[int]:
    out = []
    while row >= 0:
        out.append(row)
        row = parents[row]
    return out[::-1]


PROMPTS = (
    (1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2),
    (4, 5, 6, 4, 5, 7, 4, 5),
    (9, 8, 9, 7, 9, 8, 9, 6, 9),
    (3, 4, 3, 5, 3, 4, 3, 6, 3),
)


def wide_suffix(width: int = 3) -> SuffixDraft:
    """The whole grown tree every cycle (no cost model), so trees are wide even on a tiny model."""
    return SuffixDraft(tree_width=width, control=False, tree_nodes=12, min_match=1)
