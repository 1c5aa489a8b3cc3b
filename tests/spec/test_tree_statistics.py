"""Powered statistics for the token-tree rule: the float batch verifier fed by a seeded generator
against the exact laws of spec/tree_exact.py, with sample sizes from spec/statistics.py (detect any
total-variation bias >= 0.005 with power 0.99 at the alpha each test holds in ALPHA_BUDGET).

What they add to the exact checks (tests/spec/test_tree_rule.py): the real random path (uniforms
from numpy's generator, the batch code, tree tokens drawn by inverse CDF) rather than cell
midpoints. What they cannot see: a bias below 0.005 in total variation."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import numpy.typing as npt

from verispec.reference.tree_speculative import DraftTree, sibling_laws, verify_tree_sampled_batch
from verispec.spec.exact import Outcome, Row, target_sequence_law
from verispec.spec.statistics import ALPHA_BUDGET, chi_square, counts_of, required_sample_size
from verispec.spec.tree_exact import Shape, children, tree_verdict_law

V = 4
# At the root: token 1 (q = 1/2 > p = 1/8) is drawn, rejected and repeated often, and after its
# rejection the residual (1/3, 0, 0, 2/3) differs from the one after its duplicate (0, 0, 0, 1), so
# each known flaw moves the law (test_flaws_differ_from_the_rule_on_the_statistics_tree).
P_ROOT: Row = (F(1, 2), F(1, 8), F(0), F(3, 8))
Q_ROOT: Row = (F(3, 8), F(1, 2), F(0), F(1, 8))


def target(prefix: Outcome) -> Row:
    rows: list[Row] = [P_ROOT, (F(0), F(1, 2), F(1, 4), F(1, 4)), (F(3, 8), F(1, 8), F(1, 8), F(3, 8)), (F(1, 4),) * 4]
    return rows[sum((i + 2) * (t + 1) for i, t in enumerate(prefix)) % len(rows)]


def draft(prefix: Outcome) -> Row:
    rows: list[Row] = [Q_ROOT, (F(1, 4), F(1, 4), F(1, 2), F(0)), (F(1, 16), F(3, 16), F(1, 2), F(1, 4))]
    return rows[sum((i + 1) * (t + 1) for i, t in enumerate(prefix)) % len(rows)]


def _floats(rows: list[Row]) -> npt.NDArray[np.float64]:
    return np.array([[float(v) for v in r] for r in rows], dtype=np.float64)


def test_fixed_tree_verdict_law() -> None:
    """Tree (-1, 0, 0, 0, 1) with duplicate siblings (tokens 1, 1, 0; node 4 under node 1)."""
    alpha = ALPHA_BUDGET["tree_verdict_law"]
    shape: Shape = (-1, 0, 0, 0, 1)
    tokens = (-1, 1, 1, 0, 2)
    p_rows = [target(()), target((1,)), target((1,)), target((0,)), target((1, 2))]
    q_rows = [Q_ROOT, Q_ROOT, Q_ROOT, draft((1,))]
    exact = tree_verdict_law(shape, tokens, p_rows, q_rows)
    cells = {key: i for i, key in enumerate(sorted(exact, key=str))}
    probs = np.array([float(exact[k]) for k in cells])
    n = required_sample_size(len(cells) - 1, alpha)
    tree = DraftTree(shape, tokens)
    rng = np.random.default_rng(20261130)
    node, token, bonus = verify_tree_sampled_batch(tree, _floats(p_rows), _floats(q_rows), rng.random((n, len(shape))))
    # (end node, token, bonus) -> cell id through a lookup table
    table = np.full((len(shape), V, 2), -1, dtype=np.int64)
    for (path, y, kind), i in cells.items():
        table[path[-1] if path else 0, y, int(kind == "bonus")] = i
    observed = table[node, token, bonus.astype(np.int64)]
    assert np.all(observed >= 0), "an outcome of exact probability zero occurred"
    result = chi_square(counts_of(observed, len(cells)), probs)
    assert result.passed(alpha), result


def _path(shape: Shape, end: int) -> tuple[int, ...]:
    path: list[int] = []
    while end > 0:
        path.append(end)
        end = shape[end]
    return tuple(reversed(path))


def test_rounds_over_drawn_trees_emit_the_target_law() -> None:
    """Trees of shape (-1, 0, 0, 1, 1) drawn from the draft (i.i.d. siblings) by the generator, one
    verification each; the first two emitted tokens (a round that emits one token is completed by
    a target draw) must follow the target's two-token law."""
    alpha = ALPHA_BUDGET["tree_lossless_two_tokens"]
    shape: Shape = (-1, 0, 0, 1, 1)
    exact = target_sequence_law(target, 2)
    cells: dict[tuple[int, ...], int] = {(a, b): a * V + b for a in range(V) for b in range(V)}
    probs = np.zeros(V * V)
    for seq, mass in exact.items():
        probs[cells[seq]] = float(mass)
    n = required_sample_size(int(np.count_nonzero(probs)) - 1, alpha)
    rng = np.random.default_rng(1130)
    # draw every tree's tokens, node by node (parents first), by inverse CDF of the draft's row
    tokens = np.zeros((n, len(shape)), dtype=np.int64)
    tokens[:, 0] = -1
    for i in range(1, len(shape)):
        parent_path = list(_path(shape, shape[i]))
        code = (
            tokens[:, parent_path] @ (V ** np.arange(len(parent_path))) if parent_path else np.zeros(n, dtype=np.int64)
        )
        u = rng.random(n)
        for value in np.unique(code):
            rows = code == value
            key = tuple(int(tokens[np.flatnonzero(rows)[0], c]) for c in parent_path)
            cdf = np.cumsum([float(v) for v in draft(key)])
            tokens[rows, i] = np.searchsorted(cdf, u[rows] * cdf[-1], side="right")
    first = np.empty(n, dtype=np.int64)
    second = np.full(n, -1, dtype=np.int64)  # -1: the round emitted one token
    codes = tokens[:, 1:] @ (V ** np.arange(len(shape) - 1))
    for value in np.unique(codes):
        members = np.flatnonzero(codes == value)
        tree_tokens = tuple(int(t) for t in tokens[members[0]])
        tree = DraftTree(shape, tree_tokens)
        p_rows = [target(tuple(tree_tokens[c] for c in _path(shape, v))) for v in range(len(shape))]
        q_rows = [draft(tuple(tree_tokens[c] for c in _path(shape, shape[i]))) for i in range(1, len(shape))]
        idx = np.array(members)
        end, token, _ = verify_tree_sampled_batch(
            tree, _floats(p_rows), _floats(q_rows), rng.random((idx.size, len(shape)))
        )
        emitted = np.array(
            [[*[tree_tokens[c] for c in _path(shape, e)], -1, -1][:2] for e in range(len(shape))]
        )  # per end node
        depth = np.array([len(_path(shape, e)) for e in range(len(shape))])
        head = emitted[end]  # [members, 2]: the path's first two tokens (-1 where shorter)
        d = depth[end]
        first[idx] = np.where(d >= 1, head[:, 0], token)
        second[idx] = np.where(d >= 2, head[:, 1], np.where(d == 1, token, -1))
    alone = np.flatnonzero(second < 0)  # complete one-token rounds with a target draw
    u = rng.random(alone.size)
    for y in range(V):
        pick = alone[first[alone] == y]
        cdf = np.cumsum([float(v) for v in target((y,))])
        second[pick] = np.searchsorted(cdf, u[first[alone] == y] * cdf[-1], side="right")
    first_two = first * V + second
    result = chi_square(counts_of(first_two, V * V), probs)
    assert result.impossible == 0 and result.passed(alpha), result


