"""The geometric mean of speed ratios, the one definition every benchmark summary uses.

Speedups are ratios, so their average is geometric: a 2x and a 0.5x run average to 1x, not 1.25x.
A ratio that is not positive (a run that produced no tokens reports 0) has no logarithm; it is left
out rather than dragging the mean to 0 or raising, and an empty list averages to 0.0, the same
"nothing measured" value the runs themselves report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def geomean(values: Sequence[float]) -> float:
    """exp(mean(log v)) over the positive values; 0.0 when there are none."""
    good = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else 0.0
