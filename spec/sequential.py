"""Group-sequential chi-square tests: reject a broken verifier early, stop a correct one at power.

A fixed-N test (:mod:`spec.statistics`) draws all N samples before it looks. Here a test looks at
the counts at a fixed schedule of sample sizes ("looks") and may reject at any of them; it passes
only after its LAST look. The schedule and the alpha spent at each look are fixed in advance
(never chosen from the data), so the test is valid at any stopping time:

- Looks. Samples come in equal blocks of B; look j is after 2^j blocks, j = 0 .. L - 1, and the
  final look (2^(L-1) blocks) has at least the N that :func:`spec.statistics.required_sample_size`
  asks for at the final look's alpha. L = ``LOOKS`` = 7, so the first look sees N / 64; a design
  too small for 64 blocks of ``MIN_BLOCK`` gets fewer looks (:func:`schedule`), never more draws.
- Alpha spending (Bonferroni over looks). The test's alpha (its line of the budget table,
  ``spec.statistics.ALPHA_BUDGET``) is split: alpha / 2 at the final look, alpha / (2 (L - 1)) at
  each earlier look. P(any false rejection) <= sum of the looks' alphas = alpha, whatever the
  dependence between looks, so the suite's alpha budget is unchanged.
- Power. A look j that rejects a deviation of total variation >= tv with probability
  >= ``power_of(n_j, df, alpha_j, tv)`` makes the whole test reject with at least that
  probability; so a run stopped after look j has power >= the max of that over its looks (the
  "power reached"), and a completed run has power >= ``POWER`` = 0.99 (the final look's design).
  The final look needs ~4% more samples than the fixed-N test (alpha / 2 instead of alpha);
  a verifier off by TV >= 10 tv is rejected at the first look, on N / 64 samples.

Blocks are drawn from their own generator, ``default_rng([seed, crc32(name), block])``, so the
counts of any set of blocks do not depend on which process drew them or in what order: a run
split into shards (block b in shard b mod S) and merged gives the unsharded counts exactly.

What this does not do: it does not adapt the schedule to the data (no sample-size
re-estimation), and it uses Bonferroni, not an O'Brien-Fleming boundary, so its early looks are
conservative (their alpha is small); it is still a chi-square per look, with the asymptotic
approximation and cell pooling of :func:`spec.statistics.chi_square`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import BudgetEnded as BudgetEnded  # its home; spec.sequential re-exports it
from verispec.reference.speculative import BatchVerifier
from verispec.spec.statistics import POWER, ChiSquare, chi_square, power_of, required_sample_size

LOOKS = 7  # looks per test: after 1, 2, 4, ..., 64 blocks
FINAL_SHARE = 0.5  # of the test's alpha spent at the final look (the rest split over the others)

Counts = npt.NDArray[np.int64]
Sampler = Callable[[BatchVerifier, np.random.Generator, int], Counts]  # (batch, rng, n) -> counts [C]
State = Literal["running", "failed", "passed", "inconclusive"]


@dataclass(frozen=True)
class StatDesign:
    """One statistical test as designed: C cells with an exact law, and how to sample counts.

    ``draw(batch, rng, n)`` runs n independent verifications (drafts, uniforms and any other
    randomness from ``rng``) and returns the counts over the C cells.
    """

    name: str
    probs: npt.NDArray[np.float64]  # [C]: the exact law of the cells
    df: int  # design degrees of freedom: possible cells - 1
    tv: float  # the smallest total-variation deviation the test must detect
    alpha: float  # the test's line of the alpha budget
    draw: Sampler
    label: str = ""  # what the cells are, for reports (" V=6 k=1")


@dataclass(frozen=True)
class Schedule:
    """Block size, the looks (cumulative blocks) and the alpha spent at each."""

    block: int  # samples per block
    looks: tuple[int, ...]  # cumulative blocks at each look, increasing
    alphas: tuple[float, ...]  # alpha spent at each look; sums to the test's alpha

    @property
    def blocks(self) -> int:
        return self.looks[-1]

    def samples(self, look: int) -> int:
        return self.looks[look] * self.block


MIN_BLOCK = 100  # draws per block at the least: a first look on fewer sees almost nothing


def schedule(design: StatDesign, scale: float = 1.0) -> Schedule:
    """The looks of a test: the final one reaches ``POWER`` against ``design.tv`` (times scale).

    Sized to the design: a design of N >= 64 * ``MIN_BLOCK`` draws gets ``LOOKS`` looks over 64
    blocks (whole hundreds); a smaller one gets fewer looks, 2^(L-1) blocks of at least
    ``MIN_BLOCK``, so its final look is at N (not at a floor of 64 blocks of 100: the V = 262,144
    strata test needs ~2,000 draws, not 6,400). The final look, where N reaches the design's N,
    is where the test passes; its boundary (alpha * ``FINAL_SHARE``) is applied once, there, and
    the earlier looks split the rest, so the alpha spent is <= the test's alpha at any L. The
    schedule is a function of the design and the scale only, fixed before any draw.
    """
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    final_alpha = design.alpha * FINAL_SHARE
    full = required_sample_size(design.df, final_alpha, design.tv) * scale
    looks_count = LOOKS
    while looks_count > 1 and full / 2 ** (looks_count - 1) < MIN_BLOCK:
        looks_count -= 1
    blocks = 2 ** (looks_count - 1)
    if looks_count == LOOKS:
        block = int(math.ceil(full / blocks / 100.0)) * 100  # whole hundreds: readable N
    else:
        block = max(MIN_BLOCK, int(math.ceil(full / blocks)))
    early_alpha = design.alpha * (1.0 - FINAL_SHARE) / max(looks_count - 1, 1)
    looks = tuple(2**j for j in range(looks_count))
    return Schedule(block, looks, (early_alpha,) * (looks_count - 1) + (final_alpha,))


def block_rng(seed: int, name: str, block: int) -> np.random.Generator:
    """The generator of one block: a function of (seed, test, block) only."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), block])


