"""What "lossless" means for token trees, in exact arithmetic (``fractions.Fraction``).

The rule (reference/tree_speculative.py): at a node with target law r, siblings are tried in order;
sibling x (drawn from its law q) is accepted with probability min(1, r(x)/q(x)); on rejection
r <- norm(max(r - q, 0)) before the next sibling; when every sibling is rejected the token is drawn
from r; at a leaf, from the node's target law.

1. :func:`tree_verdict_law`: the law of the verdict (accepted path, token, kind) of a FIXED tree
   with fixed rows, with switches for the known failure modes (:class:`Flaws`).
2. :func:`tree_round_law`: the law of the tokens emitted by one round from a prefix, enumerating
   every tree a draft model can draw in a given shape (siblings i.i.d. or without replacement).
3. :func:`spec.exact.first_tokens_law` over rounds: the first m emitted tokens, whose law must be
   :func:`spec.exact.target_sequence_law`.

The tree shape is a parents tuple (``parents[0] == -1``, ``parents[i] < i``); the draft fills
its tokens: node i is drawn from the draft's law after its parent's path, given its earlier
siblings (the same row for i.i.d. siblings; renormalized without the earlier siblings' tokens
otherwise).

Independent oracle by design: the tree rule written again in exact rationals (its residual
``norm(max(r - q, 0))`` is its own copy), never importing reference, so a mistake in
reference/tree_speculative.py cannot hide in both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from verispec.spec.exact import ONE, ZERO, Law, Model, Outcome, Row, accept_probability, add_to

Shape = tuple[int, ...]  # parents, parents[0] == -1
TreeKey = tuple[Outcome, int, str]  # (accepted node path, token, kind)
TreeLaw = dict[TreeKey, Fraction]


@dataclass(frozen=True)
class Flaws:
    """Known ways to get the tree rule wrong (all off: the correct rule).

    residual_not_updated  every sibling is tested against the node's target law p, never the
                          residual left by the rejected siblings before it (the final draw still
                          uses the residual chain: on a single-sibling chain this is the correct rule)
    siblings_not_renormalised  siblings drawn WITHOUT replacement are verified with the draft's
                          raw row instead of their true law (the row without the earlier siblings,
                          renormalized): a pipeline bug, see :func:`tree_round_law`
    duplicates_skipped    a sibling repeating an earlier rejected token is skipped, so the
                          residual is not updated for it
    duplicates_double_counted  duplicate siblings are merged into their first occurrence, whose
                          draft mass is counted once per copy (q(x) -> c * q(x)) in the test and
                          in the residual update
    """

    residual_not_updated: bool = False
    siblings_not_renormalised: bool = False
    duplicates_skipped: bool = False
    duplicates_double_counted: bool = False


CORRECT = Flaws()


def children(shape: Shape, node: int) -> list[int]:
    return [i for i in range(node + 1, len(shape)) if shape[i] == node]


def normalized(row: Sequence[Fraction]) -> Row:
    total = sum(row, ZERO)
    return tuple(v / total for v in row)


def residual(r: Row, q: Row) -> Row | None:
    """norm(max(r - q, 0)); None when it is all zero (then no rejection could have happened)."""
    rest = tuple(max(ZERO, a - b) for a, b in zip(r, q))
    mass = sum(rest, ZERO)
    return None if mass == 0 else tuple(v / mass for v in rest)


def tree_verdict_law(
    shape: Shape, tokens: Sequence[int], p_rows: Sequence[Row], q_rows: Sequence[Row], flaws: Flaws = CORRECT
) -> TreeLaw:
    """Law of the verdict of a fixed tree: ``p_rows[v]`` target law after node v's path,
    ``q_rows[i - 1]`` the law node i's token is verified against (for i >= 1)."""
    law: TreeLaw = {}

    def visit(v: int, path: Outcome, mass: Fraction) -> None:
        kids = children(shape, v)
        if not kids:
            for y, py in enumerate(p_rows[v]):
                add_to(law, (path, y, "bonus"), mass * py)
            return
        r: Row = p_rows[v]
        seen: list[int] = []
        for c in _tested(kids, tokens, flaws):
            x = tokens[c]
            q = q_rows[c - 1]
            if flaws.duplicates_double_counted:
                copies = sum(1 for d in kids if tokens[d] == x)
                q = tuple(copies * v_ if y == x else v_ for y, v_ in enumerate(q))
            if flaws.duplicates_skipped and x in seen:
                continue
            seen.append(x)
            tested = p_rows[v] if flaws.residual_not_updated else r
            a = (
                accept_probability(tested[x], q[x])
                if not flaws.duplicates_double_counted
                else min(ONE, tested[x] / q[x])
            )
            visit(c, path + (c,), mass * a)
            mass *= ONE - a
            if mass == 0:
                return
            nxt = residual(r, q)
            # None: q >= r everywhere. For true laws q = r, a certain acceptance (mass is 0 and we
            # returned above); only a flawed q (mass > 1) gets here: the protocol's fallback
            r = p_rows[v] if nxt is None else nxt
        for y, ry in enumerate(r):
            add_to(law, (path, y, "repair"), mass * ry)

    visit(0, (), ONE)
    return law


