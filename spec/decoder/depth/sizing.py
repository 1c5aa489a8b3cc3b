"""What a depth test (:mod:`spec.decoder.depth.law`) will cost, said up front, and a design sized to a budget.

The pilot (the engine's own generations, drawn apart from the test's) already fixes the design's
N; timed, it also gives the engine's cost per token (decoding, teacher forcing and scoring
together). From the two the test states, before its first block, how many tokens it needs and
how long that should take, and while it runs it reports how far it is.

Budget-led sizing. Given a budget of seconds instead of a deviation, the test spends at most
:data:`PILOT_SHARE` of it on the pilot, then asks what the rest affords: ``A = rest x``
:data:`BUDGET_USE` ``/ seconds-per-token`` tokens (:data:`BUDGET_USE` < 1 leaves room for a
slower stretch of the engine and the looks' own cost). It designs for the SMALLEST total-variation
deviation whose design needs at most ``A`` tokens (power 0.99, the same family and alpha split as
the fixed design: only the TV is chosen), and states that TV. The alpha spending stays valid: the
TV, and so N and the looks, are fixed from the pilot and the clock before the first of the test's
draws, and the test's level holds for any design fixed that way (the pilot's draws are not the
test's). What the budget does not buy: a TV reachable only with more tokens; when even the
largest deviation of the family needs more than ``A`` tokens the test says so and is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

# A progress line and whether it is a milestone (the design, the pilot: always shown) or a tick
# (a block judged: shown at most every so many seconds by the caller).
ProgressSink = Callable[[str, bool], None]

PILOT_SHARE = 0.25  # of a budget, at most, on the pilot
BUDGET_USE = 0.7  # of the rest, planned: the projection's margin (a loaded machine slows by tens of percent)
TV_CEILING = 1.0
TV_FLOOR = 1e-3  # a budget-led design asks for no finer deviation (N ~ 1 / (f tv)^2 grows past any budget)
SEARCH_STEPS = 8  # designs the TV search may run on the subsample (it stops sooner when SEARCH_RATIO is reached)
INTERIOR_TV = 0.05  # the design timed for the search's cost (the default TV: a full tempering search per row)
SEARCH_RATIO = 1.03  # the TV found is within this factor of the smallest affordable one
SEARCH_ROWS = 64  # pilot rows the search designs on (a uniform subsample: a design costs ~5 ms a row)
CORRECTIONS = 3  # re-designs on all pilot rows when the subsample's TV needs more tokens there


def smallest_tv(tokens_at: Callable[[float], float], affordable: float) -> float | None:
    """The smallest TV in [TV_FLOOR, 1] (within a factor :data:`SEARCH_RATIO`) whose design needs at
    most ``affordable`` tokens; None when even TV 1 needs more. ``tokens_at`` falls as TV grows (a
    larger deviation is seen sooner), about as 1 / TV^2, so a search in log TV against log tokens
    (secant steps kept inside the bracket, halving when they stall) finds it in a few designs."""
    top = tokens_at(TV_CEILING)
    if top > affordable:
        return None
    hi, y_hi = TV_CEILING, top  # tokens_at(hi) <= affordable
    lo, y_lo = TV_FLOOR, math.inf  # tokens_at(lo) > affordable, or lo == TV_FLOOR unevaluated
    target = math.log(affordable)
    for _ in range(SEARCH_STEPS):
        if hi / lo <= SEARCH_RATIO:
            break
        if math.isfinite(y_lo) and y_lo > y_hi:  # the secant through the bracket's ends, in log-log
            slope = (math.log(y_hi) - math.log(y_lo)) / (math.log(hi) - math.log(lo))
        else:
            slope = -2.0  # the scaling, until a second point gives the slope
        guess = math.log(hi) + (target - math.log(max(y_hi, 1.0))) / min(slope, -0.25)
        inside = min(max(guess, math.log(lo) + 0.1 * math.log(hi / lo)), math.log(hi) - 0.1 * math.log(hi / lo))
        tv = math.exp(inside)
        y = tokens_at(tv)
        if y <= affordable:
            hi, y_hi = tv, y
        else:
            lo, y_lo = tv, y
    if hi / lo > SEARCH_RATIO and not math.isfinite(y_lo) and tokens_at(TV_FLOOR) <= affordable:
        return TV_FLOOR
    return stated_tv(hi)


def stated_tv(tv: float) -> float:
    """``tv`` rounded UP to three significant digits (the TV a verdict states is the one designed)."""
    if tv >= TV_CEILING:
        return TV_CEILING
    scale = 10.0 ** (math.floor(math.log10(tv)) - 2)
    return min(TV_CEILING, math.ceil(tv / scale - 1e-9) * scale)


def search_rows(rows: Sequence[F64], rng: np.random.Generator) -> list[F64]:
    """A uniform subsample of :data:`SEARCH_ROWS` pilot rows for the search (all when fewer)."""
    if len(rows) <= SEARCH_ROWS:
        return list(rows)
    return [rows[int(i)] for i in np.sort(rng.choice(len(rows), SEARCH_ROWS, replace=False))]


def corrected_tv(tv: float, tokens: float, affordable: float) -> float:
    """The next TV to try when the design on all rows needs ``tokens`` > ``affordable`` at ``tv``:
    N grows about as 1 / tv^2 (both tests' n: module docstring of spec/decoder/depth/power.py)."""
    return stated_tv(min(TV_CEILING, tv * math.sqrt(tokens / affordable) * 1.01))


def duration(seconds: float) -> str:
    """A duration for people: 12 s, 6.5 min, 42 h, 3.1 days."""
    if not math.isfinite(seconds):
        return "unbounded"
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def per_token(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"