@dataclass
class LookResult:
    """One look: samples so far, alpha spent here, the chi-square, and its power."""

    n: int
    alpha: float
    test: ChiSquare
    power: float

    @property
    def rejects(self) -> bool:
        return not self.test.passed(self.alpha)


@dataclass
class SequentialTest:
    """A group-sequential test in progress: counts per block drawn, and its looks so far.

    ``block_counts`` maps block index -> counts [C]; blocks may arrive in any order (shards,
    workers), a look is taken only when every block before it is in.
    """

    design: StatDesign
    plan: Schedule
    block_counts: dict[int, Counts] = field(default_factory=dict)
    looks: list[LookResult] = field(default_factory=list)

    @property
    def state(self) -> State:
        if any(look.rejects for look in self.looks):
            return "failed"
        if len(self.looks) == len(self.plan.looks):
            return "passed"
        return "running"

    @property
    def power_reached(self) -> float:
        """Worst-case power against ``design.tv`` of the looks taken (0 before the first)."""
        return max((look.power for look in self.looks), default=0.0)

    @property
    def samples(self) -> int:
        return self.plan.block * len(self.block_counts)

    @property
    def alpha_spent(self) -> float:
        return math.fsum(look.alpha for look in self.looks)

    def next_blocks(self) -> range:
        """The blocks the next look needs (empty when the test is decided)."""
        if self.state != "running":
            return range(0)
        start = self.plan.looks[len(self.looks) - 1] if self.looks else 0
        return range(start, self.plan.looks[len(self.looks)])

    def add(self, block: int, counts: Counts) -> None:
        if not 0 <= block < self.plan.blocks:
            raise ValueError(f"{self.design.name}: block {block} outside [0, {self.plan.blocks})")
        if block in self.block_counts:
            raise ValueError(f"{self.design.name}: block {block} counted twice")
        self.block_counts[block] = np.asarray(counts, dtype=np.int64)

    def take_looks(self) -> None:
        """Take every look whose blocks are all in (stops at the first rejection)."""
        while self.state == "running":
            j = len(self.looks)
            needed = self.plan.looks[j]
            if any(b not in self.block_counts for b in range(needed)):
                return
            counts = np.asarray(np.sum([self.block_counts[b] for b in range(needed)], axis=0), dtype=np.int64)
            n, alpha = self.plan.samples(j), self.plan.alphas[j]
            test = chi_square(counts, self.design.probs)
            self.looks.append(LookResult(n, alpha, test, power_of(n, self.design.df, alpha, self.design.tv)))

    def detail(self) -> str:
        d = self.design
        if not self.looks:
            return f"no look taken (first look at N={self.plan.samples(0)}){d.label}"
        last = self.looks[-1]
        t = last.test
        where = f"look {len(self.looks)}/{len(self.plan.looks)} N={last.n} alpha_look={last.alpha:.2g}"
        return (
            f"{where}: chi2={t.statistic:.1f} df={t.df} p={t.p_value:.3g} impossible={t.impossible} "
            f"pooled={t.pooled_cells} max|freq-prob|={t.max_abs_error:.2g}{d.label} tv={d.tv:g}"
        )


def draw_block(design: StatDesign, batch: BatchVerifier, seed: int, block: int, size: int) -> Counts:
    """The counts of one block (its own generator: see :func:`block_rng`)."""
    return np.asarray(design.draw(batch, block_rng(seed, design.name, block), size), dtype=np.int64)


