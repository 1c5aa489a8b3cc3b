"""``--draft auto``: every lookup proposer at once, kept by what the target accepts as it decodes.

No flag picks the proposer. Each cycle every proposer offers its continuation of the history:

    suffix     the suffix structures of :mod:`reference.suffix_draft` (this request's text and the
               optional cross-request cache): the most frequent continuations of the longest
               matching suffix, grown best-first into a tree of up to ``width`` siblings a node
    ngram      prompt lookup (:func:`reference.drafts.lookup`): what followed the MOST RECENT earlier
               occurrence of the longest suffix n-gram (n = 4..2), a chain

Each proposed token carries an estimate of the probability that the target accepts it given its
path was accepted: the proposer's raw estimate (suffix: the observed frequency of that
continuation; ngram: a constant) times a calibration factor of that proposer and evidence bucket,
learned from what the target actually committed (:class:`reference.draft_control.Calibration`,
decaying, so a proposer that stops being accepted loses its share within a few cycles). The
proposals are merged into ONE token tree (the same token under the same path is one node, its
estimate the larger of its proposers'), siblings' estimates scaled to sum to at most MAX_ACCEPT
(they are disjoint events), a node's reach = the product of the estimates along its path; the
cost model (:func:`reference.draft_control.best_size`, expected tokens per unit of target cost
over the verify-cost curve) keeps the best-first prefix that pays, possibly nothing (a plain step).
So on a request where one proposer keeps being accepted its branch is what is verified; when it
stops, the other's is.

Learning is counterfactual: after the cycle every proposer's LAST proposal is compared with the
tokens the target committed, whether or not it was verified. Under greedy decoding a token that
equals the committed one is exactly a token verification would have accepted; under sampling the
committed token at a position has the target's law there, so a deterministic proposal equals it
with probability p(x), which is the probability that verification accepts it (one-hot q:
min(1, p(x)/1)); siblings x_1, x_2 below one node are accepted with p(x_1) + p(x_2) in total under
the tree protocol, so the per-node match rates are the right reaches for both modes.

Lossless. The tree is a function of the past alone: the history (prompt + committed tokens),
earlier requests' outputs (the cache) and the measured times of earlier passes; the proposers,
their calibrations and the cost curve never read the target's draws of this cycle. The tree protocol
(:mod:`reference.tree_speculative`) emits the target's law for ANY tree whose laws q are the
laws its tokens were drawn from (here: deterministic, one-hot rows), and greedy verification emits
the target's argmax path for any tree; so the output law (sampled) and the output tokens (greedy)
are those of plain decoding whatever this module chooses. Only the speed depends on it.

Sampled decoding pays through the same machinery: below a node the tree offers the most frequent
continuations as deterministic siblings, accepted with the SUM of their target probabilities, and
the cost model builds a tree only when its expected tokens per unit of cost beat a plain step,
cost timed over whole cycles (:meth:`AutoDraft.observe_cycle`: a sampled row read costs a law
evaluation over the vocabulary, which a forward-only curve would miss).

Seeds. With ``online`` (the default) the cost curve is this draft's own timings of its cycles, so
which tree is verified, and with it how many uniforms a cycle reads, depends on the machine's
speed: the same seed gives the same LAW, not the same tokens (timings are independent of the
target's draws, so the argument above holds with them). ``online=False`` with a fixed ``cost``
curve makes every choice a function of the history alone: the same seed, the same tokens.

The prompt's pass is a plain step computing the head on its last row alone (on an engine whose
``forward`` takes ``last_only``): a draft pass would compute the head on every prompt row.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec.reference.draft_control import MAX_ACCEPT, Calibration, MeasuredCurve, VerifyCost, best_size
from verispec.reference.errors import DraftError
from verispec.reference.seams import DraftContext, Proposal
from verispec.reference.suffix_draft import (
    CALIBRATION_BUCKETS,
    DEPTH,
    MAX_MATCH,
    MAX_TIMED_ROWS,
    PLAIN_PROBE,
    RequestMemory,
    SuffixCache,
    SuffixTree,
    Trie,
    grow_tree,
)
from verispec.reference.tree_decode import TreeProposal, score_tree
from verispec.reference.tree_speculative import DraftTree

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F32 = npt.NDArray[np.float32]

PROPOSERS = ("suffix", "ngram")
WIDTH = 3  # most siblings the suffix proposer offers below a node
NODES = 12  # most draft nodes a tree holds before the cost model cuts it
SUFFIX_MIN_MATCH = 1  # a one-token context is offered too; its calibration and the cost decide
NGRAM_MAX, NGRAM_MIN = 4, 2  # prompt lookup's n-gram lengths (reference/drafts.py)
NGRAM_ESTIMATE = 0.7  # the lookup's raw estimate per token, before calibration
PRIOR_ROWS = 9  # rows of the engine's measured cost curve asked for (measured once per model and process)
CALIBRATION_RANGE = (0.02, 2.0)  # a proposer that stops being accepted can fall to ~0 (suffix's own: 0.25)


class Tracker:
    """Per-proposer calibration over evidence buckets (:class:`Calibration`, decaying)."""

    def __init__(self) -> None:
        self.calibration = Calibration(bounds=CALIBRATION_RANGE)

    def apply(self, proposer: int, estimates: Sequence[float], buckets: Sequence[int]) -> list[float]:
        return self.calibration.apply(estimates, [_key(proposer, b) for b in buckets])

    def factor(self, proposer: int, bucket: int) -> float:
        return self.calibration.factor(_key(proposer, bucket))


def _key(proposer: int, bucket: int) -> int:
    return proposer * 1000 + bucket


@dataclass(frozen=True)
class Candidate:
    """One proposed node before merging: parent (index into the candidate list, -1 = root), token,
    raw estimate, evidence bucket, proposer."""

    parent: int
    token: int
    estimate: float
    bucket: int
    proposer: int


@dataclass
class _Node:
    parent: int  # merged-node index (0 = root)
    token: int
    accept: float = 0.0  # calibrated conditional acceptance (the max over its proposers)
    reach: float = 0.0
    children: dict[int, int] | None = None


class AutoDraft(RequestMemory):
    """``--draft auto`` (module docstring): a :class:`reference.tree_decode.TreeDraftSource`."""

    def __init__(
        self,
        cache: SuffixCache | None = None,
        cache_path: Path | None = None,
        *,
        width: int = WIDTH,
        nodes: int = NODES,
        cost: Mapping[int, float] | None = None,
        online: bool = True,
        depth: int = DEPTH,
    ) -> None:
        if width < 1 or nodes < 1:
            raise DraftError(f"auto draft needs width >= 1 and nodes >= 1, got {width} and {nodes}")
        self.name = "auto"
        self.tree_width = width
        self.nodes = nodes
        self.cache = cache
        self.cache_path = cache_path
        self.depth = depth
        self.prior_curve = cost  # rows -> c(rows), e.g. the engine's verify_cost_curve (None: the engine's, if any)
        self.online = online  # time this draft's own passes and prefer them to the prior curve
        self.cost = VerifyCost()
        self.tracker = Tracker()
        self.draft_passes = 0
        self.draft_time_s = 0.0
        self.ctx: DraftContext | None = None
        self.tree = SuffixTree(depth)
        self.ngrams = NgramIndex()
        self.seen: list[int] = []
        self.prompt_len: int | None = None
        self._since_plain = 0
        self._last: tuple[int, list[Candidate], list[float]] | None = None  # (history length, candidates, accepts)
        self.chosen = {p: 0 for p in PROPOSERS}  # verified nodes per proposer (a node of two counts for both)

    # -- the draft seam ------------------------------------------------------------------------------

    def start(self, context: DraftContext) -> None:
        self.remember_request()
        self.ctx = context
        self.draft_passes, self.draft_time_s = 0, 0.0
        self.tree, self.seen, self.prompt_len, self._last = SuffixTree(self.depth), [], None, None
        self.ngrams = NgramIndex()
        self._since_plain = 0
        self.cost = VerifyCost()
        self.tracker = Tracker()
        self.chosen = {p: 0 for p in PROPOSERS}
        if self.prior_curve is None:
            curve = getattr(context.target, "verify_cost_curve", None)
            self.prior_curve = curve(PRIOR_ROWS) if callable(curve) else None

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        """The single-path seam: the tree's best path (the loop runs trees; kept for the protocol)."""
        tree = self.propose_tree(history, k, k).tree
        node, tokens = 0, []
        while tree.children(node):
            node = tree.children(node)[0]
            tokens.append(tree.tokens[node])
        return Proposal(tuple(tokens))

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> "F32":
        return self.score_tree(pending, DraftTree.chain(drafts))

    # -- trees ------------------------------------------------------------------------------------------

    def propose_tree(self, history: Sequence[int], max_depth: int, max_nodes: int) -> TreeProposal:
        started = time.perf_counter()
        self._learn(history)
        self._sync(history)
        pending = len(history) - (self.ctx.cache.length if self.ctx is not None else len(history) - 1)
        nodes: list[_Node] = []
        # a plain step now and then keeps c(1) measured online (at once when no prior curve stands in)
        probe = self.online and (
            (1 not in self.cost.seconds and self.prior_curve is None) or self._since_plain >= PLAIN_PROBE
        )
        candidates = self.candidates(history, max_depth) if max_depth >= 1 else []
        accepts = self.calibrated(candidates)
        self._last = (len(history), candidates, accepts) if candidates else None  # learned from next cycle
        if pending == 1 and not probe and candidates and max_nodes >= 1:  # the prompt's pass: a plain step
            nodes = self.choose(candidates, accepts, max_depth, min(max_nodes, self.nodes))
        self._since_plain = 0 if not nodes else self._since_plain + 1
        tree = DraftTree((-1, *(n.parent for n in nodes)), (-1, *(n.token for n in nodes)))
        self.draft_time_s += time.perf_counter() - started
        return TreeProposal(tree)

    def candidates(self, history: Sequence[int], max_depth: int) -> list[Candidate]:
        """Every proposer's nodes after ``history`` (uncalibrated), parents before children."""
        out: list[Candidate] = []
        trees: list[Trie] = [self.tree] if self.cache is None else [self.tree, self.cache.tree]
        grown = grow_tree(
            trees,
            history,
            max_depth,
            self.nodes,
            self.tree_width,
            lambda estimates, buckets: self.tracker.apply(0, estimates, buckets),
            MAX_MATCH,
            SUFFIX_MIN_MATCH,
        )
        for node in grown:  # grow_tree's parents are 1-based node ids (0 = root)
            out.append(Candidate(node.parent - 1, node.token, node.estimate, min(node.context, CALIBRATION_BUCKETS), 0))
        matched, chain = self.ngrams.lookup(max_depth)
        parent = -1
        for i, token in enumerate(chain):
            out.append(Candidate(parent, token, NGRAM_ESTIMATE, matched * 10 + min(i, 3), 1))
            parent = len(out) - 1
        return out

    def calibrated(self, candidates: Sequence[Candidate]) -> list[float]:
        return [
            min(MAX_ACCEPT, c.estimate * self.tracker.factor(c.proposer, c.bucket)) if c.estimate > 0 else 0.0
            for c in candidates
        ]

    def choose(
        self, candidates: Sequence[Candidate], accepts: Sequence[float], max_depth: int, max_nodes: int
    ) -> list[_Node]:
        """Merge the candidates into one tree, rank its nodes by reach, keep the prefix that pays."""
        merged = [_Node(-1, -1, 1.0, 1.0, {})]
        where: list[int] = []  # candidate index -> merged node
        depth = [0]
        for c, a in zip(candidates, accepts):
            parent = 0 if c.parent < 0 else where[c.parent]
            kids = merged[parent].children
            assert kids is not None
            node = kids.get(c.token)
            if node is None:
                node = len(merged)
                kids[c.token] = node
                merged.append(_Node(parent, c.token, a, 0.0, {}))
                depth.append(depth[parent] + 1)
            else:
                merged[node].accept = max(merged[node].accept, a)
            where.append(node)
        for v in range(1, len(merged)):  # parents come first: reach from the parent's
            here = merged[v]
            siblings = merged[here.parent].children or {}
            total = sum(merged[s].accept for s in siblings.values())
            scale = MAX_ACCEPT / total if total > MAX_ACCEPT else 1.0
            here.reach = merged[here.parent].reach * here.accept * scale
        order = sorted(
            (v for v in range(1, len(merged)) if depth[v] <= max_depth and merged[v].reach > 0),
            key=lambda v: (-merged[v].reach, depth[v], v),
        )
        kept: list[int] = []
        inside = {0}
        for v in order:  # a child's reach never exceeds its parent's: parents are listed first
            if merged[v].parent in inside:
                kept.append(v)
                inside.add(v)
            if len(kept) >= max_nodes:
                break
        kept = kept[: best_size([merged[v].reach for v in kept], self._cost())]
        renumber = {0: 0, **{v: i for i, v in enumerate(kept, start=1)}}
        out = [_Node(renumber[merged[v].parent], merged[v].token, merged[v].accept, merged[v].reach) for v in kept]
        for c, v in zip(candidates, where):
            if v in renumber and v != 0:
                self.chosen[PROPOSERS[c.proposer]] += 1
        return out

    def score_tree(self, pending: Sequence[int], tree: DraftTree) -> "F32":
        assert self.ctx is not None, "start() first"
        return score_tree(self.ctx.target, self.ctx.cache, pending, tree)  # the prompt's: its last row only

    def observe_cycle(self, rows: int, seconds: float) -> None:
        """The loop's time of a whole cycle after the prompt (the target pass, the law of every row
        verification reads, the residuals, the cache): what a tree of ``rows`` rows costs against a
        plain step, so the cost curve counts verification's own work too (a law evaluation over the
        vocabulary per row read: sampled rows are not free)."""
        if self.online and rows <= MAX_TIMED_ROWS:
            self.cost.observe(rows, seconds)

    # -- learning ---------------------------------------------------------------------------------------

    def _learn(self, history: Sequence[int]) -> None:
        """Calibrate every proposer on its previous proposal against what was committed since: below
        the root and below each matched node every offered child was tried, the one whose token
        came next (if any) hit; positions past the committed text are not counted."""
        if self._last is None:
            return
        base, candidates, _ = self._last
        self._last = None
        after = list(history[base:])
        if not after or not candidates:
            return
        estimates: list[float] = []
        buckets: list[int] = []
        hits: list[bool] = []
        matched = {-1: 0}  # candidate index -> how many committed tokens its path matched (root: 0)
        for i, c in enumerate(candidates):
            at = matched.get(c.parent)
            if at is None or at >= len(after):  # parent missed, or its children lie past the committed text
                continue
            hit = after[at] == c.token
            estimates.append(c.estimate)
            buckets.append(_key(c.proposer, c.bucket))
            hits.append(hit)
            if hit:
                matched[i] = at + 1
        if estimates:
            self.tracker.calibration.observe_outcomes(estimates, buckets, hits)

    def _cost(self) -> Any:
        return _PriorThenMeasured(self.cost, self.prior_curve)

    def _sync(self, history: Sequence[int]) -> None:
        """Grow the request tree to ``history`` (committed text only grows; anything else rebuilds)."""
        if self.prompt_len is None:
            self.prompt_len = len(history)
        n = len(self.seen)
        if len(history) < n or list(history[:n]) != self.seen:
            self.tree, self.ngrams, self.seen, n = SuffixTree(self.depth), NgramIndex(), [], 0
        for t in history[n:]:
            self.tree.append(int(t))
            self.ngrams.append(int(t))
        self.seen.extend(int(t) for t in history[n:])


