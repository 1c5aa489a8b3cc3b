"""Speculative decoding: a draft proposes, the target verifies k+1 positions in ONE pass, we commit.

One cycle (state: ``history`` = prompt + committed output; the target cache holds every committed
token but the last few, the ``pending`` ones — after the first cycle exactly one)::

    k'      = how many to draft (k, or AdaptiveK's choice; never past max_tokens or the cache)
    x, q    = draft.propose(history, k')                 x_1..x_n (n <= k'), q their exact laws
    logits  = draft.score(pending, x)                    [n+1, V]: ONE batched target pass
    p_i     = law(logits_i, history + x_1..x_i, params)  THE target law, the drafts in the history
    verdict = verify_greedy(p, x)          if the target is greedy (no randomness)
              verify_sampled(p, q, x, u)   otherwise, u = rng.random(n + 1) (the draw protocol)
              (all three lines are :func:`reference.speculative.verify_drafts`: the rows by
              ``target_rows`` / ``draft_law_rows`` and the choice by ``verification_mode``, the
              code spec/ checks through ``speculative_rows``; tests/test_loop_checked_rows.py
              shows a mutant of it breaking this loop)
    commit    x_1..x_a + [token]   one at a time to the decode session (reference/session.py):
              EOG, stop strings, max_tokens cut inside the span
    rollback  target cache -> len(history before the cycle) + a   (O(1) truncate; a draft model's
              cache is synced by the draft on its next propose)

A cycle with no draft (n = 0: nothing to look up, p-min, adaptive k = 0) is a plain step: one
target pass, the token drawn from p_0 with one uniform, exactly as :mod:`reference.generate` does.
When the first cycle (the prompt's pass) has no draft, an engine whose ``forward`` takes
``last_only`` computes the head on the last row alone, as plain decoding does
(:func:`reference.tree_decode.plain_pass`); a draft there costs the head on every prompt row (on
Gemma 3, 262,144 rows each: 0.75 s of CPU for a 180-token prompt, ~27 decode steps), which is why
``--draft auto`` never drafts on the prompt's pass.
Sampled targets are never verified greedily, whatever the draft does.

A draft that proposes token TREES (:class:`reference.tree_decode.TreeDraftSource` with a positive
``tree_width``: ``--draft suffix:tree``) runs the tree cycle instead (:mod:`reference.tree_decode`):
the whole tree (depth <= k) scored in ONE pass under a tree attention mask, verified by the tree
protocol (greedy: the longest argmax path; sampled: recursive rejection sampling over siblings,
reference/tree_speculative.py), the accepted path's K, V kept in O(accepted) and the rest dropped;
the same session commits the path and the target's token. The draft's cost model picks the tree's
size per cycle (no AdaptiveK).

The model, the draft and the verifier are taken through the seams of :mod:`reference.seams`
(``TargetModel``: ``Model`` of :mod:`reference.model` and the fast engine's ``FastModel`` satisfy
it), so a faster engine with the same contract plugs in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from verispec.reference import speculative, tree_decode
from verispec.reference.drafts import AdaptiveK, check_options
from verispec.reference.sampling import sample, target_distribution
from verispec.reference.seams import DraftContext, DraftSource, DrawFn, LawFn, TargetModel, law_view
from verispec.reference.session import DecodeSession, GenerationRequest, GenerationResult
from verispec.reference.tokenizer import Tokenizer

# -- options and results --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeculativeOptions:
    """``k`` drafts per cycle (the maximum when ``adaptive``), ``p_min`` the draft's early stop."""

    k: int = 4
    adaptive: bool = False
    p_min: float = 0.0

    def validate(self) -> None:
        """DraftError for k < 1 or p_min outside [0, 1]."""
        check_options(self.k, self.p_min)


@dataclass(frozen=True)
class Cycle:
    """One cycle of the trace."""

    k: int  # drafts asked for
    drafted: tuple[int, ...]  # drafts proposed (may be fewer: lookup miss, p-min)
    accepted: int  # drafts accepted
    kind: Literal["bonus", "repair", "plain"]
    token: int  # the target's own token: repair, bonus or plain step
    emitted: tuple[int, ...]  # tokens committed (cut at EOG / stop string / max_tokens)
    draft_s: float  # time in propose
    verify_s: float  # time in score + verification
    parents: tuple[int, ...] | None = None  # a token tree: parent of each drafted node (0 = root,
    # node i = drafted[i - 1]); None for a single path
    path: tuple[int, ...] = ()  # a token tree: the accepted nodes

    @property
    def first_rejection(self) -> int | None:
        return self.accepted if self.kind == "repair" else None

    @property
    def depth(self) -> int:
        """Deepest drafted position (a single path: its length)."""
        if self.parents is None:
            return len(self.drafted)
        depths = [0]
        for parent in self.parents:
            depths.append(depths[parent] + 1)
        return max(depths)

    @property
    def width(self) -> int:
        """Most drafted candidates at one position (a single path: 1, or 0 with no drafts)."""
        if self.parents is None:
            return min(1, len(self.drafted))
        return max((self.parents.count(v) for v in set(self.parents)), default=0)

    def as_dict(self) -> dict[str, object]:
        return {
            "k": self.k,
            "drafted": list(self.drafted),
            "accepted": self.accepted,
            "first_rejection": self.first_rejection,
            "repaired": self.token if self.kind == "repair" else None,
            "bonus": self.token if self.kind == "bonus" else None,
            "plain": self.token if self.kind == "plain" else None,
            "emitted": list(self.emitted),
            "draft_ms": round(self.draft_s * 1e3, 3),
            "verify_ms": round(self.verify_s * 1e3, 3),
            **({} if self.parents is None else {"tree_parents": list(self.parents), "path": list(self.path)}),
        }