def test_iid_sibling_laws_are_the_draft_row() -> None:
    """The rows the statistics hand the verifier for i.i.d. siblings are the draft's own row."""
    rows = sibling_laws([float(v) for v in Q_ROOT], [1, 1, 3], replacement=True)
    assert np.array_equal(rows, _floats([Q_ROOT] * 3))


def test_flaws_differ_from_the_rule_on_the_statistics_tree() -> None:
    """On the statistics test's fixed tree each known verifier flaw moves the verdict law (exactly,
    spec/tree_exact.Flaws) by more than the 0.005 TV the test is powered for."""
    from verispec.spec.exact import total_variation
    from verispec.spec.tree_exact import Flaws

    shape: Shape = (-1, 0, 0, 0, 1)
    tokens = (-1, 1, 1, 0, 2)
    p_rows = [target(()), target((1,)), target((1,)), target((0,)), target((1, 2))]
    q_rows = [Q_ROOT, Q_ROOT, Q_ROOT, draft((1,))]
    exact = tree_verdict_law(shape, tokens, p_rows, q_rows)
    assert children(shape, 0) == [1, 2, 3]
    for flaw in ("residual_not_updated", "duplicates_skipped", "duplicates_double_counted"):
        law = tree_verdict_law(shape, tokens, p_rows, q_rows, Flaws(**{flaw: True}))
        assert total_variation(law, exact) > F(5, 1000), flaw
