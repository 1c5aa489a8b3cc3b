"""Cost-model control: how many of the proposed tokens to verify this cycle, or none at all.

A verification pass over r rows costs c(r) plain passes (c(1) = 1; measured online from the draft's
own score() calls, since every target pass of the decode loop goes through it). If the draft
estimates that its i-th token is accepted, given the ones before it were, with probability a_i,
then verifying the first k tokens commits in expectation

    E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k       tokens (the +1: the bonus or repair token)

in c(k + 1) plain-pass times. The controller picks the k (0..n) maximizing E(k) / c(k + 1);
k = 0 is a plain step (E = 1, c = 1), so a cycle speculates only when it is predicted to pay.

The a_i come from the draft (for suffix drafts: how often the proposed continuation followed the
matched context, smoothed toward 0 for rarely seen contexts) times a calibration factor per
evidence bucket (for suffix drafts: the matched context's length): the decaying ratio of accepted
to predicted-accepted tokens there (clipped), so an over- or under-confident estimate is corrected
by what verification actually accepted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Protocol

PRIOR_ROW_COST = 0.3  # extra plain-pass cost per extra row before any measurement
EWMA = 0.2  # weight of a new calibration observation
COST_WINDOW = 8  # recent timings per pass size whose median is that size's cost
CALIBRATION_BOUNDS = (0.25, 2.0)
MAX_ACCEPT = 0.99  # an estimate never claims certainty


class CostCurve(Protocol):
    """c(r) >= 1: the cost of a verification pass over r rows relative to one row."""

    def relative(self, rows: int) -> float: ...


class MeasuredCurve:
    """A cost curve measured up front (engine/verify_cost.py: rows -> c(rows)); a row count it
    does not hold costs infinity, so it is never chosen."""

    def __init__(self, curve: Mapping[int, float]) -> None:
        self.curve = dict(curve)

    def relative(self, rows: int) -> float:
        return 1.0 if rows <= 1 else self.curve.get(rows, float("inf"))


class VerifyCost:
    """c(r): the measured cost of a verification pass over r rows, relative to one row.

    Robust to a shared, noisy machine: each size keeps the median of its last COST_WINDOW timings
    (one slow pass, another process's burst, does not steer the next cycles), and the curve is
    made monotone before use: a pass over fewer rows does the same work on a subset of the rows,
    so c(r) is taken as the least measured time at any size >= r (a noisy high reading at a small
    size cannot make larger trees look cheaper than smaller ones).
    """

    def __init__(self, prior_row_cost: float = PRIOR_ROW_COST) -> None:
        self.prior_row_cost = prior_row_cost
        self.seconds: dict[int, float] = {}  # rows -> median of the recent timings
        self._recent: dict[int, deque[float]] = {}

    def observe(self, rows: int, seconds: float) -> None:
        if rows < 1 or seconds <= 0:
            return
        recent = self._recent.setdefault(rows, deque(maxlen=COST_WINDOW))
        recent.append(seconds)
        self.seconds[rows] = float(median(recent))

    def _monotone(self) -> dict[int, float]:
        """The measured times with each replaced by the least time at any size >= it."""
        out: dict[int, float] = {}
        least = float("inf")
        for r in sorted(self.seconds, reverse=True):
            least = min(least, self.seconds[r])
            out[r] = least
        return out

    def relative(self, rows: int) -> float:
        """c(rows) >= 1: from measurements when both 1 and ``rows`` (or rows around it) were seen,
        else the prior 1 + prior_row_cost * (rows - 1)."""
        prior = 1.0 + self.prior_row_cost * (rows - 1)
        if 1 not in self.seconds or rows <= 1:
            return 1.0 if rows <= 1 else prior
        times = self._monotone()
        one = times[1]
        if rows in times:
            return max(1.0, times[rows] / one)
        below = [r for r in times if r < rows]
        above = [r for r in times if r > rows]
        if below and above:  # linear interpolation between the nearest measured sizes
            lo, hi = max(below), min(above)
            frac = (rows - lo) / (hi - lo)
            return max(1.0, ((1 - frac) * times[lo] + frac * times[hi]) / one)
        # past the largest measured size: extend the measured chord from 1 row to it (the prior
        # slope when only 1 row is measured). Never trying a size it has not measured would
        # otherwise freeze the pass size at whatever the prior allowed; the chord of a concave
        # (sublinear) curve over-estimates beyond it, so this errs toward smaller passes.
        lo = max(below)
        slope = (times[lo] / one - 1.0) / (lo - 1) if lo > 1 else self.prior_row_cost
        return max(1.0, times[lo] / one + max(slope, 0.0) * (rows - lo))


def best_k(accept: Sequence[float], cost: CostCurve) -> int:
    """The k in 0..len(accept) maximizing E(k) / c(k + 1) (the smallest k on ties)."""
    best, best_rate = 0, 1.0  # k = 0: one token per plain pass
    expected, reach = 1.0, 1.0
    for k, a in enumerate(accept, start=1):
        reach *= min(max(a, 0.0), MAX_ACCEPT)
        expected += reach
        rate = expected / cost.relative(k + 1)
        if rate > best_rate:
            best, best_rate = k, rate
    return best


def best_size(reach: Sequence[float], cost: CostCurve) -> int:
    """The n in 0..len(reach) maximizing E(n) / c(n + 1), E(n) = 1 + reach[0] + ... + reach[n-1]
    (the smallest n on ties).

    For a token TREE whose nodes are listed best-first (``reach[i]`` = the estimated probability
    that node i is accepted: the product of its path's acceptance estimates, nonincreasing along
    the list, so every prefix of it is a subtree), E(n) is the expected number of tokens a pass
    over the first n nodes commits: by linearity, the accepted path's length is the number of
    accepted nodes, plus the bonus or repair token. A chain's reach is a_1, a_1 a_2, ... and this
    is :func:`best_k`.
    """
    best, best_rate = 0, 1.0  # n = 0: one token per plain pass
    expected = 1.0
    for n, r in enumerate(reach, start=1):
        expected += min(max(r, 0.0), MAX_ACCEPT)
        rate = expected / cost.relative(n + 1)
        if rate > best_rate:
            best, best_rate = n, rate
    return best


class Calibration:
    """Per-bucket correction of acceptance estimates: (accepted + 1) / (predicted + 1) over the
    draft tokens verification reached, with a bucket per evidence level (for suffix drafts: the
    length of the matched context, capped), clipped to ``bounds`` (default CALIBRATION_BOUNDS)."""

    def __init__(self, bounds: tuple[float, float] = CALIBRATION_BOUNDS) -> None:
        self.bounds = bounds  # (least, largest) factor
        self.predicted: dict[int, float] = {}
        self.accepted: dict[int, float] = {}

    def factor(self, bucket: int) -> float:
        ratio = (self.accepted.get(bucket, 0.0) + 1.0) / (self.predicted.get(bucket, 0.0) + 1.0)
        return min(max(ratio, self.bounds[0]), self.bounds[1])

    def observe(self, estimates: Sequence[float], buckets: Sequence[int], accepted: int) -> None:
        """A verified proposal: tokens 0..accepted-1 were accepted, token ``accepted`` (if any) was
        rejected, later ones were never reached. Older evidence decays (weight 1 - EWMA per cycle)."""
        for b in set(self.predicted) | set(buckets):
            self.predicted[b] = self.predicted.get(b, 0.0) * (1 - EWMA)
            self.accepted[b] = self.accepted.get(b, 0.0) * (1 - EWMA)
        for i, (a, b) in enumerate(zip(estimates, buckets)):
            if i > accepted:
                break
            self.predicted[b] += a
            self.accepted[b] += 1.0 if i < accepted else 0.0

    def observe_outcomes(self, estimates: Sequence[float], buckets: Sequence[int], hits: Sequence[bool]) -> None:
        """A verified TREE: every node verification reached (a child of the root or of an accepted
        node), with whether it was accepted. Older evidence decays once, as in :meth:`observe`."""
        for b in set(self.predicted) | set(buckets):
            self.predicted[b] = self.predicted.get(b, 0.0) * (1 - EWMA)
            self.accepted[b] = self.accepted.get(b, 0.0) * (1 - EWMA)
        for a, b, hit in zip(estimates, buckets, hits):
            self.predicted[b] += a
            self.accepted[b] += 1.0 if hit else 0.0

    def apply(self, estimates: Sequence[float], buckets: Sequence[int]) -> list[float]:
        return [min(MAX_ACCEPT, a * self.factor(b)) for a, b in zip(estimates, buckets)]


def expected_accepted(accept: Sequence[float]) -> float:
    """a_1 + a_1 a_2 + ...: the expected number of accepted drafts."""
    total, reach = 0.0, 1.0
    for a in accept:
        reach *= a
        total += reach
    return total
