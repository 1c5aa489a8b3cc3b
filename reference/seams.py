"""The seams: what a decode loop may ask of a model, its KV cache, a draft source and a verifier.

Every loop (plain decoding, speculative decoding, early exit, calibration) and both engines are
typed against these protocols, and nothing else restates them:

    TargetModel   a forward pass over a KV cache, plus the pieces an exit head or a layer-skip draft
                  needs (``forward_layers``, ``embed``, ``head``). :class:`reference.model.Model`
                  and :class:`engine.model.FastModel` satisfy it.
    Cache         a KV cache: ``length`` committed slots, ``reserve`` / ``advance`` to write and
                  commit a span, ``truncate`` to roll back in O(1) (:class:`reference.kvcache.KVCache`).
    DraftSource   who proposes draft tokens and their exact laws (:class:`Proposal`), and scores
                  them with the target (:mod:`reference.drafts` implements it).
    Verifier      ``(p, q, drafts, uniforms) -> Verdict`` under the random-draw protocol
                  (spec/protocol.md) (and :class:`BatchVerifier`, N at once).
    LawFn         THE target law (:func:`reference.sampling.target_distribution`) or a bit-identical
                  implementation of it (the fast engine's; a memo of it in the tests).
    DrawFn        THE draw (:func:`reference.sampling.sample`: one ``rng.random()``, the inverse CDF)
                  or a bit-identical implementation of it (the fast engine's).

This module imports no loop, no model and no engine, so every one of them can import it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

LawFn = Callable[[F32, Sequence[int], SamplingParams], F64]
"""``law(logits [V], history, params) -> probs [V]``: THE target law or a bit-identical one."""
DrawFn = Callable[[F64, np.random.Generator], int]
"""``draw(probs [V], rng) -> id``: :func:`reference.sampling.sample` or a bit-identical draw."""


# -- the model and its cache ---------------------------------------------------------------------


class ModelConfig(Protocol):
    """The configuration numbers a loop reads (:class:`reference.config.Config` has them)."""

    @property
    def n_layer(self) -> int: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def context_length(self) -> int: ...


class Cache(Protocol):
    """A KV cache: ``length`` committed slots; spans are written from ``reserve``'s slot and
    committed by ``advance``; ``truncate`` rolls back in O(1)."""

    @property
    def length(self) -> int: ...
    def reserve(self, n_tokens: int, start: int | None = None) -> int: ...
    def advance(self, n_tokens: int) -> None: ...
    def truncate(self, length: int) -> None: ...


class ForwardOutput(Protocol):
    @property
    def logits(self) -> F32: ...  # [T, V]
    @property
    def hidden(self) -> F32 | None: ...  # [n_layer + 1, T, n_embd] when asked for, else None


class TargetModel(Protocol):
    """What the decode loops, the drafts, early exit and calibration need of a model.

    Caches are typed ``Any`` in the methods because each engine has its own cache class (a
    :class:`Cache`); a model is only ever given caches it made with ``new_cache``.
    """

    @property
    def config(self) -> ModelConfig: ...

    def new_cache(self, capacity: int | None = None) -> Any:
        """An empty :class:`Cache` for ``capacity`` positions (default: the context length)."""
        ...

    def forward(
        self, tokens: Sequence[int], cache: Any, *, positions: Sequence[int] | None = None, return_hidden: bool = False
    ) -> ForwardOutput:
        """Run a span through every layer, APPEND it to the cache, logits ``[T, V]``."""
        ...

    def forward_layers(
        self,
        hidden: F32,
        cache: Any,
        first_layer: int,
        last_layer: int,
        positions: Sequence[int],
        *,
        start: int | None = None,
    ) -> F32:
        """Layers first..last on hidden ``[T, D]``; K,V to slots from ``start``; not committed."""
        ...

    def head(self, hidden: F32) -> F32:
        """Final norm + lm_head (+ softcap): the exit head at any layer -> logits ``[T, V]``."""
        ...

    def embed(self, tokens: Sequence[int]) -> F32:
        """Token embeddings ``[T, D]``."""
        ...


def law_view(model: TargetModel, params: SamplingParams, *, exit_head: bool = False) -> TargetModel:
    """The target a loop under the law ``params`` runs: ``model.for_law(params)`` where the model
    has one (the fast engine's sparse head: passes whose logits are decision rows, the same
    probabilities under that law bit for bit; engine.sparse_head), else ``model`` itself.

    Only a model whose own class defines ``for_law``: a wrapper that hands attribute reads to an
    inner model (the lockstep scheduler's proxy, a test's or a mutant's rewiring of the batched
    pass) must stay the model the loop calls, so it keeps the full head rather than losing itself."""
    for_law: Any = getattr(type(model), "for_law", None)
    if not callable(for_law):
        return model
    view: TargetModel = for_law(model, params, exit_head=exit_head)
    return view


def takes_last_only(target: Any) -> bool:
    """Whether ``target.forward`` accepts ``last_only`` (the head on the last row alone: the fast
    engine and its lockstep proxy; the reference computes every row)."""
    forward = getattr(target, "forward", None)
    if not callable(forward):
        return False
    try:
        return "last_only" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


# -- draft sources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """Up to k draft tokens and the law each was drawn from.

    ``q`` is ``[len(tokens), V]`` float64, row i the exact law ``tokens[i]`` was drawn from; None
    means one-hot rows (a deterministic draft: ngram, or any draft under a greedy target).
    """

    tokens: tuple[int, ...]
    q: F64 | None = None


@dataclass
class DraftContext:
    """What a draft source is bound to for one request (set by :meth:`DraftSource.start`)."""

    target: TargetModel
    cache: Cache  # the target's KV cache (layerskip drafts write into it)
    params: SamplingParams  # the target's sampling params
    rng: np.random.Generator  # the request's generator (draft draws come from it too)
    p_min: float
    law: LawFn


class DraftSource(Protocol):
    """A draft source. The decode loop calls ``start`` once, then per cycle ``propose`` and
    ``score``; ``draft_passes`` counts the draft's forward passes, ``draft_time_s`` their time."""

    @property
    def name(self) -> str: ...
    @property
    def draft_passes(self) -> int: ...
    @property
    def draft_time_s(self) -> float: ...

    def start(self, context: DraftContext) -> None:
        """Bind to a request (fresh state: caches emptied)."""
        ...

    def propose(self, history: Sequence[int], k: int) -> Proposal:
        """Up to ``k`` tokens (k >= 1) to follow ``history`` (prompt + committed output)."""
        ...

    def score(self, pending: Sequence[int], drafts: Sequence[int]) -> F32:
        """Target logits ``[len(drafts) + 1, V]`` at the position of each draft and after the last.

        ``pending`` are the committed tokens not yet in the target cache (at least the last one);
        afterwards the target cache holds ``pending + drafts`` (the loop truncates it).
        """
        ...


