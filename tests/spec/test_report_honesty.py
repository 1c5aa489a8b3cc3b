"""Reports that say what a run showed and no more.

- an undecided test never shows power 1, an undecided run never reads "lossless";
- a verifier that accepts malformed input "does not validate its input", apart from law failures,
  with every failing case;
- each test's time is its own (not the run's total);
- the progress line appears on a terminal only, never in CI or a pipe.
Sample sizes: the budgets are sample counts (no wall time); the statistical tests that pass run at
1% of their N (their verdict is not what is tested here).
"""

from __future__ import annotations

import io
import math

from verispec.progress import ProgressLine, wanted
from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import PythonImplementation, run_check
from verispec.spec.properties import STAT_DESIGNS
from verispec.spec.report import CheckReport, PropertyOutcome, format_outcome
from verispec.spec.sequential import Budget, schedule
from verispec.spec.vectors import build_vectors

VECTORS = build_vectors(2, 1)


def test_an_undecided_test_never_shows_power_one() -> None:
    almost = PropertyOutcome("stat_x", "inconclusive", 10, 1e-4, 0.99999, "look 6/7", 1.0)
    line = format_outcome(almost)
    assert "power=1.0000" not in line and "reached=0.9999 (undecided)" in line
    passed = PropertyOutcome("stat_x", "passed", 10, 1e-4, 0.99996, "look 7/7", 1.0)
    assert "power=0.9999" in format_outcome(passed)  # floored, never rounded up to 1


def test_an_undecided_run_reads_inconclusive_not_lossless() -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    design = STAT_DESIGNS["stat_verdict_law_k1"]()
    report = run_check(
        impl, VECTORS, only=["stat_verdict_law_k1"], budget=Budget(samples=schedule(design).samples(0) - 1)
    )
    (outcome,) = report.statistical()
    assert outcome.status == "inconclusive" and outcome.power == 0.0
    assert report.claim().startswith("inconclusive: 1 statistical test(s) undecided")
    assert "lossless" not in report.claim() and report.headline().startswith("INCONCLUSIVE")
    assert report.exit_status == 3 and report.as_json()["passed"] is False


def test_a_verifier_that_does_not_validate_its_input_is_reported_apart_with_every_case() -> None:
    def accepts_anything(p: object, q: object, drafts: list[int], uniforms: list[float]) -> tuple[int, int, str]:
        return (0, 0, "repair")  # a verdict for every input, malformed or not

    report = run_check(PythonImplementation(accepts_anything), VECTORS, only=["contract"])
    (contract,) = report.failed
    assert report.headline() == "FAILED: does not validate its input"
    assert report.claim().startswith("does not validate its input") and "not lossless" not in report.claim()
    cases = contract.detail.split(": ", 1)[1].split("; ")
    assert contract.detail.startswith("13 of 14 cases fail") and len(cases) == 13  # every malformed case
    assert all("accepted without VerificationError" in case for case in cases)


def test_each_test_shows_its_own_time() -> None:
    impl = PythonImplementation(verify_sampled, batch=verify_sampled_batch)
    only = ["stat_verdict_law_k1", "stat_lossless_ar_k1"]
    lines: list[str] = []
    report = run_check(impl, VECTORS, only=only, scale=0.01, sequential=True, progress=lines.append)
    times = [p.seconds for p in report.statistical()]
    assert math.fsum(times) <= report.seconds  # two own times, not the total twice
    assert {line.split(":")[0] for line in lines} == set(only)  # progress after every group of blocks


def test_the_progress_line_is_for_terminals_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wanted(Terminal(), {}) and not wanted(Terminal(), {"CI": "true"}) and not wanted(io.StringIO(), {})
    out = Terminal()
    line = ProgressLine(out, interval=0.0)
    line("stat_x: 1 blocks")
    line.close()
    assert out.getvalue().startswith("\rstat_x: 1 blocks") and out.getvalue().endswith("\r")


def test_a_shard_that_fails_says_passed_false_with_exit_1() -> None:
    report = CheckReport("x", {}, 1.0, shard=(2, 8))
    report.properties.append(PropertyOutcome("stat_x", "failed", 100, 1e-6, 0.5, "shard 2/8 rejected", 0.1))
    assert report.exit_status == 1 and report.as_json()["passed"] is False
    report.properties[0] = PropertyOutcome("stat_x", "counted", 100, 0.0, 0.0, "shard 2/8: drawn", 0.1)
    assert report.exit_status == 0 and report.as_json()["passed"] is True