def _tested(kids: list[int], tokens: Sequence[int], flaws: Flaws) -> list[int]:
    """The siblings a verifier tests, in order (a merging verifier tests each token's first copy)."""
    if not flaws.duplicates_double_counted:
        return kids
    firsts: dict[int, int] = {}
    for c in kids:
        firsts.setdefault(tokens[c], c)
    return list(firsts.values())


def emitted_of(shape: Shape, tokens: Sequence[int], law: TreeLaw) -> Law:
    """Verdict law -> law of the emitted tokens (path tokens, then the drawn token)."""
    out: Law = {}
    for (path, y, _), mass in law.items():
        add_to(out, tuple(tokens[c] for c in path) + (y,), mass)
    return out


# -- drawing trees ----------------------------------------------------------------------------------


def sibling_law(q: Row, earlier: Sequence[int], replacement: bool) -> Row | None:
    """The law of the next sibling after ``earlier`` (None: nothing left to draw)."""
    if replacement:
        return q
    left = tuple(ZERO if y in earlier else v for y, v in enumerate(q))
    mass = sum(left, ZERO)
    return None if mass == 0 else tuple(v / mass for v in left)


def draw_trees(
    shape: Shape, draft: Model, prefix: Outcome, replacement: bool
) -> Iterable[tuple[tuple[int, ...], Fraction, list[Row], list[Row]]]:
    """Every way the draft fills ``shape`` from ``prefix``: ``(tokens, probability, true laws
    [N-1], raw rows [N-1])`` (a node whose siblings used up the draft's support is never drawn:
    such shapes are refused with ValueError)."""

    def fill(
        i: int, tokens: tuple[int, ...], mass: Fraction, laws: list[Row], raws: list[Row]
    ) -> Iterable[tuple[tuple[int, ...], Fraction, list[Row], list[Row]]]:
        if i == len(shape):
            yield tokens, mass, laws, raws
            return
        parent = shape[i]
        path: list[int] = []
        node = parent
        while node > 0:
            path.append(tokens[node])
            node = shape[node]
        raw = draft(prefix + tuple(reversed(path)))
        earlier = [tokens[j] for j in range(1, i) if shape[j] == parent]
        law = sibling_law(raw, earlier, replacement)
        if law is None:
            raise ValueError(f"shape {shape}: node {i} has no token left to draw without replacement")
        for x, qx in enumerate(law):
            if qx:
                yield from fill(i + 1, tokens + (x,), mass * qx, laws + [law], raws + [raw])

    yield from fill(1, (-1,), ONE, [], [])


def tree_round_law(
    shape: Shape, target: Model, draft: Model, prefix: Outcome, replacement: bool, flaws: Flaws = CORRECT
) -> Law:
    """Law of the tokens emitted by one tree round from ``prefix`` (every drawable tree)."""
    out: Law = {}
    for tokens, mass, laws, raws in draw_trees(shape, draft, prefix, replacement):
        p_rows = [target(prefix + _path(shape, tokens, v)) for v in range(len(shape))]
        q_rows = raws if flaws.siblings_not_renormalised else laws
        for seq, m in emitted_of(shape, tokens, tree_verdict_law(shape, tokens, p_rows, q_rows, flaws)).items():
            add_to(out, seq, mass * m)
    return out


