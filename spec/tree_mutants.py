"""Broken tree verifiers: each is :func:`reference.tree_speculative.verify_tree_sampled` with one
known failure mode, same signature. The tree spec (tests/spec/test_tree_rule.py) must kill every
one: by the exact law integrated over the uniform cells, and by the powered statistics.
Broken on purpose: the sibling residual chain below is a copy of the tree rule's that carries the
bugs; the draw itself is the reference's one definition (reference.sampling.inverse_cdf).

    residual_not_updated      every sibling is tested against p[v], never the residual (the
                              final draw still uses the residual chain)
    duplicates_skipped        a sibling repeating an earlier rejected token is skipped (no update)
    duplicates_double_counted duplicates merged into the first copy, draft mass counted per copy
    siblings_not_renormalised (a pipeline bug, not a verifier's: siblings drawn without
                              replacement handed to the verifier with the draft's raw row;
                              :func:`raw_sibling_rows` builds those wrong rows)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from verispec.reference.sampling import inverse_cdf
from verispec.reference.speculative import ArrayLike, Probs2D
from verispec.reference.tree_speculative import DraftTree, TreeVerdict, check_tree_inputs

TreeVerifier = Callable[[DraftTree, ArrayLike, ArrayLike, ArrayLike], TreeVerdict]


def _verify(
    tree: DraftTree,
    p: ArrayLike,
    q: ArrayLike,
    uniforms: ArrayLike,
    *,
    update: bool = True,
    skip_duplicates: bool = False,
    merge_duplicates: bool = False,
) -> TreeVerdict:
    p_rows, q_rows, u = check_tree_inputs(tree, p, q, uniforms)
    final = float(u[tree.size - 1])
    path: list[int] = []
    v = 0
    while True:
        kids = tree.children(v)
        if not kids:
            return TreeVerdict(tuple(path), inverse_cdf(p_rows[v], final), "bonus")
        if merge_duplicates:
            firsts: dict[int, int] = {}
            for c in kids:
                firsts.setdefault(tree.tokens[c], c)
            kids = list(firsts.values())
        w, t = p_rows[v], 1.0
        seen: list[int] = []
        accepted = None
        for c in kids:
            x = tree.tokens[c]
            if skip_duplicates and x in seen:
                continue
            seen.append(x)
            copies = sum(1 for d in tree.children(v) if tree.tokens[d] == x) if merge_duplicates else 1
            q_row = copies * q_rows[c - 1]
            tested_w, tested_t = (w, t) if update else (p_rows[v], 1.0)
            if u[c - 1] * q_row[x] * tested_t < tested_w[x]:
                accepted = c
                break
            w = np.maximum(w - t * q_row, 0.0)
            t = float(np.cumsum(w)[-1])
            if t == 0.0:
                return TreeVerdict(tuple(path), inverse_cdf(p_rows[v], final), "repair")
        if accepted is None:
            return TreeVerdict(tuple(path), inverse_cdf(w, final), "repair")
        path.append(accepted)
        v = accepted


def residual_not_updated(tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike) -> TreeVerdict:
    return _verify(tree, p, q, uniforms, update=False)


def duplicates_skipped(tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike) -> TreeVerdict:
    return _verify(tree, p, q, uniforms, skip_duplicates=True)


def duplicates_double_counted(tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike) -> TreeVerdict:
    return _verify(tree, p, q, uniforms, merge_duplicates=True)


VERIFIER_MUTANTS: dict[str, TreeVerifier] = {
    "residual_not_updated": residual_not_updated,
    "duplicates_skipped": duplicates_skipped,
    "duplicates_double_counted": duplicates_double_counted,
}


def raw_sibling_rows(q_row: ArrayLike, tokens: Sequence[int]) -> Probs2D:
    """The siblings_not_renormalised pipeline bug: every sibling's row is the draft's raw row,
    even though they were drawn without replacement."""
    q = np.asarray(q_row, dtype=np.float64)
    return np.stack([q for _ in tokens])
