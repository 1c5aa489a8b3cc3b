"""One token-tree cycle of speculative decoding: propose a tree, score it in ONE pass, keep a path.

The decode loop (:func:`reference.decode.speculative_generate`) runs this cycle instead of the
single-path one when its draft proposes trees (:class:`TreeDraftSource`, e.g. ``--draft
suffix:tree``). State as in the single-path loop: ``history`` = prompt + committed output; the
target cache holds all of it but the ``pending`` tail (after the first cycle: the last token).

    tree      = draft.propose_tree(history, max_depth, max_nodes)   node 0 = the last committed
                                                                    position; nodes 1..N-1 tokens
    logits    = score_tree(target, cache, pending, tree)            [N, V]: ONE pass over pending +
                                                                    nodes, tree attention mask
    p[v]      = law(logits[v], history + path(v), params)           THE target law, each node with
                                                                    its own path in the history
    verdict   = verify_tree_greedy(tree, p)                         greedy target: longest argmax path
                verify_tree_sampled(tree, p, q, rng.random(N))      otherwise: the tree protocol (rows computed
                                                                    as the walk reads them)
                                                                    (reference/tree_speculative.py)
    keep      cache <- committed slots + the accepted path's slots  O(accepted) (KVCache.keep)
    commit    path tokens + verdict.token, one at a time to the decode session

A tree of one node (nothing proposed) is a plain step: the root's row, one uniform, as plain
decoding draws it. A chain-shaped span is scored without a mask (the ordinary causal pass), so a
width-1 tree costs what the single-path loop's pass costs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from verispec.reference import speculative
from verispec.reference.errors import VerificationError
from verispec.reference.sampling import SamplingParams, sample
from verispec.reference.seams import LawFn, takes_last_only
from verispec.reference.tree_attention import is_chain
from verispec.reference.tree_speculative import DraftTree, TreeVerdict, verify_tree_greedy, verify_tree_sampled_lazy

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TreeProposal:
    """A draft tree and, per node 1..N-1, the law its token was drawn from (``q`` ``[N-1, V]``;
    None: a deterministic draft, one-hot rows)."""

    tree: DraftTree
    q: F64 | None = None


@runtime_checkable
class TreeDraftSource(Protocol):
    """A draft source that proposes token trees (beside the single-path DraftSource methods)."""

    @property
    def tree_width(self) -> int: ...  # most children per node; 0: this source proposes chains

    def propose_tree(self, history: Sequence[int], max_depth: int, max_nodes: int) -> TreeProposal:
        """A tree of at most ``max_nodes`` draft nodes and depth ``max_depth`` after ``history``
        (called every cycle: 0 and 0 ask for the root alone, a plain step)."""
        ...

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> F32:
        """Target logits ``[N, V]`` for every node (:func:`score_tree` on the bound target)."""
        ...

    def observe_cycle(self, rows: int, seconds: float) -> None:
        """The whole cycle's time (pass + laws + verification) for a span of ``rows`` rows."""
        ...


class TreeTarget(Protocol):
    """The forward a tree pass needs: :class:`reference.model.Model` and the engine's FastModel."""

    def forward(self, tokens: Sequence[int], cache: Any, *, tree_parents: Sequence[int] | None = None) -> Any: ...


def span_parents(pending: int, tree: DraftTree) -> list[int]:
    """Parents of the scored span's rows: the ``pending`` committed tokens as a chain (-1 first:
    the cached prefix), then node i (i >= 1) under the row of its parent (node 0 = the last
    pending row)."""
    return [*range(-1, pending - 1), *(pending - 1 + tree.parents[i] for i in range(1, tree.size))]


def plain_pass(target: Any, cache: Any, pending: Sequence[int]) -> F32 | None:
    """The prompt's pass (several ``pending`` tokens, no draft) with the head on the last row only,
    ``[1, V]``, on an engine whose ``forward`` takes ``last_only`` (the row plain decoding computes);
    None when that does not apply (one pending token, or a model without ``last_only``)."""
    if len(pending) <= 1 or not takes_last_only(target):
        return None
    logits: F32 = target.forward(list(pending), cache, last_only=True).logits
    return logits


