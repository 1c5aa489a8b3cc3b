"""The decode loop's sampled verification computes only the target rows it reads
(reference/speculative.py ``verify_drafts_sampled``; token trees: reference/tree_speculative.py
``verify_tree_sampled_lazy``) and gives the verdict of the protocol's
eager verifier (``verify_sampled`` of every row) bit for bit: same accepted count, same token,
same kind, on the same uniforms. Exact equality, no tolerance: both run the same float64 operations
on the rows they read (the residual, the inverse-CDF draw)."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.engine import sampling as fast_sampling
from verispec.reference import speculative
from verispec.reference.errors import VerificationError
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.reference.tree_decode import node_path, one_hot_rows
from verispec.reference.tree_speculative import DraftTree, verify_tree_sampled, verify_tree_sampled_lazy

V = 64
PARAMS = (
    SamplingParams(temperature=0.8),
    SamplingParams(temperature=1.0, top_k=8),
    SamplingParams(temperature=0.7, top_p=0.9, repeat_penalty=1.3),
    SamplingParams(temperature=1.5, min_p=0.05),
)


def _case(seed: int) -> tuple[np.ndarray, list[int], list[int], object, SamplingParams]:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    logits = (rng.standard_normal((k + 1, V)) * rng.uniform(0.5, 6.0)).astype(np.float32)
    history = [int(t) for t in rng.integers(0, V, size=int(rng.integers(1, 20)))]
    params = PARAMS[seed % len(PARAMS)]
    # drafts: the target's argmax (often accepted) or random ids (often rejected)
    drafts = [int(np.argmax(logits[i])) if rng.random() < 0.6 else int(rng.integers(0, V)) for i in range(k)]
    q: object = None
    if seed % 3 == 0:  # a sampling draft that reports its law (a real q): each row has mass on its token
        rows = rng.dirichlet(np.ones(V), size=k)
        for i, x in enumerate(drafts):
            rows[i, x] += 0.2
        q = rows / rows.sum(axis=1, keepdims=True)
    return logits, history, drafts, q, params


@pytest.mark.parametrize("law", [target_distribution, fast_sampling.target_distribution], ids=["reference", "engine"])
def test_the_lazy_verdict_is_the_eager_verifiers_verdict(law: speculative.LawFn) -> None:
    kinds: set[str] = set()
    for seed in range(300):
        logits, history, drafts, q, params = _case(seed)
        k = len(drafts)
        uniforms = np.random.default_rng(10_000 + seed).random(k + 1)
        calls: list[int] = []

        def counted(row: np.ndarray, context: list[int], p: SamplingParams) -> np.ndarray:
            calls.append(len(context))
            return law(row, context, p)

        lazy = speculative.verify_drafts_sampled(logits, history, drafts, q, params, uniforms, counted)  # type: ignore[arg-type]
        p = speculative.target_rows(logits, history, drafts, params, law)
        eager = speculative.verify_sampled(p, speculative.draft_law_rows(q, drafts, V), drafts, uniforms.tolist())  # type: ignore[arg-type]
        assert lazy == eager, seed
        assert len(calls) == lazy.accepted + 1  # rows 0..a: nothing past the verdict is computed
        kinds.add(lazy.kind)
    assert kinds == {"repair", "bonus"}  # both endings were exercised


def test_verify_drafts_reads_the_protocols_uniforms_from_the_generator() -> None:
    """The decode loop's entry point draws ``rng.random(k + 1)``, as the protocol says, then verifies."""
    logits, history, drafts, q, params = _case(1)
    via_loop = speculative.verify_drafts(logits, history, drafts, None, params, np.random.default_rng(7))
    direct = speculative.verify_sampled(
        speculative.target_rows(logits, history, drafts, params),
        speculative.draft_law_rows(None, drafts, V),
        drafts,
        np.random.default_rng(7).random(len(drafts) + 1).tolist(),
    )
    assert via_loop == direct


def test_a_bad_row_it_reads_is_refused() -> None:
    logits, history, drafts, _, params = _case(2)
    uniforms = np.zeros(len(drafts) + 1)  # u = 0: the first draft is accepted whenever p[x] > 0

    def broken(row: np.ndarray, context: list[int], p: SamplingParams) -> np.ndarray:
        out = target_distribution(row, context, p)
        out[0] = np.nan
        return out

    with pytest.raises(VerificationError, match="non-finite"):
        speculative.verify_drafts_sampled(logits, history, drafts, None, params, uniforms, broken)
    with pytest.raises(VerificationError, match="outside the vocabulary"):
        speculative.verify_drafts_sampled(logits, history, [V] * len(drafts), None, params, uniforms)
    q = np.zeros((len(drafts), V))
    q[:, (drafts[0] + 1) % V] = 1.0  # no mass on the drafted token: the draft cannot have drawn it
    with pytest.raises(VerificationError, match="q = 0"):
        speculative.verify_drafts_sampled(logits, history, drafts, q, params, uniforms)


def _tree_case(seed: int) -> tuple[DraftTree, np.ndarray, list[int], object, SamplingParams]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    logits = (rng.standard_normal((n, V)) * rng.uniform(0.5, 6.0)).astype(np.float32)
    parents, tokens = [-1], [-1]
    for i in range(1, n):
        parent = int(rng.integers(0, i))
        taken = {tokens[c] for c in range(1, i) if parents[c] == parent}
        best = int(np.argmax(logits[parent]))  # often the target's favourite: paths get accepted
        x = (
            best
            if best not in taken and rng.random() < 0.6
            else int(rng.choice([t for t in range(V) if t not in taken]))
        )
        parents.append(parent)
        tokens.append(x)
    tree = DraftTree(tuple(parents), tuple(tokens))
    history = [int(t) for t in rng.integers(0, V, size=int(rng.integers(1, 20)))]
    q: object = None
    if seed % 3 == 0:  # a sampled draft's laws, with mass on every node's token
        rows = rng.dirichlet(np.ones(V), size=n - 1)
        rows[np.arange(n - 1), tokens[1:]] += 0.2
        q = rows / rows.sum(axis=1, keepdims=True)
    return tree, logits, history, q, PARAMS[seed % len(PARAMS)]


def test_the_lazy_tree_verdict_is_the_eager_tree_verdict() -> None:
    """Token trees: :func:`verify_tree_sampled_lazy` against :func:`verify_tree_sampled` on every row,
    the same uniforms; rows are computed once each, only for the nodes the walk reads."""
    kinds: set[str] = set()
    for seed in range(300):
        tree, logits, history, q, params = _tree_case(seed)
        rows = [target_distribution(logits[v], history + node_path(tree, v), params) for v in range(tree.size)]
        uniforms = np.random.default_rng(20_000 + seed).random(tree.size)
        read: list[int] = []

        def p_of(v: int) -> np.ndarray:
            read.append(v)
            return rows[v]

        lazy = verify_tree_sampled_lazy(tree, p_of, q, uniforms)  # type: ignore[arg-type]
        eager = verify_tree_sampled(tree, np.stack(rows), q if q is not None else one_hot_rows(tree, V), uniforms)  # type: ignore[arg-type]
        assert lazy == eager, seed
        assert len(read) == len(set(read)) and set(read) <= {0, *lazy.path}  # the root and the accepted path only
        kinds.add(lazy.kind)
    assert kinds == {"repair", "bonus"}
