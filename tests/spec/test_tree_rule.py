"""The token-tree rule (reference/tree_speculative.py), exactly: lossless for every small tree shape
(siblings i.i.d. or without replacement, zeros in the rows, duplicate siblings) as the law of the
first emitted tokens; each known failure mode breaks that law; the float verifier decides like the
exact rule in every cell of its uniforms; a chain tree is protocol version 1 bit for bit."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec.reference.errors import VerificationError
from verispec.reference.speculative import verify_sampled
from verispec.reference.tree_speculative import (
    DraftTree,
    sibling_laws,
    verify_tree_greedy,
    verify_tree_sampled,
    verify_tree_sampled_batch,
)
from verispec.spec.exact import Outcome, Row, first_tokens_law, target_sequence_law
from verispec.spec.tree_exact import (
    CORRECT,
    Flaws,
    Shape,
    greedy_tree_verdict,
    sibling_law,
    tree_cells_law,
    tree_round_law,
    tree_verdict_law,
)
from verispec.spec.tree_mutants import VERIFIER_MUTANTS, raw_sibling_rows

# Toy models over V = 3: rows picked by the prefix, zeros included. At the empty prefix the target
# row is TARGET_ROWS[0] and the draft's DRAFT_ROWS[1] / DRAFT_ROWS_FULL[1]: pairs chosen so that
# each known flaw shows (a likely-rejected draft token that repeats, q(1) = 3/4 > p(1) = 1/4; a
# residual that differs from the renormalized draft row without replacement: (2/5, 3/5) vs (6/7, 1/7)).
TARGET_ROWS: list[Row] = [
    (F(1, 2), F(1, 4), F(1, 4)),
    (F(0), F(3, 4), F(1, 4)),
    (F(1, 8), F(0), F(7, 8)),
    (F(1, 3), F(1, 3), F(1, 3)),
]
DRAFT_ROWS: list[Row] = [
    (F(1, 4), F(1, 2), F(1, 4)),
    (F(1, 8), F(3, 4), F(1, 8)),
    (F(0), F(1, 4), F(3, 4)),
    (F(1), F(0), F(0)),
]
# Without replacement every node's siblings must find a token: full-support draft rows.
DRAFT_ROWS_FULL: list[Row] = [
    (F(1, 4), F(1, 2), F(1, 4)),
    (F(3, 8), F(1, 16), F(9, 16)),
    (F(1, 8), F(5, 8), F(1, 4)),
    (F(1, 3), F(1, 3), F(1, 3)),
]


def _pick(rows: list[Row], prefix: Outcome, salt: int) -> Row:
    return rows[(sum((i + 1) * (t + 1) for i, t in enumerate(prefix)) + salt) % len(rows)]


def target(prefix: Outcome) -> Row:
    return _pick(TARGET_ROWS, prefix, 0)


def draft(prefix: Outcome) -> Row:
    return _pick(DRAFT_ROWS, prefix, 1)


def draft_full(prefix: Outcome) -> Row:
    return _pick(DRAFT_ROWS_FULL, prefix, 1)


def all_shapes(n: int) -> list[Shape]:
    """Every tree shape with n nodes (node i's parent any earlier node): (n-1)! of them."""
    return [(-1, *parents) for parents in itertools.product(*[range(i) for i in range(1, n)])]


SHAPES = [s for n in (2, 3, 4) for s in all_shapes(n)] + [(-1, 0, 0, 0, 1), (-1, 0, 1, 1, 0), (-1, 0, 0, 0, 0)]


def _lossless(shape: Shape, replacement: bool, flaws: Flaws = CORRECT) -> bool:
    m = 3 if len(shape) <= 3 else 2
    d = draft if replacement else draft_full
    law = first_tokens_law(lambda prefix: tree_round_law(shape, target, d, prefix, replacement, flaws), m)
    return law == target_sequence_law(target, m)


def _widest(shape: Shape) -> int:
    return max(sum(1 for p in shape if p == v) for v in range(len(shape)))


# Without replacement a node can have at most V = 3 siblings.
CASES = [(s, True) for s in SHAPES] + [(s, False) for s in SHAPES if _widest(s) <= 3]


@pytest.mark.parametrize(("shape", "replacement"), CASES, ids=str)
def test_tree_rule_is_lossless_for_every_shape(shape: Shape, replacement: bool) -> None:
    assert _lossless(shape, replacement)


@pytest.mark.parametrize(
    ("flaw", "replacement"),
    [
        ("residual_not_updated", True),
        ("residual_not_updated", False),
        ("siblings_not_renormalised", False),
        ("duplicates_skipped", True),
        ("duplicates_double_counted", True),
    ],
)
def test_each_known_flaw_breaks_the_law(flaw: str, replacement: bool) -> None:
    flaws = Flaws(**{flaw: True})
    broken = [shape for shape, r in CASES if r == replacement and not _lossless(shape, replacement, flaws)]
    assert broken, f"{flaw} was not caught on any shape"
    assert all(len(shape) > 2 for shape in broken)  # a chain is single-sibling: these flaws need siblings
    assert _lossless((-1, 0), replacement, flaws) and _lossless((-1, 0, 1), replacement, flaws)


def test_duplicates_need_no_special_case() -> None:
    """With a point-mass draft every sibling repeats; the plain rule (test, then update) is exact."""
    point = lambda prefix: (F(1), F(0), F(0))  # noqa: E731
    for shape in [(-1, 0, 0), (-1, 0, 0, 0), (-1, 0, 0, 1, 2)]:
        law = first_tokens_law(lambda prefix: tree_round_law(shape, target, point, prefix, True), 2)
        assert law == target_sequence_law(target, 2)


# -- the float verifier against the exact rule ------------------------------------------------------

V = 4


def _dyadic_row(rng: np.random.Generator, zeros: bool = True) -> Row:
    """A law with entries k/16 (exact in float64, and so are the verifier's sums and products)."""
    while True:
        cuts = np.sort(rng.integers(0, 17, size=V - 1))
        parts = np.diff(np.concatenate([[0], cuts, [16]]))
        if zeros or np.all(parts > 0):
            return tuple(F(int(x), 16) for x in parts)


def _random_case(rng: np.random.Generator, shape: Shape, replacement: bool) -> tuple[list[int], list[Row], list[Row]]:
    """Tokens, p rows [N], q rows [N-1] (the sibling laws) for a tree of ``shape``."""
    n = len(shape)
    p_rows = [_dyadic_row(rng) for _ in range(n)]
    node_q = [_dyadic_row(rng, zeros=not replacement) for _ in range(n)]
    tokens = [-1]
    q_rows: list[Row] = []
    for i in range(1, n):
        earlier = [tokens[j] for j in range(1, i) if shape[j] == shape[i]]
        law = sibling_law(node_q[shape[i]], earlier, replacement)
        assert law is not None
        x = int(rng.choice(V, p=[float(v) for v in law]))
        tokens.append(x)
        q_rows.append(law)
    return tokens, p_rows, q_rows


def _float_law(
    verify: object, shape: Shape, tokens: list[int], p_rows: list[Row], q_rows: list[Row]
) -> dict[tuple[Outcome, int, str], F]:
    tree = DraftTree(shape, tuple(tokens))
    p = np.array([[float(v) for v in r] for r in p_rows])
    q = np.array([[float(v) for v in r] for r in q_rows])

    def run(u: Sequence[float]) -> tuple[Outcome, int, str]:
        verdict = verify(tree, p, q, list(u))  # type: ignore[operator]
        return verdict.path, verdict.token, verdict.kind

    return tree_cells_law(run, shape, tokens, p_rows, q_rows)


FLOAT_SHAPES = [s for n in (2, 3, 4) for s in all_shapes(n)] + [(-1, 0, 0, 0), (-1, 0, 0, 0, 1)]


@pytest.mark.parametrize("shape", FLOAT_SHAPES, ids=str)
def test_float_verifier_decides_like_the_exact_rule(shape: Shape) -> None:
    rng = np.random.default_rng(len(shape) * 1000 + sum(shape))
    for case in range(6):
        tokens, p_rows, q_rows = _random_case(rng, shape, replacement=case % 2 == 0)
        assert _float_law(verify_tree_sampled, shape, tokens, p_rows, q_rows) == tree_verdict_law(
            shape, tokens, p_rows, q_rows
        )


@pytest.mark.parametrize("name", sorted(VERIFIER_MUTANTS))
def test_float_mutants_are_killed(name: str) -> None:
    mutant = VERIFIER_MUTANTS[name]
    rng = np.random.default_rng(7)
    for _ in range(200):
        shape = (-1, 0, 0, 0)
        tokens, p_rows, q_rows = _random_case(rng, shape, replacement=True)
        if _float_law(mutant, shape, tokens, p_rows, q_rows) != tree_verdict_law(shape, tokens, p_rows, q_rows):
            return
    pytest.fail(f"mutant {name} survived 200 random trees")


def test_siblings_not_renormalised_pipeline_is_killed() -> None:
    """The reference's sibling_laws equals the exact conditional laws; the raw rows do not, and
    verifying with them changes the emitted law (exactly)."""
    q = (F(1, 4), F(1, 2), F(1, 8), F(1, 8))
    tokens = [1, 0, 3]
    exact = [sibling_law(q, tokens[:j], False) for j in range(3)]
    got = sibling_laws([float(v) for v in q], tokens, replacement=False)
    assert [[F(float(v)) for v in row] for row in got] == [list(r) for r in exact if r is not None]
    raw = raw_sibling_rows([float(v) for v in q], tokens)
    assert not np.array_equal(raw, got)
    assert not _lossless((-1, 0, 0), False, Flaws(siblings_not_renormalised=True))
    with pytest.raises(VerificationError, match="repeats"):
        sibling_laws([0.5, 0.5], [1, 1], replacement=False)
    with pytest.raises(VerificationError, match="no probability mass"):
        sibling_laws([1.0, 0.0], [0, 1], replacement=False)


# -- protocol version 1, batch, greedy, contract -----------------------------------------------------


def test_chain_tree_is_protocol_version_1_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    for _ in range(500):
        k, vocab = int(rng.integers(1, 6)), int(rng.integers(1, 7))
        p = rng.dirichlet(np.full(vocab, 0.5), size=k + 1)
        q = rng.dirichlet(np.full(vocab, 0.5), size=k)
        drafts = [int(rng.choice(vocab, p=row)) for row in q]
        u = rng.random(k + 1)
        if rng.random() < 0.3:  # exact ties: p == q rows
            q = p[:k].copy()
            drafts = [int(rng.choice(vocab, p=row)) for row in q]
        want = verify_sampled(p, q, drafts, u.tolist())
        tree = DraftTree.chain(drafts)
        got = verify_tree_sampled(tree, p, q, u)
        assert (len(got.path), got.token, got.kind) == (want.accepted, want.token, want.kind)
        assert got.path == tuple(range(1, want.accepted + 1))


def test_batch_equals_scalar() -> None:
    rng = np.random.default_rng(5)
    for shape in FLOAT_SHAPES:
        tokens, p_rows, q_rows = _random_case(rng, shape, replacement=True)
        tree = DraftTree(shape, tuple(tokens))
        p = np.array([[float(v) for v in r] for r in p_rows])
        q = np.array([[float(v) for v in r] for r in q_rows])
        u = rng.random((300, len(shape)))
        node, token, bonus = verify_tree_sampled_batch(tree, p, q, u)
        for b in range(u.shape[0]):
            one = verify_tree_sampled(tree, p, q, u[b])
            assert (one.path[-1] if one.path else 0, one.token, one.kind == "bonus") == (node[b], token[b], bonus[b])


@settings(max_examples=120, deadline=None, derandomize=True)
@given(data=st.data(), n=st.integers(2, 7), vocab=st.integers(1, 3))
def test_greedy_tree_is_the_longest_argmax_path(data: st.DataObject, n: int, vocab: int) -> None:
    shape: Shape = (-1, *[data.draw(st.integers(0, i - 1)) for i in range(1, n)])
    tokens = (-1, *[data.draw(st.integers(0, vocab - 1)) for _ in range(1, n)])
    rows = [tuple(F(data.draw(st.integers(0, 2))) for _ in range(vocab)) for _ in range(n)]  # ties likely
    p = np.array([[float(v) for v in r] for r in rows])
    got = verify_tree_greedy(DraftTree(shape, tokens), p)
    assert (got.path, got.token, got.kind) == greedy_tree_verdict(shape, tokens, rows)


@pytest.mark.parametrize(
    ("parents", "tokens", "fragment"),
    [
        ((0, 0), (-1, 1), "root"),
        ((-1, 1), (-1, 1), "parents must come first"),
        ((-1, 0), (-1,), "one token per node"),
        ((), (), "1..4096 nodes"),
    ],
)
def test_bad_trees_are_refused(parents: tuple[int, ...], tokens: tuple[int, ...], fragment: str) -> None:
    with pytest.raises(VerificationError, match=fragment):
        DraftTree(parents, tokens)


def test_bad_verification_inputs_are_refused() -> None:
    tree = DraftTree((-1, 0, 0), (-1, 0, 1))
    p = np.full((3, 2), 0.5)
    q = np.full((2, 2), 0.5)
    verify_tree_sampled(tree, p, q, [0.1, 0.2, 0.3])
    for bad_p, bad_q, bad_u, fragment in [
        (p[:2], q, [0.1, 0.2, 0.3], "p must be"),
        (p, q[:1], [0.1, 0.2, 0.3], "q must be"),
        (p, q, [0.1, 0.2], "uniforms"),
        (p, q, [0.1, 0.2, 1.0], "outside"),
        (p, np.array([[0.0, 1.0], [0.5, 0.5]]), [0.1, 0.2, 0.3], "q = 0"),
        (np.full((3, 2), 0.4), q, [0.1, 0.2, 0.3], "sums to"),
    ]:
        with pytest.raises(VerificationError, match=fragment):
            verify_tree_sampled(tree, bad_p, bad_q, bad_u)
    with pytest.raises(VerificationError, match="outside the vocabulary"):
        verify_tree_sampled(DraftTree((-1, 0), (-1, 5)), p[:2], q[:1], [0.1, 0.2])
    with pytest.raises(VerificationError, match="at least one draft node"):
        verify_tree_greedy(DraftTree((-1,), (-1,)), p[:1])
