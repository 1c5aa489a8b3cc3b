"""`verispec check --law-only`, sequential tests, --budget, --shard/--merge, --workers.

A verifier with its own randomness is modelled by wrapping a uniform-consuming one so that it
ignores the checker's uniforms and draws its own (spec.law_only.with_own_randomness): the
reference wrapped so must pass the law tests, a law-breaking mutant wrapped so must fail them.
Sample sizes: the statistical tests run at a fraction SCALE of their full N where the verdict is
a pass (the reported power then follows and is checked against the schedule, not hard-coded);
mutants are rejected at the FIRST look of the full-power schedule (N / 64), which is the claim.
The budget is driven by a sample count or an injected clock, never by wall time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import (
    EXIT_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_PASSED,
    CheckReport,
    CommandImplementation,
    PythonImplementation,
    merge_reports,
    run_check,
)
from verispec.spec.law_only import LAW_PROPERTIES, single_with_own_randomness, with_own_randomness
from verispec.spec.mutants import catalogue
from verispec.spec.properties import STAT_DESIGNS
from verispec.spec.sequential import LOOKS, MIN_BLOCK, Budget, SequentialTest, schedule, serial_draw
from verispec.spec.shards import SHARD_ALPHA_SHARE
from verispec.spec.statistics import ALPHA_BUDGET, POWER, power_of, required_sample_size
from verispec.spec.vectors import VectorSet, build_vectors

PY = sys.executable
SCALE = 0.03  # of the full N, for runs that pass (see the module docstring)
FEW = ["contract", "range_and_mass", "stat_verdict_law_k2", "stat_lossless_ar_k1"]


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(2, 1)


def _own_rng(name: str | None = None) -> PythonImplementation:
    if name is None:
        single, batch = verify_sampled, verify_sampled_batch
    else:
        mutant = {m.name: m for m in catalogue()}[name]
        single, batch = mutant.verifier, mutant.batch
    return PythonImplementation(
        single_with_own_randomness(single, 11), batch=with_own_randomness(batch, 12), law_only=True
    )


# -----------------------------------------------------------------------------------------------
# the schedule


@pytest.mark.parametrize("name", sorted(STAT_DESIGNS))
def test_schedule_spends_the_budget_line_and_reaches_power(name: str) -> None:
    design = STAT_DESIGNS[name]()
    plan = schedule(design)
    assert design.alpha == ALPHA_BUDGET[name]
    assert sum(plan.alphas) == pytest.approx(design.alpha, rel=1e-12)
    looks = len(plan.looks)
    # 7 looks, or fewer for a design too small for 64 blocks of MIN_BLOCK draws
    assert plan.looks[0] == 1 and (
        looks == LOOKS or required_sample_size(design.df, plan.alphas[-1], design.tv) < 2 ** (LOOKS - 1) * MIN_BLOCK
    )
    final = plan.samples(looks - 1)
    assert power_of(final, design.df, plan.alphas[-1], design.tv) >= POWER
    # the first look is 1/2^(L-1) of the final one (1/64 at 7 looks): the cost of an early rejection
    assert plan.samples(0) * 2 ** (looks - 1) == final


@pytest.mark.parametrize("name", sorted(STAT_DESIGNS))
def test_the_schedule_is_sized_to_the_design(name: str) -> None:
    """The final look is at the design's N, rounded up by less than one block: no floor of
    64 blocks of 100 (the V = 262,144 strata test needs ~2,000 draws, not 6,400)."""
    design = STAT_DESIGNS[name]()
    plan = schedule(design)
    needed = required_sample_size(design.df, plan.alphas[-1], design.tv)
    final = plan.samples(len(plan.looks) - 1)
    small = needed < 2 ** (LOOKS - 1) * MIN_BLOCK  # too small for 64 blocks of MIN_BLOCK: fewer looks
    rounding = plan.blocks if small else plan.blocks * 100  # whole draws per block, or whole hundreds
    assert needed <= final < needed + rounding


# -----------------------------------------------------------------------------------------------
# law-only


def test_reference_with_its_own_randomness_passes_law_only(vectors: VectorSet) -> None:
    report = run_check(_own_rng(), vectors, scale=SCALE, sequential=True, min_power=0)  # a scaled-down run
    statuses = {p.name: p.status for p in report.properties}
    assert {n for n, s in statuses.items() if s != "not_applicable"} == set(LAW_PROPERTIES)
    for name in ("vectors_sampled", "protocol_cells", "exact_lossless", "batch_matches_sequential"):
        assert statuses[name] == "not_applicable"
    assert all(statuses[n] == "passed" for n in LAW_PROPERTIES), report.as_json()["properties"]
    assert report.exit_status == EXIT_PASSED
    for outcome in report.statistical():  # the reported power is the schedule's, at the scale
        design = STAT_DESIGNS[outcome.name]()
        plan = schedule(design, SCALE)
        assert outcome.n == plan.samples(len(plan.looks) - 1)
        assert outcome.power == pytest.approx(
            max(power_of(plan.samples(j), design.df, plan.alphas[j], design.tv) for j in range(len(plan.looks)))
        )
    claim = report.claim()
    assert "lossless at power" in claim and "against total-variation deviation 0.005" in claim
    assert "not portable" in claim


@pytest.mark.parametrize("mutant", ["resample_from_target", "always_accept", "residual_not_renormalized"])
def test_law_breaking_mutant_with_its_own_randomness_fails_early(mutant: str, vectors: VectorSet) -> None:
    only = ["stat_verdict_law_k2", "stat_lossless_ar_k1"]
    report = run_check(_own_rng(mutant), vectors, only=only, sequential=True)
    assert report.exit_status == EXIT_FAILED
    for outcome in report.statistical():
        assert outcome.status == "failed"
        design = STAT_DESIGNS[outcome.name]()
        fixed_n = required_sample_size(design.df, design.alpha, design.tv)
        assert outcome.n < fixed_n / 10, f"{outcome.name} rejected only after {outcome.n} of a fixed {fixed_n}"
    assert report.claim().startswith("not lossless")


def test_law_only_reports_what_the_contract_can_still_see(vectors: VectorSet) -> None:
    def no_checks(p: object, q: object, drafts: list[int]) -> tuple[int, int, str]:
        return (0, 0, "repair")  # answers everything, rejects nothing

    report = run_check(PythonImplementation(no_checks, law_only=True), vectors, only=["contract"])
    assert report.failed and report.failed[0].name == "contract"
    assert "uniform" not in report.failed[0].detail  # the uniforms' part is not its to keep


# -----------------------------------------------------------------------------------------------
# budgets: inconclusive with the power reached


def test_tiny_sample_budget_is_inconclusive_with_the_power_reached(vectors: VectorSet) -> None:
    only = ["stat_verdict_law_k1"]
    design = STAT_DESIGNS["stat_verdict_law_k1"]()
    plan = schedule(design)
    budget = Budget(samples=plan.samples(3))  # looks 0..3 fit; look 4 (16 blocks) does not
    report = run_check(_own_rng(), vectors, only=only, budget=budget)
    (outcome,) = report.statistical()
    assert outcome.status == "inconclusive" and report.exit_status == EXIT_INCONCLUSIVE
    assert outcome.n == plan.samples(3)
    assert outcome.power == pytest.approx(power_of(plan.samples(3), design.df, plan.alphas[3]))
    assert outcome.power < POWER
    assert report.claim().startswith("inconclusive")


def _clocked_by_draws(block: int, batched: bool) -> tuple[PythonImplementation, Callable[[], float], list[int]]:
    """The law-only reference whose every draw costs 1/``block`` of a "second" on the returned
    clock (a block of stat_verdict_law_k1: one second), and the list of draws made; ``batched``:
    with its batch form (one call per block), else one call per draw."""
    drawn = [0]
    batch = with_own_randomness(verify_sampled_batch, 12)
    single = single_with_own_randomness(verify_sampled, 11)

    def counted_batch(p: Any, q: Any, drafts: Any, seed: int | None = None) -> Any:
        drawn[0] += len(drafts)
        return batch(p, q, drafts, seed)

    def counted_single(p: Any, q: Any, drafts: Any, seed: int | None = None) -> Any:
        drawn[0] += 1
        return single(p, q, drafts, seed)

    impl = PythonImplementation(counted_single, batch=counted_batch if batched else None, law_only=True)
    return impl, lambda: drawn[0] / block, drawn


def test_clock_budget_stops_the_draws(vectors: VectorSet) -> None:
    plan = schedule(STAT_DESIGNS["stat_verdict_law_k1"]())
    impl, clock, _ = _clocked_by_draws(plan.block, batched=True)
    report = run_check(impl, vectors, only=["stat_verdict_law_k1"], budget=Budget(seconds=2.0, clock=clock))
    (outcome,) = report.statistical()
    assert outcome.status == "inconclusive"
    assert outcome.n == plan.samples(1)  # two blocks: two looks


def test_clock_budget_ends_a_block_in_its_middle_and_drops_it(vectors: VectorSet) -> None:
    """1.5 "seconds" of a verifier called once per draw: the second block is allowed (a little
    over 1 second spent) but the budget ends half way through it; no verifier call is made after
    that, and the half block is not counted (a block counted in part would break the design's
    sizes): one block and its look."""
    plan = schedule(STAT_DESIGNS["stat_verdict_law_k1"]())
    impl, clock, drawn = _clocked_by_draws(plan.block, batched=False)
    report = run_check(impl, vectors, only=["stat_verdict_law_k1"], budget=Budget(seconds=1.5, clock=clock))
    (outcome,) = report.statistical()
    assert outcome.status == "inconclusive" and outcome.n == plan.samples(0)
    assert drawn[0] == math.ceil(1.5 * plan.block)  # the call that reached the budget was the last


def test_cli_exit_status_3_and_json_claim(tmp_path: Path) -> None:
    cmd = [
        PY,
        "-m",
        "verispec",
        "check",
        "--law-only",
        "--verifier",
        "tests.spec.test_law_only:law_reference",
        "--batch-verifier",
        "tests.spec.test_law_only:law_reference_batch",
        "--only",
        "stat_verdict_law_k1",
        "--budget-samples",
        "20000",
        "--count",
        "1",
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_INCONCLUSIVE, done.stderr
    report = json.loads(done.stdout)
    assert report["inconclusive"] == ["stat_verdict_law_k1"] and report["law_only"]
    assert "not portable" in report["claim"]


law_reference = single_with_own_randomness(verify_sampled, 21)
law_reference_batch = with_own_randomness(verify_sampled_batch, 22)


# -----------------------------------------------------------------------------------------------
# shards and workers


def test_merged_shards_equal_the_unsharded_run_exactly(vectors: VectorSet) -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    only = ["contract", "stat_verdict_law_k3", "stat_lossless_ar_k2"]
    whole = run_check(impl, vectors, only=only, scale=SCALE, sequential=True, min_power=0)
    shards = [
        CheckReport.from_json(
            json.loads(
                json.dumps(run_check(impl, vectors, only=only, scale=SCALE, shard=(i, 3), min_power=0).as_json())
            )
        )
        for i in (1, 2, 3)
    ]
    assert [p.name for p in shards[1].properties] == ["stat_verdict_law_k3", "stat_lossless_ar_k2"]
    assert all(s.exit_status == EXIT_PASSED for s in shards)  # a shard passes nothing, it completed
    merged = merge_reports(shards, allow_partial=True)

    def key(report: CheckReport) -> list[tuple[str, str, int]]:
        return [(p.name, p.status, p.n) for p in report.properties]

    assert key(merged) == key(whole)
    assert merged.exit_status == whole.exit_status == EXIT_PASSED
    for mine, theirs in zip(merged.statistical(), whole.statistical()):  # the same chi-squares, at 0.9 alpha
        assert mine.detail.split(": ", 1)[1] == theirs.detail.split(": ", 1)[1]
        assert mine.alpha == pytest.approx(theirs.alpha * (1 - SHARD_ALPHA_SHARE), rel=1e-12)
    # the counts themselves: every block once, equal to drawing them here
    for name in ("stat_verdict_law_k3", "stat_lossless_ar_k2"):
        design = STAT_DESIGNS[name]()
        test = SequentialTest(design, schedule(design, SCALE))
        draw = serial_draw(verify_sampled_batch, whole.seed)
        blocks = range(test.plan.blocks)
        here = dict(zip(blocks, draw(design, list(blocks), test.plan.block)))
        joined = {b: c for s in shards for b, c in s.blocks[name].items()}
        assert sorted(joined) == list(blocks)
        assert all(np.array_equal(here[b], joined[b]) for b in blocks)


def test_merge_refuses_missing_or_foreign_shards(vectors: VectorSet) -> None:
    from verispec.spec.check import CheckError

    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    only = ["stat_verdict_law_k1"]
    one = run_check(impl, vectors, only=only, scale=0.01, shard=(1, 2))
    two = run_check(impl, vectors, only=only, scale=0.02, shard=(2, 2))
    with pytest.raises(CheckError, match="exactly once each: missing shard 2/2"):
        merge_reports([one])
    with pytest.raises(CheckError, match="another run"):
        merge_reports([one, two])
    eight = run_check(impl, vectors, only=only, scale=0.01, shard=(3, 8))
    with pytest.raises(CheckError, match="shard 3/8 does not belong to a 2-way run"):
        merge_reports([one, eight])


def test_workers_draw_the_same_blocks(vectors: VectorSet) -> None:
    from verispec.spec.workers import ImplementationSpec, WorkerPool

    spec = ImplementationSpec(
        "verispec.reference.speculative:verify_sampled", "verispec.reference.speculative:verify_sampled_batch"
    )
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    only = ["stat_verdict_law_k2"]
    serial = run_check(impl, vectors, only=only, scale=SCALE, sequential=True)
    pool = WorkerPool(spec, serial.seed, 2)
    try:
        parallel = run_check(impl, vectors, only=only, scale=SCALE, sequential=True, draw=pool.draw, parallel=2)
    finally:
        pool.close()
    assert [(p.status, p.n, p.detail) for p in parallel.properties] == [
        (p.status, p.n, p.detail) for p in serial.properties
    ]


# -----------------------------------------------------------------------------------------------
# the wire: op sampled_law


@pytest.mark.parametrize(
    ("served", "expected"), [("--reference", EXIT_PASSED), ("--mutant resample_from_target", EXIT_FAILED)]
)
def test_law_only_through_the_wire(served: str, expected: int, vectors: VectorSet) -> None:
    impl = CommandImplementation(f"{PY} -m verispec.spec.external {served} --law-only 5", timeout=60.0, law_only=True)
    try:
        report = run_check(impl, vectors, only=FEW, scale=0.01, sequential=True, min_power=0)
    finally:
        impl.close()
    assert report.exit_status == expected, report.as_json()["properties"]
    assert {p.name: p.status for p in report.properties}["contract"] == "passed"


def test_worker_processes_stop_calling_the_verifier_at_the_budgets_end() -> None:
    """--workers N: each draw is handed the budget's end (wall clock); a worker past it raises
    BudgetEnded instead of drawing its block (the checker then stops as at a block's end)."""
    import time

    from verispec.spec.sequential import BudgetEnded
    from verispec.spec.workers import ImplementationSpec, WorkerPool

    design = STAT_DESIGNS["stat_verdict_law_k1"]()
    pool = WorkerPool(ImplementationSpec(verifier="verispec.reference.speculative:verify_sampled"), 5, 2)
    try:
        with pytest.raises(BudgetEnded):
            pool.draw(design, [0, 1], 1000, deadline=time.time() - 1.0)
        (counts,) = pool.draw(design, [0], 1000, deadline=time.time() + 600.0)  # before its end: drawn whole
        assert int(counts.sum()) == 1000
    finally:
        pool.close()
