"""What a depth test judges: the case (a prompt, its params and law) and the generations an engine
answers it with, read through the one reader of answers (:func:`spec.answers.generation`).

Its own module below :mod:`.law` (the test) and :mod:`.blocks` (the blocks of generations), which
both need these types.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from verispec.reference.sampling import SamplingParams
from verispec.spec import answers
from verispec.spec.decoder.laws import default as default_law
from verispec.spec.decoder.laws.common import Profile


@dataclass(frozen=True)
class DepthCase:
    """One prompt's generations: up to ``max_tokens``, ending early after an id of ``eog``; the
    EOG ids banned while fewer than ``min_tokens`` tokens are out. ``law``: the target law's
    profile (None: the verispec profile of ``params``, ``eog`` and ``min_tokens``); the engine
    receives a non-default profile as ``generate(..., law=profile)``. ``vocab``: the model's
    vocabulary, so an answered id outside it is the engine's failure before any forward sees it
    (None: ids are bounded by the teacher-forced rows' width when scored)."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    max_tokens: int = 64
    eog: frozenset[int] = frozenset()
    min_tokens: int = 0
    law: Profile | None = None
    vocab: int | None = None  # the model's vocabulary: every answered id must lie in [0, vocab)


def case_law(case: DepthCase) -> Profile:
    """The case's target law: its profile, or the verispec profile of its params (min_tokens on EOG)."""
    if case.law is not None:
        return case.law
    return default_law.profile(default_law.Params(case.params, case.eog, case.min_tokens))


def position_params(case: DepthCase, position: int) -> SamplingParams:
    """The params of THE target law at 0-based output ``position`` (min_tokens: EOG banned)."""
    if position >= case.min_tokens or not case.eog:
        return case.params
    bias = dict(case.params.logit_bias or {})
    bias.update({int(e): -math.inf for e in case.eog})
    return replace(case.params, logit_bias=bias)


class GenerationEngine(Protocol):
    """n independent generations after a prompt, speculation on; each a list of ids, or a mapping
    ``{"ids": [...], "cycles": [[drafted, accepted], ...]}`` when the engine reports its cycles."""

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> Sequence[Any]: ...


@dataclass(frozen=True)
class Generation:
    ids: tuple[int, ...]
    cycles: tuple[tuple[int, int], ...] | None = None  # (drafted, accepted) per cycle, when reported
    logprobs: tuple[float, ...] | None = None  # the engine's reported log p_t(x_t), when reported


def as_generation(raw: Any, vocab: int | None = None, where: str = "a generation") -> Generation:
    """A list of ids, or a mapping with ``ids`` and optional ``cycles`` and ``logprobs``, every field
    exactly of its type (:func:`spec.answers.generation`: an id 5.0, "5" or true is refused, not
    converted) and every id in [0, ``vocab``); ExternalError otherwise."""
    if isinstance(raw, Generation):
        raw = {"ids": list(raw.ids), "cycles": raw.cycles, "logprobs": raw.logprobs}
    return Generation(*answers.generation(raw, vocab, where))