@dataclass(frozen=True)
class SpeculativeResult:
    generation: GenerationResult  # same shape as plain decoding's (stats.target_passes = cycles)
    cycles: tuple[Cycle, ...]
    draft: str
    mode: Literal["greedy", "sampled"]
    options: SpeculativeOptions
    draft_passes: int
    draft_time_s: float


def _measured_cost(model: TargetModel, max_rows: int) -> dict[int, float] | None:
    """The model's measured verify-cost curve when it offers one (the engine's
    ``verify_cost_curve``, engine/verify_cost.py), else None (AdaptiveK without a cost cap)."""
    curve = getattr(model, "verify_cost_curve", None)
    return curve(max_rows) if callable(curve) else None


# -- the loop ---------------------------------------------------------------------------------------


TREE_NODE_BUDGET = 64  # cache rows reserved past the history for a draft tree (the draft caps its own)


def speculative_generate(
    model: TargetModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    draft: DraftSource,
    options: SpeculativeOptions = SpeculativeOptions(),
    *,
    on_text: Callable[[str], None] | None = None,
    law: LawFn = target_distribution,
    draw: DrawFn = sample,
) -> SpeculativeResult:
    """Decode ``request`` speculatively with ``draft``; same stopping rules and stats as
    :func:`reference.generate.generate`, and the per-cycle trace.

    ``law`` is THE target law (:func:`reference.sampling.target_distribution`); a caller may pass a
    memoized wrapper of it (the statistical tests do), never another law. ``draw`` draws a plain
    cycle's token: THE draw (:func:`reference.sampling.sample`) or a bit-identical one (the fast
    engine's). Raises DraftError for bad options and the errors of plain decoding, all before any
    model work.
    """
    options.validate()
    model = law_view(model, request.params)
    session = DecodeSession(model.config, tokenizer, request, on_text=on_text)
    params, rng, history = request.params, session.rng, session.history
    mode = speculative.verification_mode(params, params)
    trees = draft if isinstance(draft, tree_decode.TreeDraftSource) and draft.tree_width > 0 else None
    adaptive = (
        AdaptiveK(options.k, cost=_measured_cost(model, options.k + 1)) if options.adaptive and trees is None else None
    )
    room = options.k if trees is None else max(options.k, TREE_NODE_BUDGET)  # rows past the history
    capacity = min(model.config.context_length, len(session.prompt) + request.max_tokens + room + 1)
    cache = model.new_cache(capacity)
    draft.start(DraftContext(model, cache, params, rng, options.p_min, law))

    cycles: list[Cycle] = []
    session.begin()
    while not session.done:
        before = len(history)
        if trees is not None and trees.tree_width > 0:  # start() may narrow it
            cycles.append(_tree_cycle(trees, session, cache, options.k, capacity, law))
            continue
        pending = history[cache.length :]
        want = adaptive.next_k() if adaptive is not None else options.k
        want = min(want, session.remaining - 1, capacity - before)
        t0 = time.perf_counter()
        proposal = draft.propose(history, want) if want > 0 else None
        drafts = list(proposal.tokens) if proposal is not None else []
        t1 = time.perf_counter()
        logits = draft.score(pending, drafts)  # [n+1, V]
        kind: Literal["bonus", "repair", "plain"]
        if drafts:
            assert proposal is not None
            verdict = speculative.verify_drafts(logits, history, drafts, proposal.q, params, rng, law)
            accepted, token, kind = verdict.accepted, verdict.token, verdict.kind
        else:
            accepted, kind = 0, "plain"
            token = draw(speculative.target_rows(logits, history, (), params, law)[0], rng)
        cache.truncate(before + accepted)
        t2 = time.perf_counter()
        if adaptive is not None:
            if drafts:
                adaptive.update(len(drafts), accepted, t1 - t0, t2 - t1)
            elif len(pending) == 1:  # the prompt's pass is no plain decode step
                adaptive.plain_step(t2 - t1)

        emitted: list[int] = []
        for t in [*drafts[:accepted], token]:  # one at a time: the session may end inside the span
            emitted.append(t)
            if session.commit(t):
                break
        session.target_passes += 1
        cycles.append(Cycle(want, tuple(drafts), accepted, kind, token, tuple(emitted), t1 - t0, t2 - t1))
    generation = session.finish()
    return SpeculativeResult(
        generation, tuple(cycles), draft.name, mode, options, draft.draft_passes, draft.draft_time_s
    )


def _tree_cycle(
    draft: tree_decode.TreeDraftSource, session: DecodeSession, cache: Any, k: int, capacity: int, law: LawFn
) -> Cycle:
    """One token-tree cycle (reference/tree_decode.py), committed to the session."""
    history = session.history
    max_depth = min(k, session.remaining - 1)
    max_nodes = capacity - len(history)
    proposal, outcome, draft_s, verify_s = tree_decode.run_tree_cycle(
        draft, history, cache, max_depth, max_nodes, session.request.params, session.rng, law
    )
    tree = proposal.tree
    emitted: list[int] = []
    for t in [*tree.path_tokens(outcome.path), outcome.token]:  # the session may end inside the span
        emitted.append(t)
        if session.commit(t):
            break
    session.target_passes += 1
    drafted = tuple(tree.tokens[1:])
    return Cycle(
        max_depth,
        drafted,
        len(outcome.path),
        outcome.kind,
        outcome.token,
        tuple(emitted),
        draft_s,
        verify_s,
        tuple(tree.parents[1:]) if drafted else None,
        outcome.path,
    )
