"""Own-RNG verifiers under shards and workers: the seed each call is handed, the same-stream
refusal, each shard's own looks, and what a shard's exit status says.

The subject is the usual CI adapter: a verifier with its own generator seeded ONCE with a fixed
value (spec.law_only.with_own_randomness), which draws from the seed the gate hands it. The
reference so wrapped must pass merged over 8 shards; a law-breaking mutant so wrapped must fail
in every shard at the shard's FIRST own look (one block: N / 64 of the full schedule); the same
adapter ignoring the seed must be REFUSED by the merge, not failed (with the refusal's probe
removed, the merged run does fail the correct sampler: the false FAIL the probe prevents).

Sizes: passing runs use SCALE = 0.05 of the full N (three small tests: 32,000 / 32,000 / 57,600
draws in all; power at TV 0.005 is low there and is not what they show: a correct sampler's
false-fail probability is each test's alpha, 1e-4, at any N). The mutant runs at the full
schedule, but each shard stops after its first block.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import (
    EXIT_FAILED,
    EXIT_PASSED,
    CheckError,
    CheckReport,
    CommandImplementation,
    PythonImplementation,
    merge_reports,
    run_check,
    seal,
)
from verispec.spec.law_only import call_seed, request_seed, seed_style, single_with_own_randomness, with_own_randomness
from verispec.spec.mutants import catalogue
from verispec.spec.properties import STAT_DESIGNS
from verispec.spec.sequential import schedule, shard_blocks
from verispec.spec.shards import SHARD_ALPHA_SHARE, ShardTest, merged_schedule, own_look_sizes
from verispec.spec.vectors import VectorSet, build_vectors

SCALE = 0.05
ONLY = ["contract", "range_and_mass", "stat_verdict_law_k1", "stat_verdict_law_k2", "stat_lossless_ar_k1"]
SHARDS = 8


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(2, 1)


def _adapter(*, use_given_seed: bool = True, mutant: str | None = None) -> PythonImplementation:
    single, batch = verify_sampled, verify_sampled_batch
    if mutant is not None:
        chosen = {m.name: m for m in catalogue()}[mutant]
        single, batch = chosen.verifier, chosen.batch
    return PythonImplementation(
        single_with_own_randomness(single, 1234, use_given_seed=use_given_seed),
        batch=with_own_randomness(batch, 1234, use_given_seed=use_given_seed),
        law_only=True,
    )


def _shards(vectors: VectorSet, shards: int = SHARDS, scale: float = SCALE, **adapter: object) -> list[CheckReport]:
    """Each shard run as its own process would: a fresh adapter, the report through JSON."""
    out = []
    for index in range(1, shards + 1):
        report = run_check(_adapter(**adapter), vectors, only=ONLY, scale=scale, shard=(index, shards), min_power=0)  # type: ignore[arg-type]
        out.append(CheckReport.from_json(json.loads(json.dumps(report.as_json()))))
    return out


# -----------------------------------------------------------------------------------------------
# the seed each call is handed


def test_every_call_gets_its_own_reproducible_seed() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.random((100, 3)), rng.random((100, 3))
    assert call_seed(a) == call_seed(a.copy()) != call_seed(b)
    assert 0 <= call_seed(a) < 2**53
    assert request_seed(7, 0) == 7 and len({request_seed(7, j) for j in range(50)}) == 50
    assert seed_style(lambda p, q, drafts, seed: None) == "seed"
    assert seed_style(lambda p, q, drafts, rng: None) == "rng"
    assert seed_style(lambda p, q, drafts: None) == "none"  # the old form still works


def test_a_law_only_verifier_is_handed_seeds_that_do_not_depend_on_the_sharding(vectors: VectorSet) -> None:
    """Shard 1 of 1 draws every block: its counts equal the union of the 8 shards' counts."""
    (whole,) = _shards(vectors, shards=1)
    parts = _shards(vectors)
    for name in ("stat_verdict_law_k1", "stat_lossless_ar_k1"):
        joined = {b: c for s in parts for b, c in s.blocks[name].items()}
        assert joined == whole.blocks[name]


# -----------------------------------------------------------------------------------------------
# the sharded own-RNG run


def test_a_fixed_seed_adapter_passes_over_8_shards(vectors: VectorSet) -> None:
    shards = _shards(vectors)
    assert [s.exit_status for s in shards] == [EXIT_PASSED] * SHARDS
    assert all(s.as_json()["passed"] for s in shards)
    merged = merge_reports(shards, allow_partial=True)
    assert merged.exit_status == EXIT_PASSED, [(p.name, p.status, p.detail) for p in merged.properties]
    assert {p.name: p.status for p in merged.properties} == {name: "passed" for name in ONLY}
    for outcome in merged.statistical():  # the merged looks spend (1 - share) of the test's alpha
        design = STAT_DESIGNS[outcome.name]()
        assert outcome.alpha == pytest.approx(design.alpha * (1 - SHARD_ALPHA_SHARE), rel=1e-12)
        assert outcome.n == schedule(design, SCALE).samples(-1)


def test_a_broken_sampler_fails_in_every_shard_at_its_first_own_look(vectors: VectorSet) -> None:
    shards = _shards(vectors, scale=1.0, mutant="resample_from_target")
    assert [s.exit_status for s in shards] == [EXIT_FAILED] * SHARDS
    for report in shards:
        assert report.as_json()["passed"] is False  # never "passed": false with exit 0
        for outcome in report.statistical():
            assert outcome.status == "failed" and "at its own look 1" in outcome.detail
            assert outcome.n == schedule(STAT_DESIGNS[outcome.name]()).block  # one block: N / 64
    merged = merge_reports(shards, allow_partial=True)
    assert merged.exit_status == EXIT_FAILED and merged.claim().startswith("not lossless")


