"""The pipeline seam: how an implementation turns one speculative step's logits into the rows it
verifies (p [k+1, V], q [k, V]), and which verification it runs.

A :class:`RowsRequest` carries one step's inputs; a :class:`Pipeline` answers it. The reference's
answer is :func:`reference.speculative.speculative_rows` (the ONE place p and q are computed);
its wire form (the ``rows`` op of :mod:`spec.external` and the ``rows`` vectors) is
:func:`spec.vectors.wire.rows_request_to_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams
from verispec.reference.speculative import Probs2D, speculative_rows, verification_mode

Mode = Literal["greedy", "sampled"]


@dataclass(frozen=True, eq=False)
class RowsRequest:
    """One speculative step, as a pipeline sees it.

    Row i of p (and of q, for i < k) is the law at the position after ``history + drafts[:i]``.
    The logits are copied into read-only float64 arrays, so a request cannot change under a
    pipeline. Shapes are not checked here: checking them is the pipeline's contract (the
    reference raises :class:`~reference.errors.VerificationError`).
    """

    target_logits: npt.NDArray[np.float64]  # [k+1, V]: raw target logits at each position
    draft_logits: npt.NDArray[np.float64]  # [k, V]: raw draft logits at each drafted position
    history: tuple[int, ...]  # the context before the step
    drafts: tuple[int, ...]  # [k]: the drafted ids
    target_params: SamplingParams
    draft_params: SamplingParams  # the law the draft sampled from (a greedy draft: one-hot q)

    def __post_init__(self) -> None:
        for name in ("target_logits", "draft_logits"):
            array = np.array(getattr(self, name), dtype=np.float64)  # a copy
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        object.__setattr__(self, "history", tuple(int(t) for t in self.history))
        object.__setattr__(self, "drafts", tuple(int(t) for t in self.drafts))


class Pipeline(Protocol):
    """``rows(request) -> (p [k+1, V], q [k, V])``; ``mode(target_params, draft_params)``."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]: ...

    def mode(self, target_params: SamplingParams, draft_params: SamplingParams) -> Mode: ...


class ReferencePipeline:
    """The reference: :func:`reference.speculative.speculative_rows` and ``verification_mode``."""

    def rows(self, request: RowsRequest) -> tuple[Probs2D, Probs2D]:
        r = request
        return speculative_rows(r.target_logits, r.draft_logits, r.history, r.drafts, r.target_params, r.draft_params)

    def mode(self, target_params: SamplingParams, draft_params: SamplingParams) -> Mode:
        return verification_mode(target_params, draft_params)