class Budget:
    """When to stop drawing: after ``seconds`` of ``clock`` or ``samples`` draws, whichever first.
    The seconds are honoured inside a block too: the verifier is not called once they are spent
    (:class:`BudgetEnded`), so one block of a large design or a slow verifier cannot outlast them.

    Tests drive it with a sample count or an injected clock, never with wall time.
    """

    def __init__(
        self,
        seconds: float | None = None,
        samples: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        if seconds is not None and not seconds > 0:
            raise ValueError(f"budget seconds must be > 0, got {seconds}")
        if samples is not None and samples < 0:
            raise ValueError(f"budget samples must be >= 0, got {samples}")
        self.seconds = seconds
        self.samples = samples
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self.used = 0

    def expired(self) -> bool:
        """Whether the seconds are spent (checked before every verifier call, inside a block too)."""
        return self.seconds is not None and self.clock() - self.start >= self.seconds

    def wall_deadline(self) -> float | None:
        """When the seconds end, as ``time.time()`` (what another process can compare with), or None."""
        import time

        return None if self.seconds is None else time.time() + self.seconds - (self.clock() - self.start)

    def allows(self, size: int) -> bool:
        """Whether a block of ``size`` more draws may start."""
        if self.samples is not None and self.used + size > self.samples:
            return False
        return self.seconds is None or self.clock() - self.start < self.seconds

    def spend(self, size: int) -> None:
        self.used += size


BlockDraw = Callable[[StatDesign, Sequence[int], int], list[Counts]]  # (design, blocks, size) -> counts


def serial_draw(batch: BatchVerifier, seed: int) -> BlockDraw:
    """Draw blocks one after another in this process."""

    def draw(design: StatDesign, blocks: Sequence[int], size: int) -> list[Counts]:
        return [draw_block(design, batch, seed, block, size) for block in blocks]

    return draw


def run_interleaved(
    tests: Sequence[SequentialTest],
    draw: BlockDraw,
    budget: Budget | None = None,
    *,
    parallel: int = 1,
    fail_fast: bool = False,
    on_look: Callable[[SequentialTest], None] | None = None,
) -> None:
    """Advance every test look by look, round robin, so a tight budget gives each some power and
    a broken verifier meets every test's cheap first look before any test's expensive last one.
    Within a round the tests go cheapest next look first (by their measured time per draw), so
    an expensive test does not hold the cheap ones back. The order changes no count (each
    block's generator is its own) and no decision without a budget.

    Blocks go to ``draw`` ``parallel`` at a time (one per worker); the budget is asked before
    each such group. Stops when every test is decided, when the budget refuses the next group
    (undecided tests stay "running": the caller reports them inconclusive), or, with
    ``fail_fast``, at the first rejection.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    import time

    per_draw: dict[str, float] = {}  # measured seconds per draw of each test, once it has drawn
    while True:
        live = [t for t in tests if t.state == "running"]
        if not live:
            return
        # cheapest next look first (a test not yet timed counts as free), so an expensive test
        # (V = 262,144 rows) spends the budget after the cheap ones have taken this round's look
        live.sort(key=lambda t: per_draw.get(t.design.name, 0.0) * t.plan.block * len(t.next_blocks()))
        for test in live:
            needed = list(test.next_blocks())
            for at in range(0, len(needed), parallel):
                group = needed[at : at + parallel]
                size = test.plan.block * len(group)
                if budget is not None and not budget.allows(size):
                    return
                began = time.perf_counter()
                try:
                    drawn = draw(test.design, group, test.plan.block)
                except BudgetEnded:  # the seconds ran out inside the group: it is dropped whole
                    return
                per_draw[test.design.name] = (time.perf_counter() - began) / size
                for block, counts in zip(group, drawn):
                    test.add(block, counts)
                if budget is not None:
                    budget.spend(size)
            test.take_looks()
            if on_look:
                on_look(test)
            if fail_fast and test.state == "failed":
                return


def final_state(test: SequentialTest) -> State:
    """A test still running when the run stopped is inconclusive."""
    return "inconclusive" if test.state == "running" else test.state


def shard_blocks(plan: Schedule, shard: int, shards: int) -> list[int]:
    """The blocks of shard ``shard`` (0-based) of ``shards``: block b goes to shard b mod shards."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} outside [0, {shards})")
    return [b for b in range(plan.blocks) if b % shards == shard]


__all__ = [
    "POWER",
    "Budget",
    "BudgetEnded",
    "LookResult",
    "Schedule",
    "SequentialTest",
    "StatDesign",
    "block_rng",
    "draw_block",
    "final_state",
    "run_interleaved",
    "schedule",
    "serial_draw",
    "shard_blocks",
]
