"""Law-only checking: verifiers that draw their own randomness (``verispec check --law-only``).

Every speculative decoder in use (transformers' assisted generation, vLLM's rejection sampler,
llama.cpp) draws its own random numbers, so it cannot replay the protocol's uniforms. What can
still be checked is its LAW: given rows p, q and drafts, the distribution of its verdicts. Law-only
runs

- ``contract`` (less the uniforms' part, which such a verifier never sees),
- ``range_and_mass`` (every verdict in range, every token with positive mass in its law),
- every statistical test ``stat_*`` (the verifier's draws against exact laws, powered),

and reports the rest as not applicable: vector replay, ``protocol_boundaries``, ``protocol_cells``,
``exact_lossless`` and ``pipeline_processors`` evaluate the verdict AT given uniforms, and
``batch_matches_sequential`` needs a deterministic function of them.

What a pass shows: the verifier's verdict law equals the lossless one up to a total-variation
deviation the tests detect with the reported power ("lossless at power P against deviation D",
on the suite's test rows). What it does not show: bit-exact agreement with the protocol, so the
result is "not portable": another implementation given the same seed gives other tokens.

The interface (Python, ``--verifier MOD:FN --law-only``):

- ``verifier(p, q, drafts) -> verdict``: p [k+1, V], q [k, V], drafts list[int] (k);
- ``batch_verifier(p, q, drafts) -> BatchVerdict`` (optional): p [k+1, V] or [N, k+1, V],
  q [k, V] or [N, k, V], drafts int64 [N, k]; N verdicts from one call.

On the wire (:mod:`spec.external`) it is the op ``sampled_law``: input ``p``, ``q`` (shared),
``drafts`` [N][k]; output ``accepted`` [N], ``token`` [N], ``kind`` [N].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerdict, BatchVerifier, Verdict, Verifier
from verispec.spec.properties import PROPERTY_NAMES, STATISTICAL

DETERMINISTIC_LAW_PROPERTIES: tuple[str, ...] = ("contract", "range_and_mass")
LAW_PROPERTIES: tuple[str, ...] = DETERMINISTIC_LAW_PROPERTIES + tuple(n for n in PROPERTY_NAMES if n in STATISTICAL)
NOT_APPLICABLE_REASON = "not applicable: the verifier draws its own randomness (verdicts at given uniforms cannot be checked)"


class LawVerifier(Protocol):
    """``(p [k+1, V], q [k, V], drafts [k]) -> verdict`` with the verifier's own randomness."""

    def __call__(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int]) -> Any: ...


class LawBatchVerifier(Protocol):
    """``(p, q, drafts [N, k]) -> BatchVerdict``: N verdicts, the verifier's own randomness."""

    def __call__(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike) -> Any: ...


def applicable(name: str) -> bool:
    """Whether a property of ``verispec check`` applies to a verifier with its own randomness."""
    return name in LAW_PROPERTIES


def ignoring_uniforms(verifier: LawVerifier) -> Any:
    """The law verifier in the four-argument form the properties call (uniforms dropped)."""

    def call(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Any:
        return verifier(p, q, drafts)

    return call


def batch_ignoring_uniforms(batch: LawBatchVerifier) -> Any:
    """The law batch verifier in the four-argument batch form (uniforms dropped)."""

    def call(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> Any:
        return batch(p, q, drafts)

    return call


def with_own_randomness(batch: BatchVerifier, seed: int) -> LawBatchVerifier:
    """A uniform-consuming batch verifier turned into one that draws its own uniforms.

    This is how a verifier with its own RNG looks to the checker; used to test law-only with the
    reference (must pass) and the mutants of :mod:`spec.mutants` (the law breakers must fail).
    """
    rng = np.random.default_rng(seed)

    def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike) -> BatchVerdict:
        draft_arr = np.asarray(drafts)
        n, k = draft_arr.shape
        return batch(p, q, draft_arr, rng.random((n, k + 1)))

    return verify


def single_with_own_randomness(verifier: Verifier, seed: int) -> LawVerifier:
    """The single form of :func:`with_own_randomness`."""
    rng = np.random.default_rng(seed)

    def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int]) -> Verdict:
        return verifier(p, q, list(drafts), rng.random(len(drafts) + 1).tolist())

    return verify