class _PriorThenMeasured:
    """c(r): the online measurement (:class:`VerifyCost`) where it has timed r rows (or sizes
    around r) and one row; else the prior curve (the engine's ``verify_cost_curve``) when it holds
    r; else the online estimate (its linear prior or extrapolation)."""

    def __init__(self, online: VerifyCost, prior: Mapping[int, float] | None) -> None:
        self.online = online
        self.prior = MeasuredCurve(prior) if prior else None
        self.largest = max(online.seconds) if 1 in online.seconds else 0  # online sizes reach up to here
        self.memo: dict[int, float] = {}

    def relative(self, rows: int) -> float:
        if rows <= 1:
            return 1.0
        if rows not in self.memo:
            if rows <= self.largest or self.prior is None or rows not in self.prior.curve:
                self.memo[rows] = self.online.relative(rows)
            else:
                self.memo[rows] = self.prior.relative(rows)
        return self.memo[rows]


class NgramIndex:
    """Prompt lookup in O(n_max) a query: for every n-gram (n_min <= n <= n_max) of the text, where
    its latest occurrence starts and where the one before it started.

    :meth:`lookup` equals :func:`ngram_lookup` on the same text (tests/test_draft_choice.py):
    the text's suffix n-gram is always its latest occurrence, so the occurrence before it is the
    most recent EARLIER one, and what followed that is proposed."""

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> None:
        self.n_max, self.n_min = n_max, max(1, n_min)
        self.text: list[int] = []
        self.latest: dict[tuple[int, ...], int] = {}
        self.before: dict[tuple[int, ...], int] = {}

    def append(self, token: int) -> None:
        self.text.append(token)
        end = len(self.text)
        for n in range(self.n_min, min(self.n_max, end) + 1):
            key = tuple(self.text[end - n :])
            previous = self.latest.get(key)
            if previous is not None:
                self.before[key] = previous
            self.latest[key] = end - n

    def lookup(self, k: int) -> tuple[int, list[int]]:
        size = len(self.text)
        for n in range(min(self.n_max, size - 1), self.n_min - 1, -1):
            start = self.before.get(tuple(self.text[size - n :]))
            if start is not None:
                return n, self.text[start + n : start + n + k]
        return 0, []


def ngram_lookup(
    history: Sequence[int], k: int, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN
) -> tuple[int, list[int]]:
    """(n, tokens): what followed the most recent earlier occurrence of the longest suffix n-gram
    (n from ``n_max`` down to ``n_min``), up to ``k`` tokens; (0, []) when none recurs. The same
    choice as :func:`reference.drafts.lookup`, with the matched length."""
    h = list(history)
    size = len(h)
    for n in range(min(n_max, size - 1), max(1, n_min) - 1, -1):
        suffix = h[size - n :]
        for start in range(size - n - 1, -1, -1):
            if h[start : start + n] == suffix:
                return n, h[start + n : start + n + k]
    return 0, []
