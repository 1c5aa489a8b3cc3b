"""Certified layer early exit: exit heads, gates, and exact KV by deferred catch-up.

The exit head at depth k (the hidden state after layers 0..k-1, ``hidden[k]`` of a forward pass)
is the model's own head (final RMSNorm, lm_head, softcap), optionally after a tuned-lens affine
map fit per layer (:class:`reference.exit_head.Lens`). A token exits at the first candidate depth whose gate admits
it, and its token is the exit head's argmax; otherwise it runs every layer.

Gates (one calibrated number per candidate depth and prompt kind, see :mod:`reference.calibration`):

- ``supnorm`` / ``halfrange``: the seed's residual certificate with a threshold Q calibrated by
  prompt-level risk control at alpha/K on "fraction of the prompt's tokens with score > Q",
  admitted iff fl(2 fl(Q + slack)) < margin
  (:func:`reference.certificate.residual_admits`, float32, proved sound in proofs/float32.py).
- ``margin``: admit iff margin > lambda, lambda calibrated by prompt-level risk control on
  "fraction of the prompt's tokens admitted and flipped" at alpha/K, alpha = 1 - q
  (:func:`reference.conformal.prompt_risk_threshold`).

Either way the claim is prompt-level, per prompt kind: "expected flip fraction of a new prompt
≤ α, valid when prompts (not tokens) are exchangeable" (flip: served token != the full model's
argmax along the full model's greedy trajectory). The serve loop takes the prompt's kind
(``generate_early_exit(kind=...)``); a kind with too few calibration prompts admits nothing.

Exact KV by deferred catch-up. A token that exits at depth k has K/V for layers 0..k-1 only; it
*owes* layers k..L-1. Its hidden state at depth k is kept in a backlog. A later token that runs
layer j first needs layer j of every earlier slot, so the owed rows at depth j join it and run
*in the same batched pass* (one :meth:`TargetModel.forward_layers` call per segment of layers between
boundaries -- candidate depths and depths where another owed row joins -- and per contiguous run
of slots, runs in slot order so that causality holds). Owed rows move on together with the later
token, as deep as it goes; rows that reach depth L leave the backlog.
When the backlog holds ``backlog_bound`` rows they are all caught up to depth L at once. After
:meth:`DeferredDecoder.settle` every cached K/V equals the full model's (up to float rounding of
batched vs single-row matmuls; tests/test_early_exit_kv.py checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.calibration import Calibration
from verispec.reference.certificate import RESIDUAL_KINDS, ResidualKind, margin_admits, residual_admits, top2
from verispec.reference.errors import CalibrationError, ModelError, SamplingError
from verispec.reference.exit_head import GATE_KINDS as GATE_KINDS  # re-exported: the CLI and tests import them here
from verispec.reference.exit_head import GateKind as GateKind
from verispec.reference.exit_head import Lens as Lens
from verispec.reference.exit_head import exit_logits as exit_logits
from verispec.reference.exit_head import fit_lens as fit_lens
from verispec.reference.seams import Cache, TargetModel, law_view, takes_last_only
from verispec.reference.session import DecodeSession, GenerationRequest, GenerationResult
from verispec.reference.tokenizer import Tokenizer

Model = TargetModel  # what early exit needs of a model: the one model seam (reference/seams.py)

F32 = npt.NDArray[np.float32]
DEFAULT_BACKLOG_BOUND = 32


# --- exact KV by deferred catch-up --------------------------------------------------------------


@dataclass
class _Owed:
    """A committed slot whose layers ``depth..L-1`` are not computed yet."""

    slot: int
    position: int
    depth: int  # layers 0..depth-1 are in the cache
    hidden: F32  # [D] the hidden state at ``depth`` (input of layer ``depth``)


ExitPolicy = Callable[[int, F32], bool]
"""policy(depth, hidden [1, D]) -> exit here? Called at each candidate depth in order."""


@dataclass
class DecoderCounters:
    layer_calls: int = 0  # forward_layers calls (one per segment and contiguous run)
    catchup_rows: int = 0  # owed (row, layer) pairs computed
    forced_catchups: int = 0  # times the backlog bound forced a full catch-up


class DeferredDecoder:
    """One-token decode steps through a model with early exits and exact, deferred KV.

    ``candidate_depths``: the depths (1..L-1) at which :meth:`step` asks its policy whether to exit.
    """

    def __init__(
        self,
        model: Model,
        cache: Cache,
        candidate_depths: Sequence[int],
        backlog_bound: int = DEFAULT_BACKLOG_BOUND,
    ) -> None:
        n_layer = model.config.n_layer
        depths = tuple(sorted(set(int(k) for k in candidate_depths)))
        if any(not 1 <= k < n_layer for k in depths):
            raise ModelError(f"candidate exit depths {list(depths)} must be in 1..{n_layer - 1}")
        if backlog_bound < 1:
            raise ModelError(f"backlog bound {backlog_bound} must be >= 1")
        self.model = model
        self.cache = cache
        self.candidate_depths = depths
        self.backlog_bound = backlog_bound
        self.backlog: list[_Owed] = []  # sorted by slot
        self.counters = DecoderCounters()

    def prefill(self, tokens: Sequence[int]) -> F32:
        """Run a span through every layer (no exits; settles any backlog first) -> the last row's
        logits ``[1, V]``, the only row decoding reads. On an engine whose ``forward`` takes
        ``last_only`` the head runs on that row alone (a 262,144-row head on every prompt row
        would cost the prompt's length in head passes), as plain decoding's prompt pass does."""
        self.settle()
        if takes_last_only(self.model):
            forward: Any = self.model.forward  # the engine's forward (TargetModel does not name last_only)
            logits: F32 = forward(tokens, self.cache, last_only=True).logits
            return logits
        return self.model.forward(tokens, self.cache).logits[-1:]

    def step(self, token: int, policy: ExitPolicy) -> tuple[int, F32]:
        """Decode one token: (depth reached, hidden state ``[1, D]`` at that depth).

        Depth L means the token ran every layer (its logits are ``model.head(hidden)``); a smaller
        depth is where the policy said exit, and the token's remaining layers are now owed.
        """
        n_layer = self.model.config.n_layer
        slot = self.cache.reserve(1)
        position = slot  # as Model.forward: positions default to cache.length + arange(T)
        x = self.model.embed([token])  # [1, D]
        depth = 0
        while depth < n_layer:
            if depth in self.candidate_depths and policy(depth, x):
                break
            stop = self._next_boundary(depth, with_candidates=True)
            out = self._run_segment(depth, stop, (slot, position, x))
            assert out is not None
            x, depth = out, stop
        self.cache.advance(1)
        if depth < n_layer:
            self.backlog.append(_Owed(slot, position, depth, x[0].copy()))
            if len(self.backlog) >= self.backlog_bound:
                self.counters.forced_catchups += 1
                self.settle()
        return depth, x

    def settle(self) -> None:
        """Catch every owed row up to depth L (batched passes); empties the backlog."""
        while self.backlog:
            first = min(o.depth for o in self.backlog)
            self._run_segment(first, self._next_boundary(first, with_candidates=False), None)

    @property
    def owed_layers(self) -> int:
        """Number of (slot, layer) pairs not yet in the cache."""
        return sum(self.model.config.n_layer - o.depth for o in self.backlog)

    # -- one segment of layers for the owed rows at its first depth plus (optionally) the current token --

    def _next_boundary(self, depth: int, *, with_candidates: bool) -> int:
        """The next depth after ``depth`` where the set of rows to run changes: an owed row joins,
        or (for the current token) a candidate exit depth; at most L."""
        later = [o.depth for o in self.backlog if o.depth > depth]
        if with_candidates:
            later += [k for k in self.candidate_depths if k > depth]
        return min(later + [self.model.config.n_layer])

    def _run_segment(self, first: int, stop: int, current: tuple[int, int, F32] | None) -> F32 | None:
        """Run layers ``first..stop-1`` for the owed rows at depth ``first`` and the current token.

        Invariant on entry: every owed row has depth >= ``first``, and none has a depth strictly
        between ``first`` and ``stop`` (``stop`` is the next boundary), so the rows at exactly
        ``first`` are the ones that need these layers. Each contiguous run of slots is one
        :meth:`forward_layers` call through the whole segment, runs in slot order: a later slot
        only attends to earlier slots, whose K/V for these layers are then already written.
        """
        rows = [o for o in self.backlog if o.depth == first]
        slots = [o.slot for o in rows]
        positions = [o.position for o in rows]
        hidden = [o.hidden[None, :] for o in rows]
        if current is not None:
            slots.append(current[0])
            positions.append(current[1])
            hidden.append(current[2])
        if not slots:
            return None
        x = np.concatenate(hidden, axis=0)  # [R, D]
        out = np.empty_like(x)
        begin = 0
        for end in _run_ends(slots):  # contiguous runs of slots, in slot order
            out[begin:end] = self.model.forward_layers(
                x[begin:end], self.cache, first, stop - 1, positions[begin:end], start=slots[begin]
            )
            self.counters.layer_calls += 1
            begin = end
        for i, o in enumerate(rows):
            o.hidden = out[i].copy()
            o.depth = stop
        self.counters.catchup_rows += len(rows) * (stop - first)
        self.backlog = [o for o in self.backlog if o.depth < self.model.config.n_layer]
        return out[len(rows) :] if current is not None else None


def _run_ends(slots: Sequence[int]) -> list[int]:
    """End indices (exclusive) of the maximal runs of consecutive slot numbers in ``slots``."""
    ends = [i for i in range(1, len(slots)) if slots[i] != slots[i - 1] + 1]
    return ends + [len(slots)]


# --- serve statistics ---------------------------------------------------------------------------


@dataclass
class ExitStats:
    """What early exit did over one generation (depth L = the full model)."""

    n_layer: int
    depths: list[int] = field(default_factory=list)  # per generated token: its depth
    head_evaluations: int = 0  # exit-head (lm_head) calls
    flips: int | None = None  # with audit: served != full argmax
    audited: int = 0  # tokens audited
    catchup_rows: int = 0
    forced_catchups: int = 0

    @property
    def mean_exit_depth(self) -> float:
        return float(np.mean(self.depths)) if self.depths else 0.0

    def histogram(self) -> dict[str, int]:
        """Exit counts by depth ("full" for depth L), in depth order."""
        out: dict[str, int] = {}
        for d in sorted(set(self.depths)):
            out["full" if d == self.n_layer else str(d)] = self.depths.count(d)
        return out

    def as_dict(self) -> dict[str, object]:
        n = len(self.depths)
        return {
            "mean_exit_depth": self.mean_exit_depth,
            "n_layer": self.n_layer,
            "layer_fraction": self.mean_exit_depth / self.n_layer if n else 0.0,
            "exit_histogram": self.histogram(),
            "exited": sum(1 for d in self.depths if d < self.n_layer),
            "head_evaluations": self.head_evaluations,
            "catchup_rows": self.catchup_rows,
            "forced_catchups": self.forced_catchups,
            "audited": self.audited,
            "flips": self.flips,
        }


# --- gates ----------------------------------------------------------------------------------------


def gate_admits(calibration: Calibration, gate: GateKind, depth: int, logits: F32) -> tuple[bool, int]:
    """(admit?, exit top-1 id) for one exit-logits row ``[V]`` (or ``[1, V]``) float32 at ``depth``.

    ``margin``: margin > lambda (:func:`reference.certificate.margin_admits`); ``supnorm`` /
    ``halfrange``: fl(2 fl(Q + slack)) < margin in float32
    (:func:`reference.certificate.residual_admits`, Q the conformal quantile at q').
    """
    row = np.asarray(logits, dtype=np.float32).reshape(-1)
    token, margin = top2(row)
    at = calibration.at(depth)
    if gate == "margin":
        return margin_admits(margin, at.margin_threshold), token
    if gate in RESIDUAL_KINDS:
        kind: ResidualKind = "supnorm" if gate == "supnorm" else "halfrange"
        return residual_admits(kind, margin, at.quantile(kind)), token
    raise CalibrationError(f"unknown gate {gate!r}; expected one of {GATE_KINDS}")


def exit_depths(calibration: Calibration, gate: GateKind) -> tuple[int, ...]:
    """The candidate depths whose threshold in force can admit under ``gate``: a +inf (or NaN)
    threshold never admits (``margin > +inf`` is false; ``fl(2 fl(+inf + slack)) < margin`` is
    false), so the serve loop neither evaluates the exit head there nor stops its pass there (a
    refused kind, :attr:`Calibration.refusal`, serves at plain speed). The tokens served are the
    same as with every candidate depth asked. CalibrationError for an unknown gate."""
    if gate not in GATE_KINDS:
        raise CalibrationError(f"unknown gate {gate!r}; expected one of {GATE_KINDS}")
    kind: ResidualKind = "supnorm" if gate == "supnorm" else "halfrange"
    threshold = {d.depth: d.margin_threshold if gate == "margin" else d.quantile(kind) for d in calibration.depths}
    return tuple(depth for depth, t in threshold.items() if t < float("inf"))


# --- serve: greedy decoding with certified early exit ---------------------------------------------


def generate_early_exit(
    model: Model,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    calibration: Calibration,
    *,
    gate: GateKind | None = None,
    audit: bool = False,
    on_text: Callable[[str], None] | None = None,
    backlog_bound: int = DEFAULT_BACKLOG_BOUND,
    kind: str | None = None,
) -> tuple[GenerationResult, ExitStats]:
    """Greedy decoding where each token exits at the first candidate depth whose gate admits it.

    Same stopping rules and stats as :func:`reference.generate.generate`. Early exit certifies the
    full model's argmax, so it serves greedy decoding only: temperature must be 0 and
    repeat_penalty 1 (SamplingError otherwise). ``gate`` defaults to the artifact's. With
    ``audit`` every token also runs every layer (so nothing is owed) and ``ExitStats.flips``
    counts served tokens that differ from the full model's argmax; the served tokens are the
    same as without audit. Depths whose threshold never admits are not asked (:func:`exit_depths`).
    ``kind``: the prompt's kind (:func:`reference.prompt_kind.prompt_kind`
    of the prompt text, or declared), whose thresholds and guarantee apply; None uses the pooled
    calibration (a guarantee for prompts exchangeable with the whole calibration mix).
    """
    calibration.check_fits(model.config.n_layer, model.config.n_embd)
    if kind is not None:
        calibration = calibration.for_kind(kind)
    params = request.params
    params.validate(model.config.n_vocab)
    if params.temperature != 0 or params.repeat_penalty != 1.0 or params.logit_bias:
        raise SamplingError(
            f"early exit certifies greedy decoding only: temperature {params.temperature!r} must be 0, "
            f"repeat_penalty {params.repeat_penalty!r} 1 and no logit bias"
        )
    model = law_view(model, params, exit_head=True)  # a sparse head's exit and full heads (engine.sparse_head)
    session = DecodeSession(model.config, tokenizer, request, on_text=on_text)
    use_gate: GateKind = calibration.gate if gate is None else gate
    n_layer = model.config.n_layer
    stats = ExitStats(n_layer=n_layer, flips=0 if audit else None)

    session.begin()
    if not session.done:
        cache = model.new_cache(len(session.prompt) + request.max_tokens)
        decoder = DeferredDecoder(model, cache, exit_depths(calibration, use_gate), backlog_bound)
        token = int(np.argmax(decoder.prefill(session.prompt)[-1]))
        session.target_passes = 1
        stats.depths.append(n_layer)
        while not session.commit(token):
            token = _next_token(decoder, token, calibration, use_gate, audit, stats)
            session.target_passes += 1
        stats.catchup_rows = decoder.counters.catchup_rows
        stats.forced_catchups = decoder.counters.forced_catchups
    result = session.finish()
    stats.depths = stats.depths[: len(result.ids)]
    return result, stats


def _next_token(
    decoder: DeferredDecoder, token: int, calibration: Calibration, gate: GateKind, audit: bool, stats: ExitStats
) -> int:
    """Run one token through the decoder; the next token (exit's top-1 or full argmax)."""
    model = decoder.model
    exit_token: list[tuple[int, int]] = []  # (depth, token) of the first admitted exit

    def policy(depth: int, hidden: F32) -> bool:
        if exit_token:  # audit: already exited, keep running to full depth
            return False
        stats.head_evaluations += 1
        admitted, top1 = gate_admits(calibration, gate, depth, exit_logits(model, depth, hidden, calibration.lens))
        if admitted:
            exit_token.append((depth, top1))
            return not audit
        return False

    depth, hidden = decoder.step(token, policy)
    full = int(np.argmax(model.head(hidden)[-1])) if depth == model.config.n_layer else None
    if exit_token:
        served_depth, served = exit_token[0]
        if audit and full is not None:
            stats.audited += 1
            stats.flips = (stats.flips or 0) + int(served != full)
        stats.depths.append(served_depth)
        return served
    assert full is not None
    if audit:
        stats.audited += 1
    stats.depths.append(model.config.n_layer)
    return full
