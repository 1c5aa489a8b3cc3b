"""The first-m test inside check-decoder's default (depth) mode: the cheap look where bugs show first.

A bug in the first cycle (a wrong bonus row, a rollback off by one, the draft's q from the wrong
processors) moves the law of the first few tokens; the first-m test (:mod:`spec.decoder.first_tokens`:
Pearson chi-square on the cell law of the first m <= 3 tokens, power 0.99 against TV 0.2) sees it
from ~1,000 samples of m tokens, where the depth test pools those tokens with every later one and
needs its whole design. So the default mode runs it first, on the same ``generate`` op the depth
test judges (``max_tokens = m``: a generation of m tokens is exactly a sample of the first m, its
end-of-generation and min_tokens included), and the depth test after it.

Alpha. The prompt's false-alarm probability is split (Bonferroni): :data:`FIRST_M_SHARE` of it to
the first-m test, the rest to the depth test, so the prompt fails a lossless decoder with
probability <= their sum whatever either test does. Each test keeps its own stated power at its
own share (the depth design is sized at the smaller alpha; N grows with log(1/alpha) only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verispec.spec.decoder.depth.blocks import checked_block, law_keywords
from verispec.spec.decoder.depth.law import DepthCase
from verispec.spec.decoder.laws.common import Profile

FIRST_M_SHARE = 0.1  # of the prompt's alpha, to the first-m test
FIRST_M_TV = 0.2  # the first-m test's design deviation (check-decoder --depth 0's default)
SEED_OFFSET = -1  # its seed: apart from the depth test's pilot (seed + 1 ..) and blocks (seed + 100 ..)


def split_alpha(alpha: float) -> tuple[float, float]:
    """(the first-m test's alpha, the depth test's): they add up to ``alpha``."""
    first = alpha * FIRST_M_SHARE
    return first, alpha - first


@dataclass(frozen=True)
class FirstTokensOfGenerate:
    """A depth engine's ``generate`` as the first-m test's ``sample``: n generations of at most
    ``m`` tokens (the case's min_tokens and law passed on), their ids."""

    engine: Any
    case: DepthCase

    def sample(
        self, prompt_ids: Sequence[int], params: Any, m: int, n: int, seed: int, law: Profile | None = None
    ) -> list[list[int]]:
        short = DepthCase(tuple(prompt_ids), params, m, self.case.eog, self.case.min_tokens, self.case.law)
        raw = self.engine.generate(tuple(prompt_ids), params, m, n, seed, self.case.min_tokens, **law_keywords(short))
        return [list(g.ids) for g in checked_block(raw, n)]


def first_m_summary(verdict: Any, m: int) -> str:
    """The first-m verdict in one clause: N, alpha, power, TV and its chi-square."""
    return (
        f"m={m}, N={verdict.n}, alpha={verdict.alpha:.2g}, power={verdict.power:.4f} vs TV>={verdict.tv}; "
        f"{verdict.detail}"
    )
