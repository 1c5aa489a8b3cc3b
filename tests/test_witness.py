"""`verispec witness`: the station shows TV = 0 with verification and repair, and the
falsification without either; bad flags are one-line errors. Driven through verispec.cli.main."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest

from verispec.cli import main
from verispec.spec import exact
from verispec.spec.statistics import ALPHA_BUDGET
from verispec.spec.witness import WitnessConfig, emitted_law, predicted_speedup, run_witness, toy_laws


def run_json(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict[str, Any]]:
    status = main(["witness", "--json", *flags])
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return status, report


def test_protocol_holds_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    """Default station (V = 8, k = 4, A = 0.8, 2,000 steps). The chi-square of the ~8,100 emitted
    tokens against p uses alpha = 5e-5 (the witness line of the budget); its power against a
    TV bias of 0.005 is only ~3e-4 at this N (it is evidence, the exact TV is the proof), and
    ~0.69 against TV 0.03."""
    status, report = run_json(capsys)
    assert status == 0
    invariant = report["invariant"]
    assert invariant["holds"] and invariant["tv_exact"] == "0" and invariant["tv"] == 0.0
    assert (
        invariant["chi_square"]["consistent"] and invariant["chi_square"]["alpha"] == ALPHA_BUDGET["witness_chi_square"]
    )
    totals = report["totals"]
    assert totals["target_passes"] == 2000 and totals["draft_passes"] == 8000
    assert totals["tokens"] == totals["accepted_drafts"] + totals["repairs"] + totals["bonuses"]
    assert totals["repairs"] + totals["bonuses"] == 2000
    # tokens per step has sd <= (k+1)/2 = 2.5, so its mean over 2,000 steps has sd <= 0.056
    # (1.4% of ~4): 7% is five standard deviations.
    speed = report["speedup"]
    assert speed["measured"] == pytest.approx(speed["predicted"], rel=0.07)


@pytest.mark.parametrize("flag", ["--no-repair", "--no-verify"])
def test_falsification_is_shown(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    status, report = run_json(capsys, flag)
    assert status == 1
    invariant = report["invariant"]
    assert not invariant["holds"] and invariant["tv"] > 0.01
    assert not invariant["chi_square"]["consistent"]


def test_text_output_shows_the_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["witness", "--steps", "300", "--show", "12"]) == 0
    text = capsys.readouterr().out
    assert "first rejection" in text and "repair" in text and "bonus" in text
    assert "predicted (1-a^(k+1))/((1-a)(kC+1))" in text
    assert "= 0 (exactly 0)" in text and "verdict: HOLDS" in text
    assert main(["witness", "--steps", "300", "--no-repair"]) == 1
    assert "NO repair" in capsys.readouterr().out


def test_same_seed_same_report(capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json(capsys, "--steps", "200", "--seed", "5")
    second = run_json(capsys, "--steps", "200", "--seed", "5")
    other = run_json(capsys, "--steps", "200", "--seed", "6")
    assert first == second and first != other


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--vocab", "1"], "--vocab"),
        (["--vocab", "abc"], "--vocab"),
        (["--agreement", "1.5"], "--agreement"),
        (["--agreement", "nan"], "--agreement"),
        (["--k", "0"], "--k"),
        (["--k", "2.5"], "--k"),
        (["--draft-cost", "-1"], "--draft-cost"),
        (["--draft-cost", "inf"], "--draft-cost"),
        (["--steps", "0"], "--steps"),
        (["--seed", "-3"], "--seed"),
    ],
)
def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], flags: list[str], needle: str) -> None:
    assert main(["witness", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err and captured.err.startswith("verispec: error:")


def test_predicted_speedup_formula() -> None:
    assert predicted_speedup(0.5, 2, 0.0) == pytest.approx((1 - 0.125) / 0.5)
    assert predicted_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    assert predicted_speedup(1.0, 4, 0.1) == pytest.approx(5 / 1.4)


def test_toy_laws_are_exact_rows_with_the_asked_agreement() -> None:
    p, q = toy_laws(8, 0.8, 0)
    assert sum(p) == 1 and sum(q) == 1
    assert all(v.denominator <= 2**20 for v in p + q)
    assert toy_laws(8, 1.0, 0)[1] == p  # full agreement: the draft is the target


def test_exact_emitted_laws_match_hand_derivations() -> None:
    """First-token laws derived by hand: the protocol gives p; without repair a rejection
    re-drafts, so the first token is an accepted draft: min(p, q) / sum min(p, q); without
    verification it is the first draft: q."""
    p, q = toy_laws(5, 0.6, 3)
    overlap = [min(a, b) for a, b in zip(p, q)]
    beta = sum(overlap, Fraction(0))
    assert emitted_law(p, q, 3, "protocol", m=1) == {(t,): v for t, v in enumerate(p) if v}
    assert emitted_law(p, q, 3, "no-repair", m=1) == {(t,): v / beta for t, v in enumerate(overlap) if v}
    assert emitted_law(p, q, 3, "no-verify", m=1) == {(t,): v for t, v in enumerate(q) if v}
    assert emitted_law(p, q, 3, "protocol", m=3) == exact.product_law([p, p, p])


def test_library_report_counts_agree_with_config() -> None:
    report = run_witness(WitnessConfig(vocab=3, agreement=0.0, k=1, steps=100, show=3))
    assert report.holds and len(report.evidence) == 3
    assert report.target_passes == 100 and report.draft_passes == 100
