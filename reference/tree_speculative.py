"""Token-tree verification: several candidate continuations, one verdict, still the target's law.

A draft tree has nodes 0..N-1; node 0 is the root (the last committed position, no token) and
every other node i has a parent ``parents[i] < i`` and a token ``tokens[i]``: the path root -> i
spells a candidate continuation. The children of a node, in index order, are its SIBLINGS: they were
drawn one after another, child j from the law ``q[j]`` it was EXACTLY drawn from given the tree
drawn before it (i.i.d. siblings: the draft's row each time; siblings without replacement: the row
with the earlier siblings removed and renormalized, :func:`sibling_laws`; a deterministic draft:
one-hot rows). ``p[v]`` is the target law after node v's path (one target pass scores every node).

THE TREE PROTOCOL (version 1; a chain tree gives exactly the verdicts of protocol version 1 in
reference/speculative.py). N nodes consume EXACTLY N uniforms u_0..u_{N-1} in [0, 1), whatever
happens: u_{i-1} for the acceptance test of node i (i >= 1), u_{N-1} for the final draw.

    v = root
    loop:
        if v has no children:  return (path, draw(p[v], u_{N-1}), bonus)
        w, t = p[v], 1.0                        # residual weights and their total (r = w / t)
        for c in children(v), in index order:   # recursive rejection sampling (SpecInfer, SpecTr)
            x = tokens[c]
            if u_{c-1} * q[c-1][x] * t < w[x]:  # accept with probability min(1, r(x) / q(x))
                path += [c];  v = c;  continue loop
            w = max(w - t * q[c-1], 0)          # float64, elementwise: r <- norm(max(r - q, 0))
            t = left-to-right sum of w          # (np.cumsum(w)[-1], as the draw uses)
            if t == 0:  return (path, draw(p[v], u_{N-1}), repair)   # unreachable in exact arithmetic
        return (path, draw(w, u_{N-1}), repair)

``draw`` is the protocol's inverse-CDF draw (:func:`reference.sampling.inverse_cdf`). The emitted
tokens are the path's tokens followed by the drawn one.

Why it is the target law. At a node with target law r and a sibling x drawn from q, one test is an
ordinary speculative step with draft q and target r: the output is x with probability min(r(x),
q(x)) and, on rejection (probability sum (r - q)^+), the next step sees r' = norm((r - q)^+).
Summed over x ~ q: min(r, q) + (sum (r - q)^+) r' = r. By induction over the siblings (the last
"step" is the draw from r) the token leaving node v has law p[v] whatever siblings were drawn, as
long as each was drawn from the law the verifier is given; and the accepted child's subtree was
drawn given that child, so the argument repeats one level down. Exact laws over small trees:
spec/tree_exact.py; z3 lemmas: proofs/tree.py.

Duplicates among siblings (i.i.d. draws repeat tokens) need nothing special: a repeated token
after its rejection has r(x) = 0 and is rejected again, but the residual MUST still be updated
(r <- norm(max(r - q, 0))); skipping it, or merging duplicates and counting their draft mass
twice, changes the law (spec/tree_mutants.py).

Greedy trees: accept the longest path whose every token is the argmax (lowest id on ties) of its
parent's target row, then emit the argmax after it (``bonus`` at a leaf, else ``repair``). Among
duplicate matching siblings the one with the longer accepted path wins (the first on ties).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerificationError
from verispec.reference.sampling import inverse_cdf, inverse_cdf_draws
from verispec.reference.speculative import ArrayLike, Probs2D, as_rows, check_rows

TREE_PROTOCOL_VERSION = 1
MAX_TREE_NODES = 4096  # a verification pass over more positions than this is a caller's bug
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class DraftTree:
    """The shape and tokens of a draft tree: ``parents[0] == -1``, ``0 <= parents[i] < i``."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]  # tokens[0] is unused (the root); -1 by convention

    def __post_init__(self) -> None:
        n = len(self.parents)
        if n < 1 or n > MAX_TREE_NODES:
            raise VerificationError(f"a draft tree has 1..{MAX_TREE_NODES} nodes, got {n}")
        if len(self.tokens) != n:
            raise VerificationError(f"a draft tree needs one token per node: {n} parents, {len(self.tokens)} tokens")
        if self.parents[0] != -1:
            raise VerificationError(f"node 0 is the root (parent -1), got parent {self.parents[0]}")
        for i in range(1, n):
            if not 0 <= self.parents[i] < i:
                raise VerificationError(
                    f"node {i} has parent {self.parents[i]}: parents must come first (0 <= parent < {i})"
                )

    @property
    def size(self) -> int:
        return len(self.parents)

    def children(self, node: int) -> list[int]:
        return [i for i in range(node + 1, self.size) if self.parents[i] == node]

    def path_tokens(self, path: Sequence[int]) -> list[int]:
        return [self.tokens[i] for i in path]

    def depth(self, node: int) -> int:
        d = 0
        while node > 0:
            node, d = self.parents[node], d + 1
        return d

    @classmethod
    def chain(cls, drafts: Sequence[int]) -> "DraftTree":
        """The single path ``drafts`` (protocol version 1's k drafts) as a tree of k + 1 nodes."""
        return cls((-1, *range(len(drafts))), (-1, *(int(x) for x in drafts)))


