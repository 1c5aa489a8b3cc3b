"""The offline held-out diagnostics of lab.measure_early_exit / early_exit_shift, on synthetic records.

No model: records are built by hand so the right answer is known exactly.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from lab import measure_early_exit
from lab.early_exit_shift import compare, folds_of, main, markdown, of_prompts, renumbered, with_hand_written
from lab.measure_early_exit import load_records, save_records, verdict
from verispec.reference.calibration import Records

MEASUREMENTS = Path(__file__).resolve().parent.parent / "lab" / "measurements"

KINDS = ("chat", "code")


def synthetic(n_prompts: int, steps: int, margin_of_flip: float, seed: int) -> Records:
    """One depth; per kind, prompts of ``steps`` steps; a step flips iff its margin is below
    ``margin_of_flip`` (margins uniform on [0, 1], seeded)."""
    rng = np.random.default_rng(seed)
    n = n_prompts * len(KINDS) * steps
    margins = rng.uniform(0.0, 1.0, size=(1, n)).astype(np.float32)
    flips = margins < np.float32(margin_of_flip)
    prompt = np.repeat(np.arange(n_prompts * len(KINDS), dtype=np.int64), steps)
    kinds = [KINDS[int(p) % len(KINDS)] for p in prompt]
    zeros = np.zeros((1, n), dtype=np.float32)
    return Records((3,), zeros, zeros, margins, flips, kinds, prompt)


def test_folds_are_seeded_balanced_within_each_kind_and_cover_every_prompt() -> None:
    records = synthetic(30, 4, 0.3, seed=1)
    fold = folds_of(records, 6)
    assert np.array_equal(fold, folds_of(records, 6)) and (fold >= 0).all()
    for kind in KINDS:
        ids = sorted({int(p) for p, k in zip(records.prompt, records.kinds) if k == kind})
        assert np.bincount(fold[ids], minlength=6).tolist() == [5] * 6
    part = renumbered(of_prompts(records, fold != 0))
    assert part.n_prompts == 50 and sorted(set(part.prompt.tolist())) == list(range(50))


def test_a_shifted_hand_written_set_is_seen_and_an_exchangeable_one_is_not(tmp_path: Path) -> None:
    cal = synthetic(60, 8, 0.3, seed=2)
    same = synthetic(30, 8, 0.3, seed=3)  # the same law as calibration
    shifted = synthetic(30, 8, 0.6, seed=4)  # flips at higher margins: the gate admits flips
    q = Fraction(4, 5)
    for kind, r in compare(cal, same, q, 4, 6).items():
        assert abs(r["hand"] - r["generated"]) < 4 * np.hypot(r["hand_se"], r["generated_se"]) + 1e-9, (kind, r)
    for kind, r in compare(cal, shifted, q, 4, 6).items():
        # margins in (0.3, 0.6) flip for this set only: the calibrated threshold (~0.3) admits them
        assert r["hand"] > r["generated"] + 4 * np.hypot(r["hand_se"], r["generated_se"]), (kind, r)
    # every hand-written prompt is served once, out of fold; with half the shifted set in
    # calibration (15 of 75 prompts per kind) the threshold moves up and the flips go down
    mixed = with_hand_written(cal, shifted, q, 4)
    plain = compare(cal, shifted, q, 4, 6)
    for kind, r in mixed.items():
        assert r["prompts"] == 30 and r["hand_mixed"] < plain[kind]["hand"], (kind, r, plain[kind])
    # calibrated on the shifted set's other fold alone (exchangeable with the served fold by
    # construction), the flips come back to the level α = 0.2 promises
    for kind, r in with_hand_written(cal, shifted, q, 4, generated=False).items():
        assert r["hand_mixed"] < 0.2 + 2 * r["hand_mixed_se"] < plain[kind]["hand"], (kind, r)
    # the saved records round-trip exactly
    save_records(tmp_path / "r.npz", {"cal_own": cal})
    back = load_records(tmp_path / "r.npz", "cal_own")
    assert back.depths == cal.depths and back.kinds == cal.kinds
    assert np.array_equal(back.margins, cal.margins) and np.array_equal(back.flips, cal.flips)
    assert np.array_equal(back.prompt, cal.prompt)


def test_verdicts() -> None:
    low = [0.0, 0.05, 0.0, 0.1, 0.0, 0.0] * 5
    high = [0.5, 0.3, 0.4, 0.6, 0.2, 0.5] * 5
    assert verdict(low, 0.2, 4)[2] == "within (shown)"  # its 95% upper bound is below 0.2
    assert verdict(low, 0.1, 4)[2] == "within"  # not rejected, but 30 prompts cannot show <= 0.1
    assert verdict(high, 0.1, 4)[2].startswith("**exceeds** (rejected at 0.0125")


def test_a_run_calibrated_on_the_hand_written_pool_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comparison's columns are generated-vs-hand-written: a run whose calibration prompts were
    the hand-written pool would be mislabelled, so it is refused before anything is read."""
    run = tmp_path / "run.json"
    run.write_text('{"calibration_source": "hand", "gates": []}')
    assert main(["--from-json", str(run), "--records", str(tmp_path / "none.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--prompts generated" in err


def test_the_comparison_saves_its_numbers_and_prints_them_as_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json`` saves what the table shows (the docs' results pages are generated from it); the
    printed table is :func:`markdown` of exactly that JSON, one row per head, depth set and level."""
    cal, held = synthetic(12, 4, 0.3, seed=5), synthetic(6, 4, 0.3, seed=6)
    records = tmp_path / "run.npz"
    save_records(records, {"cal_own": cal, "held_own": held, "cal_lens": cal, "held_lens": held})
    run = tmp_path / "run.json"
    run.write_text(
        '{"model": "synthetic", "calibration_source": "generated", "n_layer": 4, "depth_sets": [[3]], '
        '"gates": [{"q": "0.8"}, {"q": "0.9"}]}'
    )
    out = tmp_path / "shift.json"
    assert main(["--from-json", str(run), "--records", str(records), "--folds", "3", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert capsys.readouterr().out == markdown(saved) + "\n"
    assert saved["kinds"] == list(KINDS) and saved["folds"] == 3
    assert [(r["head"], r["depths"], round(r["alpha"], 9)) for r in saved["rows"]] == [
        (h, [3], a) for h in ("own", "lens") for a in (0.1, 0.2)
    ]
    assert all(set(r["generated_vs_hand"]) == set(KINDS) for r in saved["rows"])


def test_measure_early_exit_writes_json_to_the_lab_never_a_readme(capsys: pytest.CaptureFixture[str]) -> None:
    """The run's JSON goes to lab/measurements/ under the saved runs' names; no option rewrites a
    README; a saved run renders again without the model."""
    assert measure_early_exit.default_json_path("smollm2-135m", "hand") == MEASUREMENTS / "early_exit_smollm2-135m.json"
    assert (
        measure_early_exit.default_json_path("gemma3-270m", "generated")
        == MEASUREMENTS / "early_exit_gemma3-270m_generated.json"
    )
    with pytest.raises(SystemExit) as refused:
        measure_early_exit.main(["--write-readme", "README.md"])
    assert refused.value.code == 2 and "--write-readme" in capsys.readouterr().err
    saved = MEASUREMENTS / "early_exit_smollm2-135m.json"
    assert measure_early_exit.main(["--from-json", str(saved)]) == 0
    assert capsys.readouterr().out == measure_early_exit.markdown(json.loads(saved.read_text())) + "\n"


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_saved_comparisons_name_their_sources_and_render(model: str) -> None:
    """lab/measurements/early_exit_shift_MODEL.json (``--json`` of a run on the saved generated-prompt
    run): its sources are saved beside it, and it renders one table row per head, depth set and level."""
    saved = json.loads((MEASUREMENTS / f"early_exit_shift_{model}.json").read_text())
    root = MEASUREMENTS.parent.parent
    assert (root / saved["from_json"]).is_file() and (root / saved["records"]).is_file()
    run = json.loads((root / saved["from_json"]).read_text())
    levels = {g["q"] for g in run["gates"]}
    assert len(saved["rows"]) == 2 * len(run["depth_sets"]) * len(levels)  # own and lens heads
    table = markdown(saved).splitlines()
    assert len(table) == 4 + len(saved["rows"]) and table[0].startswith(f"**{run['model']}**")


def test_depth_sets_parse_or_default_to_the_default_depths_and_the_deepest_alone() -> None:
    from verispec.reference.calibration import default_depths

    assert measure_early_exit.depth_sets("8,12;24", 30) == [(8, 12), (24,)]
    default = default_depths(30)
    assert measure_early_exit.depth_sets(None, 30) == [default, (default[-1],)]
