"""Verdicts that say what failed, and passes that hold their stated power.

- a verifier without a greedy form: ``vectors_greedy`` is skipped with one line, never passed;
- a textbook verifier (right law, other arithmetic) is "not bit-exact with the protocol's draws",
  not "not lossless", and passes ``--law-only`` at full power;
- a contract failure on the VALID input is "crashes on valid input", apart from "does not validate";
- a pass short of its power (``scale`` < 1) is inconclusive (exit 3) unless ``min_power`` accepts it;
- without ``keep_going`` (the CI default) a deterministic failure skips the statistics;
- a Python verifier without a batch form gets a warning before the slow statistics.
"""

from __future__ import annotations

import numpy as np
import pytest

import verispec
from tests.support import textbook_verifier
from verispec.api import ci_keeps_going, slow_path_warning
from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import GREEDY_SKIPPED, PythonImplementation, run_check
from verispec.spec.law_only import single_with_own_randomness, with_own_randomness
from verispec.spec.report import CheckReport, PropertyOutcome
from verispec.spec.sequential import schedule
from verispec.spec.vectors import VectorSet, build_vectors


@pytest.fixture(scope="module")
def vectors() -> VectorSet:
    return build_vectors(8, 20240601, ["sampled", "sampled_large", "greedy"])


def test_no_greedy_verifier_skips_the_greedy_vectors_in_one_line(vectors: VectorSet) -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    report = run_check(impl, vectors, only=["vectors_sampled", "vectors_greedy"])
    greedy = next(p for p in report.properties if p.name == "vectors_greedy")
    assert greedy.status == "skipped" and greedy.detail == GREEDY_SKIPPED and "\n" not in GREEDY_SKIPPED
    assert report.passed and report.exit_status == 0
    assert next(p for p in report.as_json()["properties"] if p["name"] == "vectors_greedy")["passed"] is False


def test_a_textbook_verifier_is_not_bit_exact_but_not_called_lossy(vectors: VectorSet) -> None:
    impl = PythonImplementation(textbook_verifier.verify, batch=textbook_verifier.verify_batch)
    report = run_check(impl, vectors, only=["vectors_sampled_large", "full_vocab_protocol", "contract"])
    assert {p.name for p in report.failed} == {"vectors_sampled_large", "full_vocab_protocol"}
    assert report.headline() == "FAILED: not bit-exact with the protocol: vectors_sampled_large, full_vocab_protocol"
    claim = report.claim()
    assert claim.startswith("not bit-exact with the protocol's draws") and "try --law-only" in claim
    assert "not lossless" not in claim and report.exit_status == 1


def test_the_same_textbook_verifier_passes_law_only_at_full_power(vectors: VectorSet) -> None:
    impl = PythonImplementation(
        single_with_own_randomness(textbook_verifier.verify, 5),
        batch=with_own_randomness(textbook_verifier.verify_batch, 5),
        law_only=True,
    )
    report = run_check(
        impl, vectors, only=["range_and_mass", "stat_verdict_law_k1", "stat_verdict_law_k3"], sequential=True
    )
    assert report.passed and report.exit_status == 0, report.summary()
    assert report.claim().startswith("lossless at power 0.99")


def _failed_contract(detail: str) -> CheckReport:
    report = CheckReport("x", {}, 1.0)
    report.properties.append(PropertyOutcome("contract", "failed", 14, 0.0, 1.0, detail, 0.0))
    return report


def test_a_crash_on_the_valid_input_is_not_called_not_validating() -> None:
    def crashes(p: object, q: object, drafts: list[int], uniforms: list[float]) -> tuple[int, int, str]:
        raise ValueError("p has a negative entry")  # raises on everything, the valid input too

    report = run_check(PythonImplementation(crashes), build_vectors(2, 1, []), only=["contract"])
    assert report.headline() == "FAILED: crashes on valid input"
    assert report.claim().startswith("crashes on valid input (raises on a valid input it must answer)")
    both = _failed_contract(
        "2 of 14 cases fail: valid input raised VerificationError: no; k = 0: accepted without VerificationError"
    )
    assert both.headline() == "FAILED: does not validate its input; crashes on valid input"
    only_invalid = _failed_contract("1 of 14 cases fail: k = 0: accepted without VerificationError")
    assert only_invalid.headline() == "FAILED: does not validate its input"


def test_a_scaled_down_pass_is_underpowered_unless_min_power_accepts_it(vectors: VectorSet) -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    quick = run_check(impl, vectors, only=["stat_verdict_law_k1"], scale=0.05)
    assert quick.exit_status == 3 and not quick.passed and quick.headline().startswith("INCONCLUSIVE: underpowered")
    assert quick.as_json()["underpowered"] == ["stat_verdict_law_k1"] and "--min-power" in quick.claim()
    accepted = run_check(impl, vectors, only=["stat_verdict_law_k1"], scale=0.05, min_power=0.0)
    assert accepted.exit_status == 0 and "accepted by --min-power 0" in accepted.claim()
    reread = CheckReport.from_json(quick.as_json())
    assert reread.exit_status == 3 and reread.min_power is None
    strict = run_check(impl, vectors, only=["stat_verdict_law_k1"], scale=0.05, min_power=0.5)
    assert strict.exit_status == 3