# -- verifiers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification: ``accepted`` drafts kept, then one ``token`` emitted.

    ``kind`` is ``"bonus"`` when all k drafts were accepted (token drawn from p[k]) and
    ``"repair"`` otherwise (token drawn from the residual at the first rejected position).
    """

    accepted: int
    token: int
    kind: Literal["repair", "bonus"]

    def emitted(self, drafts: Sequence[int]) -> list[int]:
        """The tokens this verdict commits: ``drafts[:accepted] + [token]``."""
        return [int(x) for x in drafts[: self.accepted]] + [self.token]


class BatchVerdict(NamedTuple):
    """N verdicts at once: ``accepted`` [N], ``token`` [N] (int64), ``is_bonus`` [N] (bool)."""

    accepted: npt.NDArray[np.int64]
    token: npt.NDArray[np.int64]
    is_bonus: npt.NDArray[np.bool_]


class Verifier(Protocol):
    """A sampled verifier: ``(p [k+1, V], q [k, V], drafts [k], uniforms [k+1]) -> Verdict``.

    It must follow the random-draw protocol (spec/protocol.md) and raise
    :class:`~reference.errors.VerificationError` on a contract violation. The reference is
    :func:`reference.speculative.verify_sampled`; ``spec.mutants`` holds broken ones; external
    implementations are wrapped to this signature.
    """

    def __call__(self, p: ArrayLike, q: ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict: ...


class BatchVerifier(Protocol):
    """N independent verifications: ``(p, q, drafts [N, k], uniforms [N, k+1]) -> BatchVerdict``.

    ``p`` is [N, k+1, V] or a shared [k+1, V]; ``q`` is [N, k, V] or a shared [k, V]. Item n must
    equal the :class:`Verifier` on item n (same protocol, same uniforms).
    """

    def __call__(self, p: ArrayLike, q: ArrayLike, drafts: ArrayLike, uniforms: ArrayLike) -> BatchVerdict: ...
