"""`verispec check-decoder` sized for CI: the first-m test first, a budget-led design, progress lines.

On the tiny synthetic llama of tests/test_check_decoder_depth_cli.py (322 ids, one layer), so the
command's tokenizer, EOG ids and reference forward all run in seconds.

- A decoder whose bug moves the law of its first tokens is rejected in seconds in the default
  (depth) mode: the first-m test runs before the depth test, on 10% of the prompt's alpha. The
  mutants' first-m chi-square p-values are 1e-7 .. 1e-15 against a level of 1e-4, and each
  emits tokens the target cannot at once or moves the cell law by more than TV 0.2 (power 0.99),
  so a pass is a miss of the design. ``--tv 0.05 --budget 30`` is today's default design with a
  stop: without the first-m test the run ends inside the budget with no first-m verdict.
- A budget-led run (``--budget`` without ``--tv``) states the TV its budget affords up front (the
  design line on stderr, before the first block) and in the verdict, text and JSON; with ``--tv``
  the budget stays a stop (the verdict's TV is the one given, not budget-led).
- Progress: whole lines on stderr with ``CI=true`` and no terminal (capsys is none), ticks of
  tokens judged / design, looks done, elapsed and projected remaining.

Alpha: our decode loop must pass (the ``check_decoder_ci`` line of spec.statistics.ALPHA_BUDGET,
1e-9, given as the run's alpha; the command splits it between its first-m and depth tests).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.synthetic import Variant, write_synthetic
from verispec import cli
from verispec.progress import PeriodicLines
from verispec.spec.decoder.depth.first_m import FIRST_M_SHARE, split_alpha
from verispec.spec.decoder.depth.sizing import TV_CEILING, TV_FLOOR, smallest_tv, stated_tv
from verispec.spec.statistics import ALPHA_BUDGET, POWER

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)
PASS_ALPHA = ALPHA_BUDGET["check_decoder_ci"]
# Wall seconds a first-cycle bug may take to be rejected: the first-m test draws 1,000 samples of
# 3 tokens (about 4 s on a loaded 2-core machine); the rest is load headroom, far below the depth
# design's minutes.
SECONDS = 30.0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ci") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def run(tiny_model: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object], str, float]:
    began = time.monotonic()
    status = cli.main(["check-decoder", "--model", str(tiny_model), "--prompt", "the model", "--json", *extra])
    seconds = time.monotonic() - began
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err, seconds


@pytest.mark.parametrize("name", ["draft_q_from_wrong_processors", "bonus_from_wrong_row"])
def test_a_first_token_bug_fails_in_seconds_in_the_default_mode(
    name: str, tiny_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    status, report, err, seconds = run(tiny_model, capsys, "--mutant", name, "--tv", "0.05", "--budget", "30")
    result = report["results"][0]  # type: ignore[index]
    assert status == 1 and result["mode"] == "depth" and result["state"] == "failed", result
    assert result["first_m"]["passed"] is False and result["first_m"]["alpha"] == pytest.approx(1e-3 * FIRST_M_SHARE)
    assert "first-m test" in result["where"] and "the depth test was not run" in result["detail"]
    assert seconds < SECONDS, f"{name} took {seconds:.1f} s"
    assert "first-m test FAILED" in err


def cpu_clock() -> SimpleNamespace:
    """The ``time`` module as a module sees it, its clocks reading this process's CPU time."""
    clock = SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.monotonic = clock.perf_counter = time.process_time
    return clock


