"""What a property is: its verdict (:class:`PropertyResult`) on the implementation under test
(:class:`Subject`), and the adapters between a verifier's single and batch forms.

The properties themselves are :mod:`spec.properties` (toy scale) and :mod:`spec.llm_properties`
(LLM scale); both build on this module, so neither imports the other's internals.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerdict, BatchVerifier, Verdict, Verifier
from verispec.spec.pipeline import Pipeline
from verispec.spec.sequential import BudgetEnded
from verispec.spec.statistics import PROPERTY_SEED, TV_BIAS


@dataclass(frozen=True)
class PropertyResult:
    """One property's verdict on one implementation.

    ``n``: cases (deterministic) or draws (statistical); ``alpha``: false-alarm probability
    (0 for deterministic properties); ``power``: worst-case probability of detecting a TV bias of
    ``tv`` (``spec.statistics.TV_BIAS`` unless the test is designed against another deviation, as
    the LLM-scale strata tests are; 1 for deterministic ones); ``detail``: what was seen.
    """

    name: str
    passed: bool
    n: int
    alpha: float
    power: float
    detail: str
    tv: float = TV_BIAS


# -----------------------------------------------------------------------------------------------
# adapters between the single and batch forms


def as_batch(verifier: Verifier, expired: Callable[[], bool] | None = None) -> BatchVerifier:
    """Lift a single-verification verifier to the batch form (a loop; slow for big N). With
    ``expired`` (a budget's): BudgetEnded before any call made once it says so, so a budget is
    honoured within a batch of one-by-one calls."""

    def batch(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> BatchVerdict:
        draft_arr, draws = np.asarray(drafts), np.asarray(uniforms, dtype=np.float64)
        n = draft_arr.shape[0]
        p_arr, q_arr = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        accepted = np.zeros(n, dtype=np.int64)
        token = np.zeros(n, dtype=np.int64)
        bonus = np.zeros(n, dtype=np.bool_)
        for item in range(n):
            if expired is not None and expired():
                raise BudgetEnded(f"the budget ended after {item} of {n} verifications of a batch")
            p_item = p_arr if p_arr.ndim == 2 else p_arr[item]
            q_item = q_arr if q_arr.ndim == 2 else q_arr[item]
            verdict = verifier(p_item, q_item, draft_arr[item].tolist(), draws[item].tolist())
            accepted[item], token[item], bonus[item] = verdict.accepted, verdict.token, verdict.kind == "bonus"
        return BatchVerdict(accepted, token, bonus)

    return batch


def until_expired(batch: BatchVerifier, expired: Callable[[], bool]) -> BatchVerifier:
    """``batch``, with BudgetEnded instead of any call made once ``expired()`` says so."""

    def checked(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> BatchVerdict:
        if expired():
            raise BudgetEnded("the budget ended before a batch call")
        return batch(p, q, drafts, uniforms)

    return checked


def as_verifier(batch: BatchVerifier) -> Verifier:
    """A batch verifier used for one verification (N = 1)."""

    def verifier(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Verdict:
        result = batch(
            np.asarray(p, dtype=np.float64)[None],
            np.asarray(q, dtype=np.float64)[None],
            np.asarray(drafts)[None],
            np.asarray(uniforms, dtype=np.float64)[None],
        )
        kind: Literal["repair", "bonus"] = "bonus" if bool(result.is_bonus[0]) else "repair"
        return Verdict(accepted=int(result.accepted[0]), token=int(result.token[0]), kind=kind)

    return verifier


@dataclass
class Subject:
    """The implementation under test, as the properties see it."""

    verifier: Verifier
    batch: BatchVerifier
    pipeline: Pipeline
    scale: float = 1.0
    seed: int = PROPERTY_SEED
    own_randomness: bool = False  # the verifier ignores the uniforms (law-only: spec/law_only.py)

    def rng(self, name: str) -> np.random.Generator:
        """A fixed generator per property (same draws on every run)."""
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])


Property = Callable[[Subject], PropertyResult]
