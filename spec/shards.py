"""Shards: block ownership, each shard's own looks, and the alpha they spend.

Block b of a test goes to shard b mod S (:func:`spec.sequential.shard_blocks`). A shard sees
only its blocks, yet a broken verifier should be stopped where it is seen, not after every
shard has drawn its whole slice. So each shard takes looks of its own, on its own blocks in
order, after 1, 2, 4, ... of them (and after its last), and stops that test at a rejection: the
shard then exits 1 and the merged test is failed.

The alpha (Bonferroni, like the looks of :mod:`spec.sequential`): of a test's alpha a, the
shards' own looks spend ``SHARD_ALPHA_SHARE`` = 0.1: a * 0.1 / S per shard, split evenly over
its looks; the merged looks spend the rest: every look of the unsharded schedule at
(1 - 0.1) times its alpha. Then

    P(some shard's look or some merged look rejects a correct verifier)
      <= S * (0.1 a / S) + 0.9 a = a,

whatever the dependence, so the suite's alpha budget is unchanged. The price: the merged final
look has alpha 0.45 a instead of 0.5 a, so the merged power is a little below the unsharded
run's at the same N (the report shows the power reached, computed at the alphas spent); the
blocks and counts are the unsharded run's exactly. A one-shard run (S = 1) is the unsharded run:
no own looks, full alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from verispec.spec.sequential import Counts, Schedule, StatDesign, schedule, shard_blocks
from verispec.spec.statistics import ChiSquare, chi_square, power_of

SHARD_ALPHA_SHARE = 0.1  # of each test's alpha, spent by all shards' own looks together


def merged_schedule(design: StatDesign, scale: float, shards: int) -> Schedule:
    """The unsharded schedule, its looks' alphas times (1 - share) when S > 1."""
    plan = schedule(design, scale)
    if shards <= 1:
        return plan
    return Schedule(plan.block, plan.looks, tuple(a * (1.0 - SHARD_ALPHA_SHARE) for a in plan.alphas))


def own_look_sizes(blocks: int) -> list[int]:
    """A shard's own looks, in its blocks: 1, 2, 4, ... and its last (for ``blocks`` of them)."""
    sizes = [2**j for j in range(max(blocks, 1).bit_length()) if 2**j <= blocks]
    if blocks and sizes[-1] != blocks:
        sizes.append(blocks)
    return sizes


@dataclass
class ShardTest:
    """One test in one shard: its blocks in order, and its own looks on them."""

    design: StatDesign
    plan: Schedule  # the unsharded schedule (block size, blocks)
    index: int  # 1-based
    shards: int
    counts: dict[int, Counts] = field(default_factory=dict)
    rejection: str | None = None  # the look that rejected, in words

    @property
    def blocks(self) -> list[int]:
        return shard_blocks(self.plan, self.index - 1, self.shards)

    @property
    def look_alpha(self) -> float:
        looks = len(own_look_sizes(len(self.blocks)))
        return self.design.alpha * SHARD_ALPHA_SHARE / self.shards / max(looks, 1)

    @property
    def samples(self) -> int:
        return self.plan.block * len(self.counts)

    def add(self, block: int, counts: Counts) -> None:
        if block not in self.blocks:
            raise ValueError(f"{self.design.name}: block {block} is not shard {self.index}/{self.shards}'s")
        self.counts[block] = np.asarray(counts, dtype=np.int64)

    def look(self) -> None:
        """Take the own look due now (if the blocks drawn complete one); record a rejection."""
        if self.rejection is not None or self.shards <= 1:
            return
        drawn = len(self.counts)
        if drawn not in own_look_sizes(len(self.blocks)):
            return
        test = self.chi_square(drawn)
        if not test.passed(self.look_alpha):
            look = own_look_sizes(len(self.blocks)).index(drawn) + 1
            n = drawn * self.plan.block
            self.rejection = (
                f"shard {self.index}/{self.shards} rejected at its own look {look} (N={n} alpha_look={self.look_alpha:.2g}): "
                f"chi2={test.statistic:.1f} df={test.df} p={test.p_value:.3g} impossible={test.impossible}{self.design.label}"
            )

    def chi_square(self, drawn: int) -> ChiSquare:
        """The chi-square of the shard's first ``drawn`` blocks."""
        first = self.blocks[:drawn]
        total = np.asarray(np.sum([self.counts[b] for b in first], axis=0), dtype=np.int64)
        return chi_square(total, self.design.probs)

    def power(self) -> float:
        """The power against ``design.tv`` of the own looks taken so far."""
        taken = [s for s in own_look_sizes(len(self.blocks)) if s <= len(self.counts)]
        return max(
            (power_of(s * self.plan.block, self.design.df, self.look_alpha, self.design.tv) for s in taken), default=0.0
        )


def replay_own_looks(test: ShardTest, order: Sequence[int]) -> None:
    """Take a shard's own looks again on its recorded blocks (the merge checks a claimed rejection)."""
    recorded = dict(test.counts)
    test.counts.clear()
    for block in order:
        test.counts[block] = recorded[block]
        test.look()
        if test.rejection is not None:
            return


def foreign_shard_message(index: int, shards: int, expected: int) -> str:
    return f"shard {index}/{shards} does not belong to a {expected}-way run"


def missing_shards_message(seen: Sequence[int], shards: int) -> str:
    missing = sorted(set(range(1, shards + 1)) - set(seen))
    twice = sorted({i for i in seen if list(seen).count(i) > 1})
    parts = []
    if missing:
        parts.append("missing shard " + ", ".join(f"{i}/{shards}" for i in missing))
    if twice:
        parts.append("shard " + ", ".join(f"{i}/{shards}" for i in twice) + " given twice")
    return f"merge needs shards 1..{shards} of one run exactly once each: " + "; ".join(parts)