def score_tree(target: Any, cache: Any, pending: Sequence[int], tree: DraftTree) -> F32:
    """ONE forward over ``pending`` + the tree's nodes; logits ``[N, V]`` (row v after node v's
    path). Afterwards the cache holds every row; :func:`keep_path` keeps the accepted ones. A
    one-node tree after several pending tokens is :func:`plain_pass` where the engine allows."""
    if not pending:
        raise VerificationError("a tree pass needs the last committed token (pending) as its root")
    if tree.size == 1:
        last = plain_pass(target, cache, pending)
        if last is not None:
            return last
    span = [*pending, *tree.tokens[1:]]
    parents = span_parents(len(pending), tree)
    model = cast(TreeTarget, target)
    if is_chain(parents):
        out = model.forward(span, cache)
    else:
        out = model.forward(span, cache, tree_parents=parents)
    logits: F32 = out.logits[len(pending) - 1 :]
    return logits


def keep_path(cache: Any, committed: int, path: Sequence[int]) -> None:
    """After a tree pass from a history of ``committed`` tokens: keep the accepted ``path``'s K, V
    (node n sits in slot ``committed - 1 + n``), drop the other nodes; length ``committed + len(path)``."""
    cache.keep(committed, [committed - 1 + n for n in path])


@dataclass(frozen=True)
class TreeOutcome:
    """A verified tree cycle: the accepted path (node ids), the emitted target token and its kind."""

    path: tuple[int, ...]
    token: int
    kind: Literal["bonus", "repair", "plain"]


def verify_tree_cycle(
    proposal: TreeProposal,
    logits: F32,  # [N, V]
    history: Sequence[int],
    params: SamplingParams,
    rng: np.random.Generator,
    law: LawFn,
) -> TreeOutcome:
    """The verdict of one tree cycle; a one-node tree is a plain step (one uniform)."""
    tree = proposal.tree
    if tree.size == 1:
        row = law(logits[0], history, params)
        return TreeOutcome((), sample(row, rng), "plain")
    context = [int(t) for t in history]

    def p_of(v: int) -> Any:
        return law(logits[v], context + node_path(tree, v), params)

    verdict: TreeVerdict
    if speculative.verification_mode(params, params) == "greedy":
        verdict = verify_tree_greedy(tree, np.stack([p_of(v) for v in range(tree.size)]))  # [N, V]
    else:  # only the rows the walk reads: the same verdict as verify_tree_sampled on every row
        verdict = verify_tree_sampled_lazy(tree, p_of, proposal.q, rng.random(tree.size))
    return TreeOutcome(verdict.path, verdict.token, verdict.kind)


def node_path(tree: DraftTree, node: int) -> list[int]:
    """The tokens from the root (excluded) down to ``node`` (included)."""
    out: list[int] = []
    while node > 0:
        out.append(tree.tokens[node])
        node = tree.parents[node]
    return out[::-1]


def one_hot_rows(tree: DraftTree, vocab: int) -> F64:
    """q ``[N-1, V]`` of a deterministic draft: row i-1 is one-hot at node i's token."""
    q = np.zeros((tree.size - 1, vocab), dtype=np.float64)
    q[np.arange(tree.size - 1), np.asarray(tree.tokens[1:], dtype=np.int64)] = 1.0
    return q


def run_tree_cycle(
    draft: TreeDraftSource,
    history: Sequence[int],
    cache: Any,
    max_depth: int,
    max_nodes: int,
    params: SamplingParams,
    rng: np.random.Generator,
    law: LawFn,
) -> tuple[TreeProposal, TreeOutcome, float, float]:
    """Propose, score, verify, keep: ``(proposal, outcome, draft seconds, verify seconds)``."""
    before = len(history)
    pending = list(history[cache.length :])
    t0 = time.perf_counter()
    proposal = draft.propose_tree(history, max(0, max_depth), max(0, max_nodes))
    if proposal.tree.size > 1 and (max_depth < 1 or max_nodes < proposal.tree.size - 1):
        raise VerificationError(
            f"the draft proposed {proposal.tree.size - 1} nodes, more than the {max_nodes} nodes / depth {max_depth} allowed"
        )
    t1 = time.perf_counter()
    logits = draft.score_tree(pending, proposal.tree)
    outcome = verify_tree_cycle(proposal, logits, history, params, rng, law)
    keep_path(cache, before, outcome.path)
    t2 = time.perf_counter()
    if len(pending) == 1:  # the prompt's prefill is not a verification pass
        draft.observe_cycle(proposal.tree.size, t2 - t1)
    return proposal, outcome, t1 - t0, t2 - t1