@dataclass(frozen=True)
class TreeVerdict:
    """``path``: the accepted nodes, root excluded, in order; then one ``token`` is emitted."""

    path: tuple[int, ...]
    token: int
    kind: Literal["repair", "bonus"]

    def emitted(self, tree: DraftTree) -> list[int]:
        return [*tree.path_tokens(self.path), self.token]


# -- contract ---------------------------------------------------------------------------------------


def check_tree_inputs(
    tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike, *, batched: bool = False
) -> tuple[Probs2D, Probs2D, F64]:
    """``p`` [N, V], ``q`` [N-1, V] (row i-1 for node i), uniforms [N] (or [B, N] when batched),
    rows valid laws, tokens in range with positive draft mass; VerificationError otherwise."""
    n = tree.size
    if n < 2:
        raise VerificationError("a tree to verify needs at least one draft node")
    p_rows, q_rows = as_rows(p, "p"), as_rows(q, "q")
    if p_rows.ndim != 2 or p_rows.shape[0] != n:
        raise VerificationError(f"p must be [N = {n}, V], got shape {p_rows.shape}")
    if q_rows.ndim != 2 or q_rows.shape[0] != n - 1:
        raise VerificationError(f"q must be [N - 1 = {n - 1}, V], got shape {q_rows.shape}")
    vocab = p_rows.shape[1]
    if vocab < 1 or q_rows.shape[1] != vocab:
        raise VerificationError(f"vocab sizes disagree: p has {vocab}, q has {q_rows.shape[1]}")
    check_rows(p_rows, "p")
    check_rows(q_rows, "q")
    for i in range(1, n):
        x = tree.tokens[i]
        if not 0 <= x < vocab:
            raise VerificationError(f"node {i} token {x} is outside the vocabulary [0, {vocab})")
        if q_rows[i - 1, x] <= 0:
            raise VerificationError(f"node {i} token {x} has q = 0: the draft cannot have drawn it")
    try:
        draws = np.asarray(uniforms, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise VerificationError(f"uniforms are not numeric: {exc}") from None
    want = (draws.shape[0], n) if batched and draws.ndim == 2 else (n,)
    if draws.shape != want or (batched and draws.ndim != 2):
        raise VerificationError(f"need N = {n} uniforms per verification, got shape {draws.shape}")
    if not np.all((draws >= 0.0) & (draws < 1.0)):  # also rejects NaN
        raise VerificationError("a uniform is outside [0, 1)")
    return p_rows, q_rows, draws


# -- the verifiers ----------------------------------------------------------------------------------


def _total(w: F64) -> float:
    """The left-to-right sum the draw normalizes by."""
    return float(np.cumsum(w, dtype=np.float64)[-1])


def sibling_residual(w: F64, t: float, q_row: F64) -> tuple[F64, float]:
    """THE tree rule's update after a rejected sibling: ``w <- max(w - t * q, 0)`` and ``t`` its
    left-to-right total (``w / t`` is the residual law r; module docstring). With ``t = 1.0`` (the
    first sibling) it is :func:`reference.speculative.residual_law`'s ``max(p - q, 0)``, bit for bit."""
    w = np.maximum(w - t * q_row, 0.0)  # [V]
    return w, _total(w)


def verify_tree_sampled(tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike) -> TreeVerdict:
    """Sampled verification of a draft tree, following the tree protocol (module docstring)."""
    p_rows, q_rows, u = check_tree_inputs(tree, p, q, uniforms)
    return walk_tree_sampled(tree, lambda v: p_rows[v], lambda c: q_rows[c - 1], u)


def walk_tree_sampled(tree: DraftTree, p_row: Callable[[int], F64], q_row: Callable[[int], F64], u: F64) -> TreeVerdict:
    """The tree protocol's walk from the root: ``p_row(v)`` is node v's target row, ``q_row(c)`` the
    law node c's token was drawn from, ``u`` [N] the uniforms. It reads the rows of the nodes on the
    accepted path and of the children it tries, nothing else, in the same order and with the same
    float64 operations whether the rows were computed ahead (:func:`verify_tree_sampled`) or on
    demand (:func:`verify_tree_sampled_lazy`)."""
    final = float(u[tree.size - 1])
    path: list[int] = []
    v = 0
    while True:
        kids = tree.children(v)
        if not kids:
            return TreeVerdict(tuple(path), inverse_cdf(p_row(v), final), "bonus")
        w, t = p_row(v), 1.0
        for c in kids:
            x = tree.tokens[c]
            q_c = q_row(c)
            if u[c - 1] * q_c[x] * t < w[x]:
                break  # accepted: continue below c
            w, t = sibling_residual(w, t, q_c)
            if t == 0.0:
                return TreeVerdict(tuple(path), inverse_cdf(p_row(v), final), "repair")
        else:
            return TreeVerdict(tuple(path), inverse_cdf(w, final), "repair")
        path.append(c)
        v = c


def verify_tree_sampled_lazy(
    tree: DraftTree, p_of: Callable[[int], ArrayLike], q: ArrayLike | None, uniforms: ArrayLike
) -> TreeVerdict:
    """:func:`verify_tree_sampled` with node v's target row computed by ``p_of(v)`` only when the
    walk reads it (once): the same verdict, bit for bit, on the same uniforms. ``q`` [N-1, V] the
    draft's laws, or None for a deterministic draft (one-hot rows at the nodes' tokens, built when
    read). Every row read is checked as :func:`check_tree_inputs` checks it (a valid law; the
    drafted token in range with positive draft mass); rows never read are neither computed nor
    checked: they cannot change the verdict."""
    n = tree.size
    if n < 2:
        raise VerificationError("a tree to verify needs at least one draft node")
    rows: dict[int, F64] = {}
    vocab: list[int] = []

    def p_row(v: int) -> F64:
        if v not in rows:
            row = as_rows(p_of(v), "p")
            if row.ndim != 1 or row.shape[0] < 1 or (vocab and row.shape[0] != vocab[0]):
                raise VerificationError(f"p row {v} must be [V], got shape {row.shape}")
            check_rows(row, "p")
            vocab[:1] = [row.shape[0]]
            rows[v] = row
        return rows[v]

    q_rows = None if q is None else as_rows(q, "q")

    def q_row(c: int) -> F64:
        size = vocab[0]
        x = tree.tokens[c]
        if not 0 <= x < size:
            raise VerificationError(f"node {c} token {x} is outside the vocabulary [0, {size})")
        if q_rows is None:
            one_hot = np.zeros(size, dtype=np.float64)
            one_hot[x] = 1.0
            return one_hot
        if q_rows.ndim != 2 or q_rows.shape != (n - 1, size):
            raise VerificationError(f"q must be [N - 1 = {n - 1}, V = {size}], got shape {q_rows.shape}")
        row: F64 = np.asarray(q_rows[c - 1], dtype=np.float64)
        check_rows(row, "q")
        if row[x] <= 0:
            raise VerificationError(f"node {c} token {x} has q = 0: the draft cannot have drawn it")
        return row

    try:
        draws = np.asarray(uniforms, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise VerificationError(f"uniforms are not numeric: {exc}") from None
    if draws.shape != (n,) or not np.all((draws >= 0.0) & (draws < 1.0)):
        raise VerificationError(f"need N = {n} uniforms in [0, 1), got shape {draws.shape}")
    p_row(0)  # the root's row is always read; it fixes V for the q rows
    return walk_tree_sampled(tree, p_row, q_row, draws)


def verify_tree_greedy(tree: DraftTree, p: ArrayLike) -> TreeVerdict:
    """Greedy tree verification: the longest path of argmax tokens (``p`` rows or logits, [N, V])."""
    rows = as_rows(p, "p")
    if tree.size < 2:
        raise VerificationError("a tree to verify needs at least one draft node")
    if rows.ndim != 2 or rows.shape[0] != tree.size or rows.shape[1] < 1:
        raise VerificationError(f"p must be [N = {tree.size}, V], got shape {rows.shape}")
    if np.any(np.isnan(rows)):
        raise VerificationError("p contains NaN")
    vocab = rows.shape[1]
    if any(not 0 <= x < vocab for x in tree.tokens[1:]):
        raise VerificationError(f"a node token is outside the vocabulary [0, {vocab})")
    best = [int(np.argmax(rows[v])) for v in range(tree.size)]  # first maximum: lowest id on ties
    longest: list[tuple[int, ...]] = [()] * tree.size  # accepted path below each node
    for v in range(tree.size - 1, -1, -1):  # children have larger indices: bottom up
        for c in tree.children(v):
            if tree.tokens[c] == best[v] and len(longest[c]) + 1 > len(longest[v]):
                longest[v] = (c, *longest[c])
    path = longest[0]
    end = path[-1] if path else 0
    return TreeVerdict(path, best[end], "repair" if tree.children(end) else "bonus")


def verify_tree_sampled_batch(
    tree: DraftTree, p: ArrayLike, q: ArrayLike, uniforms: ArrayLike
) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """B verifications of ONE tree with shared rows, uniforms [B, N]: ``(end node [B], token [B],
    is_bonus [B])``; item b identical to :func:`verify_tree_sampled` on uniforms[b] (the accepted
    path is the root-to-``end`` path). The residual chain of each node is computed once."""
    p_rows, q_rows, u = check_tree_inputs(tree, p, q, uniforms, batched=True)
    count, n = u.shape
    node = np.zeros(count, dtype=np.int64)
    token = np.full(count, -1, dtype=np.int64)
    bonus = np.zeros(count, dtype=np.bool_)
    for v in range(n):  # parents before children: every item is settled at its node, then moves down
        here = np.flatnonzero((node == v) & (token < 0))
        if here.size == 0:
            continue
        kids = tree.children(v)
        if not kids:
            token[here] = inverse_cdf_draws(p_rows[v], u[here, n - 1])
            bonus[here] = True
            continue
        w, t = p_rows[v], 1.0
        for c in kids:
            x = tree.tokens[c]
            accept = u[here, c - 1] * q_rows[c - 1, x] * t < w[x]
            node[here[accept]] = c
            here = here[~accept]
            w, t = sibling_residual(w, t, q_rows[c - 1])
            if t == 0.0:
                w = p_rows[v]
                break
        token[here] = inverse_cdf_draws(w, u[here, n - 1])
    return node, token, bonus


# -- the laws siblings are drawn from ---------------------------------------------------------------


def sibling_laws(q_row: ArrayLike, tokens: Sequence[int], *, replacement: bool) -> Probs2D:
    """The exact law of each sibling given the ones before it ([len(tokens), V]).

    ``replacement``: i.i.d. draws from ``q_row`` (every row is q_row). Without replacement: row j
    is q_row with tokens[:j] removed, renormalized; VerificationError if nothing is left to draw or
    a token repeats (a draw without replacement cannot repeat).
    """
    q = np.asarray(q_row, dtype=np.float64)
    rows = np.empty((len(tokens), q.shape[0]), dtype=np.float64)
    removed = np.ones_like(q)
    for j, x in enumerate(tokens):
        if replacement:
            rows[j] = q
            continue
        if removed[x] == 0.0:
            raise VerificationError(f"token {x} repeats among siblings drawn without replacement")
        left = q * removed
        total = _total(left)
        if total <= 0.0:
            raise VerificationError("no probability mass left to draw another sibling without replacement")
        rows[j] = left / total
        removed[x] = 0.0
    return rows
