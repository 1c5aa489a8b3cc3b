"""Cut-edge near-ties of the depth test under ``--target-law engine-logits``.

An engine of other numerics (llama.cpp's quantized kernels) computes a prefix's row differently
when the prefix was batched differently: one pass of the whole prefix, the prompt in one pass and
then one token at a time (plain decoding), a verification batch of drafts (speculative decoding)
give rows of the same prefix that differ by up to ~0.8 in logits. With a cut in the law (top-k,
top-p, min-p), a token just inside the cut in the row the generation drew from can be just
outside it in the target row, so "a token of target probability 0 fails outright" would fail a
plain decoder on its own numerics.

Two things answer it. (a) The target rows are computed the way plain decoding feeds them
(:class:`PlainFedRows`: the engine's ``logits(prefix, split_at=len(prompt))``, the prompt in one
pass and then each generated token alone), so a plain decoder's own rows are replayed. (b) A token
impossible under the target row is a NUMERICS NEAR-TIE AT A CUT EDGE, not a law failure, when
raising its logit by at most twice the engine's own batch-shape noise at that prefix (the largest
|logit difference| between the prefix's row fed two ways, :meth:`EngineLogits.batch_shape_noise`)
puts it inside the cut (:func:`cut_edge_margin`): twice, because the token can sit one noise
above its target value and the cut's threshold one noise below its own. Near-ties are counted and
reported with their positions, margins and noise, and left out of the statistics (they have no
target probability); a token that needs more than twice the noise, or that no finite logit
brings in (a ban), still fails outright.

What this cannot detect, plainly: a bug whose only effect is to move mass across a cut edge
within that noise (a top-k off by one whose extra token lies within twice the noise of the k-th
logit looks exactly like a near-tie); the count of near-ties is reported so that a count far
above what the noise explains can be read, but it is not a test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from verispec.spec.decoder.types import Prefix

F64 = npt.NDArray[np.float64]
Law = Callable[[F64, tuple[int, ...], Sequence[int]], Any]  # (logits, prompt, history) -> p [V]
TIE_NOISES = 2.0  # a near-tie needs a margin within twice the engine's own noise
BISECTIONS = 40


@dataclass(frozen=True)
class NearTie:
    """A token impossible under its target row that ``margin`` more logit puts inside the cut,
    ``margin <= 2 noise`` (``noise``: the engine's batch-shape noise at that prefix)."""

    position: int
    token: int
    margin: float
    noise: float

    def describe(self) -> str:
        return (
            f"token {self.token} at position {self.position}: {self.margin:.3g} below the cut, noise {self.noise:.3g}"
        )


def admits(law: Law, logits: F64, prompt: tuple[int, ...], history: Sequence[int], token: int, raise_by: float) -> bool:
    """Whether the law gives ``token`` positive probability once its logit is raised by ``raise_by``."""
    moved = np.array(logits, dtype=np.float64)
    moved[token] += raise_by
    return bool(np.asarray(law(moved, prompt, history))[token] > 0.0)


def cut_edge_margin(
    law: Law, logits: F64, prompt: tuple[int, ...], history: Sequence[int], token: int, limit: float
) -> float | None:
    """The least raise of ``token``'s logit that makes it possible, when it is at most ``limit``
    (bisection to ``limit`` / 2^40; the cuts are monotone in a token's own logit); None beyond."""
    if limit <= 0.0 or not np.isfinite(logits[token]) or not admits(law, logits, prompt, history, token, limit):
        return None
    lo, hi = 0.0, limit
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if admits(law, logits, prompt, history, token, mid) else (mid, hi)
    return hi


class NoiseLogits(Protocol):
    """The engine's own logits (:class:`spec.decoder.check.EngineLogits`)."""

    def plain_fed(self, prefix: Prefix, prompt_length: int) -> Any: ...

    def batch_shape_noise(self, prefix: Prefix, prompt_length: int | None = None) -> float: ...


class PlainFedRows:
    """The depth test's teacher-forced rows from the engine's own logits, fed as plain decoding
    feeds them (the prompt in one pass, then each token alone), with the engine's own noise at a
    prefix for the near-tie rule (module docstring)."""

    def __init__(self, logits: NoiseLogits) -> None:
        self.logits = logits

    def __call__(self, sequence: Prefix, prompt_length: int) -> F64:
        rows = [
            np.asarray(self.logits.plain_fed(sequence[:i], prompt_length), dtype=np.float64)
            for i in range(prompt_length, len(sequence))
        ]
        return np.stack(rows)

    def batch_shape_noise(self, prefix: Prefix, prompt_length: int) -> float:
        return float(self.logits.batch_shape_noise(prefix, prompt_length))