def test_a_budget_led_run_states_its_tv_up_front_and_in_the_verdict(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our decode loop, budget-led (8 s a prompt, TV on every position, generations of 16):
    the design line names the TV before the first tick, the verdict and its JSON carry the same
    TV, the design fits what the budget afforded, and it passes at power 0.99.

    The command's clocks (the first-m test's seconds taken off the budget, the pilot's timing, the
    budget's end) read this process's CPU time here, not the wall clock: the budget-led path is the
    same, only what a second affords no longer depends on the machine's load. So 8 CPU seconds
    afford a design of ~6,000 tokens (TV ~0.055, measured) on any machine, where 40 wall seconds
    afforded whatever share of a core the machine gave (~27 CPU s on an idle one, ~11 on a busy one).
    Every assertion holds for any budget whose design is below the TV ceiling; none needs the
    larger design (its pass at power 0.99 is the design's own statement at whatever TV it states)."""
    from verispec.decoder import api
    from verispec.spec.decoder.depth import law

    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(law, "time", cpu_clock())
    monkeypatch.setattr(api, "time", cpu_clock())
    status, report, err, _ = run(
        tiny_model,
        capsys,
        "--ours",
        "--depth",
        "16",
        "--fraction",
        "1",
        "--budget",
        "8",
        "--alpha",
        str(PASS_ALPHA),
        "--progress-every",
        "0.01",
    )
    result = report["results"][0]  # type: ignore[index]
    print(err)
    assert status == 0 and result["passed"] and result["budget_led"] is True, result["detail"]
    tv = result["tv"]
    assert 0 < tv < TV_CEILING and result["power"] >= POWER
    assert result["design_tokens"] <= result["affordable_tokens"]
    assert f"vs TV {tv} (budget-led" in result["detail"] and result["first_m"]["passed"] is True
    lines = err.splitlines()
    design = next(i for i, line in enumerate(lines) if "design:" in line)
    assert f"TV {tv} is the smallest deviation detectable there" in lines[design]
    ticks = [i for i, line in enumerate(lines) if re.search(r"depth: [\d,]+ / [\d,]+ tokens judged", line)]
    assert ticks and min(ticks) > design  # the design comes up front, the ticks after it
    assert all("looks" in lines[i] and "elapsed" in lines[i] and "projected remaining" in lines[i] for i in ticks)
    assert any(line.startswith("'the model': pilot: 1 generation,") for line in lines[:design])


def test_an_explicit_tv_keeps_the_budget_a_stop(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, report, err, _ = run(tiny_model, capsys, "--ours", "--depth", "8", "--tv", "0.05", "--budget", "0.001")
    result = report["results"][0]  # type: ignore[index]
    assert (status, result["state"], result["budget_led"], result["tv"]) == (3, "inconclusive", False, 0.05)
    assert "stops it first" in err  # the design line says the budget is shorter than the projection


def test_progress_every_zero_prints_no_progress(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err, _ = run(tiny_model, capsys, "--mutant", "bonus_from_wrong_row", "--progress-every", "0")
    assert status == 1 and err == ""


def test_progress_every_must_be_a_number_of_seconds(tiny_model: Path) -> None:
    assert cli.main(["check-decoder", "--model", str(tiny_model), "--ours", "--progress-every", "-1"]) == 2


# --- the pieces ------------------------------------------------------------------------------------


def test_the_alpha_split_adds_up() -> None:
    first, rest = split_alpha(1e-3)
    assert first == pytest.approx(1e-4) and math.fsum((first, rest)) == pytest.approx(1e-3, rel=1e-15)


def test_smallest_tv_finds_the_affordable_tv_of_a_monotone_design() -> None:
    """N = c / tv^2 (the designs' scaling): the TV found affords its tokens, one search step
    less would not, and a budget below N(1) is None."""
    c = 5_000.0

    def tokens(tv: float) -> float:
        return c / tv**2

    for affordable in (6_000.0, 50_000.0, 3e6):
        tv = smallest_tv(tokens, affordable)
        assert tv is not None and tokens(tv) <= affordable
        assert tokens(tv / 1.05) > affordable  # within the search ratio (3%) and the rounding up (<1%)
    assert smallest_tv(tokens, c - 1) is None
    floor = smallest_tv(tokens, c / TV_FLOOR**2)
    assert floor is not None and TV_FLOOR <= floor <= TV_FLOOR * 1.05


def test_stated_tv_rounds_up_to_three_digits() -> None:
    assert stated_tv(0.031841) == pytest.approx(0.0319) and stated_tv(0.5) == 0.5 and stated_tv(1.7) == TV_CEILING
    assert all(stated_tv(x) >= x for x in np.geomspace(1e-3, 1, 50))


def test_periodic_lines_pass_milestones_and_throttle_ticks() -> None:
    now = [0.0]
    shown: list[str] = []
    lines = PeriodicLines(shown.append, 10.0, clock=lambda: now[0])
    lines("design", True)
    lines("tick 1", False)  # 0 s after the last line: held back
    now[0] = 11.0
    lines("tick 2", False)
    now[0] = 12.0
    lines("tick 3", False)
    lines("verdict", True)
    assert shown == ["design", "tick 2", "verdict"]


def test_a_passing_reports_summary_states_the_design_power_and_reach() -> None:
    """The summary of a PASS carries the prompt's line (its design and power), what the mode sees
    and cannot see, and the verdict last; failing prompts come first."""
    from verispec.decoder.report import REACH, DecoderReport, PromptOutcome

    detail = "[PASS] 280 tokens in 35 generations; design 276 tokens for power 0.99 vs TV 0.2 on 100% of positions"
    report = DecoderReport("tiny.gguf", [PromptOutcome("the model", "depth", True, detail, 3.0)], 3.0)
    lines = report.summary().splitlines()
    assert lines[0] == f"PASS  'the model': {detail}" and "power 0.99 vs TV 0.2" in lines[0]
    assert lines[1] == f"depth: {REACH['depth']}" and "cannot see" in lines[1]
    assert lines[-1] == "PASSED  (1 prompts, 3.0s, tiny.gguf)"
    failed = PromptOutcome("other", "greedy", False, "differ at step 1", 1.0)
    report.results.append(failed)
    assert report.summary().splitlines()[0] == failed.line() and f"greedy: {REACH['greedy']}" in report.summary()