def _path(shape: Shape, tokens: Sequence[int], v: int) -> Outcome:
    path: list[int] = []
    while v > 0:
        path.append(tokens[v])
        v = shape[v]
    return tuple(reversed(path))


def greedy_tree_verdict(shape: Shape, tokens: Sequence[int], p_rows: Sequence[Row]) -> TreeKey:
    """The greedy rule by brute force: every root path of argmax tokens, the longest (first on ties)."""
    best = [max(range(len(r)), key=lambda y: (r[y], -y)) for r in p_rows]
    paths: list[Outcome] = [()]
    frontier: list[Outcome] = [()]
    while frontier:
        grown: list[Outcome] = []
        for path in frontier:
            v = path[-1] if path else 0
            grown.extend(path + (c,) for c in children(shape, v) if tokens[c] == best[v])
        paths.extend(grown)
        frontier = grown
    longest = max(paths, key=len)  # max keeps the first of equal lengths (index order)
    end = longest[-1] if longest else 0
    return longest, best[end], ("repair" if children(shape, end) else "bonus")


# -- a float verifier's law, integrated over the cells of its uniforms ------------------------------


def tree_thresholds(
    shape: Shape, tokens: Sequence[int], p_rows: Sequence[Row], q_rows: Sequence[Row]
) -> tuple[dict[int, Fraction], list[Fraction]]:
    """The correct rule's breakpoints: per node i >= 1 the acceptance probability of its test (the
    test happens in one state only: its parent reached, its earlier siblings rejected), and every
    cumulative boundary of every law the final draw can use (each p row, each residual)."""
    accept: dict[int, Fraction] = {}
    finals: set[Fraction] = set()

    def cuts(row: Row) -> None:
        total = sum(row, ZERO)
        running = ZERO
        for v in row:
            running += v
            if running < total:
                finals.add(running / total)

    for v in range(len(shape)):
        cuts(p_rows[v])
        r: Row = p_rows[v]
        for c in children(shape, v):
            x = tokens[c]
            accept[c] = accept_probability(r[x], q_rows[c - 1][x])
            nxt = residual(r, q_rows[c - 1])
            if nxt is None:
                break
            r = nxt
            cuts(r)
    return accept, sorted(finals | {ZERO, ONE})


def tree_cells_law(
    verify: Callable[[Sequence[float]], tuple[Outcome, int, str]],
    shape: Shape,
    tokens: Sequence[int],
    p_rows: Sequence[Row],
    q_rows: Sequence[Row],
) -> TreeLaw:
    """``verify(uniforms) -> (path, token, kind)`` evaluated at the midpoint of every cell of the
    correct rule's partition of [0, 1)^N, weighted by the cell's volume: the verifier's exact law
    when it decides like the correct rule inside each cell (a verifier that does not is caught as a
    difference from :func:`tree_verdict_law`, whose cells these are)."""
    accept, finals = tree_thresholds(shape, tokens, p_rows, q_rows)
    nodes = list(range(1, len(shape)))
    per_node: list[list[tuple[Fraction, Fraction]]] = []  # (midpoint, width) cells of u_{i-1}
    for i in nodes:
        a = accept[i]
        per_node.append([(m, w) for m, w in ((a / 2, a), ((ONE + a) / 2, ONE - a)) if w > 0])
    final_cells = [((lo + hi) / 2, hi - lo) for lo, hi in zip(finals, finals[1:]) if hi > lo]
    law: TreeLaw = {}
    for combo in _product(per_node):
        weight = ONE
        for _, w in combo:
            weight *= w
        for mid, w in final_cells:
            path, token, kind = verify([float(m) for m, _ in combo] + [float(mid)])
            add_to(law, (path, token, kind), weight * w)
    return law


def _product(lists: Sequence[Sequence[tuple[Fraction, Fraction]]]) -> Iterable[tuple[tuple[Fraction, Fraction], ...]]:
    import itertools

    return itertools.product(*lists)
