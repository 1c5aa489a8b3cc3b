"""The bench's two means: the geometric mean of ratios and the token-weighted mean of a rate.

A speedup is a ratio, so a set of them is summarised by its geometric mean (the mean that
treats 2x and 0.5x as cancelling); a non-positive entry (a side that did not run) is left out,
and an empty set gives 0.0 (shown as "not measured"). A rate per token (alpha) pools over runs
weighted by their generated tokens: a mean of the per-run rates would let a 3-token run weigh
as much as a 300-token one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verispec.geomean import geomean as geomean  # the one definition, re-exported for the bench


def ratio_of_sums(runs: Sequence[dict[str, Any]], key: str) -> float:
    """Mean of ``key`` over runs weighted by generated tokens (a pooled rate, not a mean of rates)."""
    weight = sum(r["generated_tokens"] for r in runs)
    return sum(r[key] * r["generated_tokens"] for r in runs) / weight if weight else 0.0