def test_an_adapter_that_ignores_the_seed_is_refused_not_failed(vectors: VectorSet) -> None:
    shards = _shards(vectors, use_given_seed=False)
    with pytest.raises(
        CheckError, match="shards 1 and 2 drew the same stream: the verifier ignores the seed it is given"
    ):
        merge_reports(shards, allow_partial=True)
    for report in shards:  # without the probe the dependent streams would decide: a false FAIL
        report.probe = None
        seal(report)
    assert merge_reports(shards, allow_partial=True).exit_status == EXIT_FAILED


# -----------------------------------------------------------------------------------------------
# shards' own looks: alpha and schedule


@pytest.mark.parametrize("shards", [2, 3, 8, 64])
def test_the_shards_own_looks_and_the_merged_looks_keep_the_tests_alpha(shards: int) -> None:
    design = STAT_DESIGNS["stat_verdict_law_k2"]()
    plan = schedule(design)
    own = sum(
        ShardTest(design, plan, index, shards).look_alpha
        * len(own_look_sizes(len(shard_blocks(plan, index - 1, shards))))
        for index in range(1, shards + 1)
    )
    merged = sum(merged_schedule(design, 1.0, shards).alphas)
    assert own == pytest.approx(design.alpha * SHARD_ALPHA_SHARE, rel=1e-12)
    assert own + merged == pytest.approx(design.alpha, rel=1e-12)
    assert merged_schedule(design, 1.0, 1) == plan  # one shard: the unsharded run


def test_own_look_sizes() -> None:
    assert own_look_sizes(8) == [1, 2, 4, 8]
    assert own_look_sizes(6) == [1, 2, 4, 6]
    assert own_look_sizes(1) == [1]


# -----------------------------------------------------------------------------------------------
# worker processes

ignoring_single = single_with_own_randomness(verify_sampled, 99, use_given_seed=False)
ignoring_batch = with_own_randomness(verify_sampled_batch, 99, use_given_seed=False)
seeded_single = single_with_own_randomness(verify_sampled, 99)
seeded_batch = with_own_randomness(verify_sampled_batch, 99)


def test_worker_processes_with_one_stream_are_refused_and_seeded_ones_match_serial(vectors: VectorSet) -> None:
    from verispec.spec.workers import ImplementationSpec, WorkerPool

    only = ["stat_verdict_law_k1"]
    here = f"{__name__}"

    def with_workers(single: str, batch: str) -> CheckReport:
        spec = ImplementationSpec(f"{here}:{single}", f"{here}:{batch}", law_only=True)
        pool = WorkerPool(spec, 20_240_531, 2)
        try:
            impl = PythonImplementation.from_specs(f"{here}:{single}", f"{here}:{batch}", law_only=True)
            return run_check(impl, vectors, only=only, scale=SCALE, sequential=True, draw=pool.draw, parallel=2)
        finally:
            pool.close()

    with pytest.raises(CheckError, match="worker processes .* drew the same stream"):
        with_workers("ignoring_single", "ignoring_batch")
    parallel = with_workers("seeded_single", "seeded_batch")
    serial = run_check(
        PythonImplementation(seeded_single, batch=seeded_batch, law_only=True),
        vectors,
        only=only,
        scale=SCALE,
        sequential=True,
    )
    assert [(p.status, p.n, p.detail) for p in parallel.properties] == [
        (p.status, p.n, p.detail) for p in serial.properties
    ]


# -----------------------------------------------------------------------------------------------
# the wire and the command line


@pytest.mark.parametrize(("flags", "refused"), [("", False), (" --ignore-seed", True)])
def test_shards_through_the_wire(vectors: VectorSet, flags: str, refused: bool) -> None:
    """The sampled_law op carries a seed per request; a program that ignores it is refused."""

    reports = []
    for index in (1, 2):
        impl = CommandImplementation(
            f"{sys.executable} -m verispec.spec.external --reference --law-only 5{flags}", 60.0, law_only=True
        )
        try:
            reports.append(
                run_check(
                    impl, vectors, only=["contract", "stat_verdict_law_k1"], scale=SCALE, shard=(index, 2), min_power=0
                )
            )
        finally:
            impl.close()
    if refused:
        with pytest.raises(CheckError, match="shards 1 and 2 drew the same stream"):
            merge_reports(reports, allow_partial=True)
    else:
        assert merge_reports(reports, allow_partial=True).exit_status == EXIT_PASSED


def test_the_command_line_shards_and_merges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from verispec import cli

    here = __name__
    paths = []
    for index in (1, 2):
        status = cli.main(
            [
                "check",
                "--law-only",
                "--verifier",
                f"{here}:seeded_single",
                "--batch-verifier",
                f"{here}:seeded_batch",
                "--only",
                "contract",
                "stat_verdict_law_k1",
                "--scale",
                str(SCALE),
                "--min-power",
                "0",
                "--count",
                "1",
                "--shard",
                f"{index}/2",
                "--json",
            ]
        )
        assert status == EXIT_PASSED
        paths.append(tmp_path / f"shard_{index}.json")
        paths[-1].write_text(capsys.readouterr().out, encoding="utf-8")
    assert cli.main(["check", "--merge", *map(str, paths)]) == 2  # an --only run: the full set is required
    assert "full property set" in capsys.readouterr().err
    assert cli.main(["check", "--merge", *map(str, paths), "--allow-partial", "--json"]) == EXIT_PASSED
    merged = json.loads(capsys.readouterr().out)
    assert merged["passed"] and "partial run" in merged["claim"]