def test_in_ci_a_deterministic_failure_skips_the_statistics(
    vectors: VectorSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    def always_accept(p: object, q: object, drafts: list[int], uniforms: list[float]) -> tuple[int, int, str]:
        return (len(drafts), 0, "bonus")

    monkeypatch.setenv("CI", "true")
    assert not ci_keeps_going()
    report = verispec.check(
        always_accept, batch_verifier=None, only=["contract", "stat_verdict_law_k1"], warn=lambda _m: None
    )
    stat = next(p for p in report.properties if p.name == "stat_verdict_law_k1")
    assert stat.status == "skipped" and "contract (deterministic) already failed" in stat.detail
    monkeypatch.setenv("CI", "")
    assert ci_keeps_going()


def test_a_python_verifier_without_a_batch_form_is_warned(vectors: VectorSet) -> None:
    assert slow_path_warning(True, False, None) is not None and "--batch-verifier" in str(
        slow_path_warning(True, False, None)
    )
    assert slow_path_warning(True, True, None) is None and slow_path_warning(False, False, None) is None
    assert slow_path_warning(True, False, ["contract"]) is None  # nothing slow to draw
    seen: list[str] = []
    verispec.check(verify_sampled, only=["contract"], warn=seen.append)
    assert seen == []
    verispec.check(verify_sampled, only=["stat_verdict_law_k1"], scale=0.01, min_power=0, warn=seen.append)
    assert len(seen) == 1


def test_an_expensive_test_does_not_hold_the_cheap_ones_back() -> None:
    """After the first round (every test's first look, untimed) the cheapest next look goes first."""
    import time
    from collections.abc import Sequence

    from verispec.spec.properties import STAT_DESIGNS
    from verispec.spec.sequential import Counts, SequentialTest, StatDesign, run_interleaved, schedule

    order: list[str] = []
    slow_name = "stat_verdict_law_k1"

    def draw(design: StatDesign, blocks: Sequence[int], size: int) -> list[Counts]:
        order.append(design.name)
        if design.name == slow_name:
            time.sleep(0.002)  # the expensive test: far more time per draw
        return [np.round(design.probs * size).astype(np.int64) for _ in blocks]

    names = [slow_name, "stat_verdict_law_k2"]
    tests = [SequentialTest(STAT_DESIGNS[n](), schedule(STAT_DESIGNS[n](), 0.01)) for n in names]
    run_interleaved(tests, draw)
    assert order[:2] == names  # round 1: in the given order
    second_round = order[2:4]
    assert second_round == ["stat_verdict_law_k2", slow_name]


def test_the_summary_states_the_design_power_and_reach(vectors: VectorSet) -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    summary = run_check(impl, vectors, only=["stat_verdict_law_k1"], scale=0.05, min_power=0).summary()
    assert "design: protocol (bit-exact replay and law), scale 0.05, 1 statistical test(s) at N = " in summary
    assert "power reached 0.0016 (needed 0)" in summary and "false alarms <= 0.0001" in summary
    assert "sees: the verdict law" in summary and "cannot see: rows or drafts the suite does not draw" in summary


def test_workers_draw_the_default_runs_statistics(vectors: VectorSet) -> None:
    """``--workers N`` without ``--sequential``: the statistics still go to the workers' draw (the
    fixed-N path draws in this process only, so N workers used to leave N - 1 cores idle). The
    run is then group-sequential: the same tests at their final look's N, or an earlier rejection."""
    from collections.abc import Sequence

    from verispec.spec.sequential import Counts, StatDesign, serial_draw

    drawn: list[str] = []
    serial = serial_draw(verify_sampled_batch, 7)

    def draw(design: StatDesign, blocks: Sequence[int], size: int) -> list[Counts]:
        drawn.append(design.name)
        return serial(design, blocks, size)

    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    only = ["stat_verdict_law_k1"]
    report = run_check(impl, vectors, only=only, scale=0.01, min_power=0, draw=draw, parallel=2, seed=7)
    assert report.passed and report.sequential and set(drawn) == set(only), report.summary()
    alone = run_check(impl, vectors, only=only, scale=0.01, min_power=0, sequential=True, seed=7)
    assert [(p.n, p.detail) for p in report.properties] == [(p.n, p.detail) for p in alone.properties]


def test_a_test_passes_at_the_look_that_first_has_its_designs_power() -> None:
    """Every designed test's schedule: no look before the last has power 0.99 against the design's
    TV at that look's alpha, the last one has it, and the last look's N is the design's N (within
    one block, or one hundred draws a block where blocks are whole hundreds); the alphas spent sum
    to the test's line of the budget, so passing there (or stopping earlier) keeps the false-alarm
    level."""
    import math

    from verispec.spec.properties import STAT_DESIGNS
    from verispec.spec.sequential import LOOKS
    from verispec.spec.statistics import POWER, power_of, required_sample_size

    for name, make in sorted(STAT_DESIGNS.items()):
        design = make()
        plan = schedule(design)
        powers = [power_of(plan.samples(j), design.df, plan.alphas[j], design.tv) for j in range(len(plan.looks))]
        assert max(powers[:-1]) < POWER <= powers[-1], (name, powers)
        needed = required_sample_size(design.df, plan.alphas[-1], design.tv)
        rounding = plan.blocks * (100 if len(plan.looks) == LOOKS else 1)
        assert needed <= plan.samples(len(plan.looks) - 1) < needed + rounding, name
        assert math.fsum(plan.alphas) == pytest.approx(design.alpha, rel=1e-12), name
