"""Calibration: records along greedy trajectories, quantiles and thresholds, the artifact, the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reference.calibration import (
    Calibration, Records, build, calibrate, default_depths, greedy_trajectory, score, split_for_lens,
)
from reference.certificate import halfrange_residual, supnorm_residual, top2
from reference.errors import CalibrationError
from reference.model import Model
from tests.tolerances import assert_within, forward_spread

ROOT = Path(__file__).resolve().parents[1]


def tiny(tiny_gguf: Any) -> Model:
    return Model.load(tiny_gguf("llama", n_layer=6, n_vocab=64, context_length=128, tied=False, seed=5))


def test_trajectory_is_the_full_models_greedy_decode(tiny_gguf: Any) -> None:
    model = tiny(tiny_gguf)
    traj = greedy_trajectory(model, [3, 1, 4], 6, [2, 4], kind="prose")
    tokens = [int(np.argmax(row)) for row in traj.full_logits[:-1]]
    seq = [3, 1, 4] + tokens
    full = model.forward(seq, model.new_cache(len(seq)), return_hidden=True)
    assert full.hidden is not None
    # the trajectory decodes token by token, the check runs one batched pass: two float32
    # evaluations of one forward, each element within its derived tolerance (tests/tolerances.py)
    spread = forward_spread(model, tuple(seq))
    assert spread.logits is not None
    assert_within(traj.full_logits, full.logits[2:], spread.logits.tolerance[2:], "trajectory logits")
    assert_within(traj.hidden, full.hidden[[2, 4], 2:], spread.hidden.tolerance[[2, 4], 2:], "exit hidden states")
    assert_within(traj.final, full.hidden[6, 2:], spread.hidden.tolerance[6, 2:], "final hidden states")
    assert traj.prompt_hidden is not None and traj.prompt_hidden.shape == (2, 2, model.config.n_embd)


def test_scores_are_the_certificate_functions_row_by_row(tiny_gguf: Any) -> None:
    model = tiny(tiny_gguf)
    traj = greedy_trajectory(model, [7, 8], 5, [3], kind="code")
    rec = score(model, [traj], [3], None)
    assert rec.n == 5 and rec.kinds == ["code"] * 5
    exit_rows = model.head(traj.hidden[0])  # batched, as calibration evaluates the head
    for i in range(5):
        d = exit_rows[i]
        t = traj.full_logits[i]
        assert rec.supnorm[0, i] == np.float32(supnorm_residual(d, t))
        assert rec.halfrange[0, i] == np.float32(halfrange_residual(d, t))
        assert rec.margins[0, i] == np.float32(top2(d)[1])
        assert rec.flips[0, i] == (top2(d)[0] != int(np.argmax(t)))
        assert rec.supnorm.dtype == np.float32 and rec.halfrange.dtype == np.float32


def synthetic_records(n: int = 199, seed: int = 0) -> Records:
    rng = np.random.default_rng(seed)
    k = 2
    return Records(
        (3, 5),
        rng.exponential(10, (k, n)).astype(np.float32),
        rng.exponential(5, (k, n)).astype(np.float32),
        rng.exponential(3, (k, n)).astype(np.float32),
        rng.random((k, n)) < 0.3,
        ["chat"] * n,
    )


def test_build_uses_bonferroni_quantiles_and_crc_thresholds() -> None:
    rec = synthetic_records()
    cal = build(rec, q="0.9", model_sha256="a" * 64, model_name="m", n_layer=6)
    assert cal.q_layer == Fraction(19, 20)  # 1 - 0.1 / 2
    k = math.ceil(Fraction(200) * Fraction(19, 20))  # 190-th smallest of 199
    for i, d in enumerate(cal.depths):
        assert d.supnorm_quantile == float(np.sort(rec.supnorm[i])[k - 1])
        assert d.halfrange_quantile == float(np.sort(rec.halfrange[i])[k - 1])
        # CRC at alpha/K = 1/20: (flips admitted + 1)/200 <= 1/20 -> at most 9 admitted flips
        flipped = np.sort(rec.margins[i][rec.flips[i]])[::-1]
        assert d.margin_threshold == float(flipped[9])
        assert int(np.sum((rec.margins[i] > d.margin_threshold) & rec.flips[i])) == 9
        assert d.agreement == pytest.approx(float(np.mean(~rec.flips[i])))


def test_artifact_round_trip_is_exact_and_atomic(tmp_path: Path) -> None:
    rec = synthetic_records()
    rng = np.random.default_rng(1)
    from reference.early_exit import Lens

    lens = Lens((3, 5), rng.standard_normal((2, 4, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32))
    cal = build(rec, q="0.999", model_sha256="b" * 64, model_name="m.gguf", n_layer=6, lens=lens, n_lens=7, ridge=0.5)
    # 1/(n+1) > alpha/K: never admit; ceil((n+1) q') > n: Q = +inf
    assert all(math.isinf(d.margin_threshold) and math.isinf(d.halfrange_quantile) for d in cal.depths)
    path = tmp_path / "cal.json"
    cal.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json", "cal.lens.npz"]  # no temp files left
    raw = json.loads(path.read_text())
    assert raw["q"] == "999/1000" and raw["q_layer"] == "1999/2000" and raw["layers"] == [3, 5]
    assert raw["depths"][0]["margin_threshold"] == "inf"  # JSON has no infinities
    back = Calibration.load(path, "b" * 64)
    assert back.depths == cal.depths and back.q == cal.q and back.n == rec.n and back.ridge == 0.5
    assert back.lens is not None and np.array_equal(back.lens.weight, lens.weight)
    with pytest.raises(CalibrationError, match="not for the model"):
        Calibration.load(path, "c" * 64)
    (tmp_path / "cal.lens.npz").write_bytes(b"tampered")
    with pytest.raises(CalibrationError, match="does not match the sha256"):
        Calibration.load(path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "verispec-early-exit-calibration/1", "gate": "margin"}')
    with pytest.raises(CalibrationError, match="malformed"):
        Calibration.load(bad)
    bad.write_text("[1, 2")
    with pytest.raises(CalibrationError, match="cannot read"):
        Calibration.load(bad)
    with pytest.raises(CalibrationError, match="cannot write"):
        cal.save(tmp_path / "missing-dir" / "cal.json")


def test_calibrate_splits_prompts_and_checks_depths(tiny_gguf: Any) -> None:
    prompts = [("chat", [1, 2]), ("chat", [3]), ("code", [4, 5]), ("code", [6]), ("code", [7])]
    lens_split, cal_split = split_for_lens(prompts)
    assert lens_split == [("chat", [1, 2]), ("code", [4, 5]), ("code", [7])]
    assert cal_split == [("chat", [3]), ("code", [6])]
    assert default_depths(30) == (8, 12, 16, 20, 24)
    model = tiny(tiny_gguf)
    cal, rec = calibrate(model, prompts, model_sha256="d" * 64, model_name="t", depths=[2, 4], q="0.9", n_steps=4)
    assert cal.n == rec.n == 8 and cal.n_lens == 12 and cal.lens is not None
    assert cal.prompts == {"chat": 4, "code": 4}
    with pytest.raises(CalibrationError, match="must be non-empty and in 1..5"):
        calibrate(model, prompts, model_sha256="d" * 64, model_name="t", depths=[6], n_steps=2)


def verispec(*args: str) -> subprocess.CompletedProcess[str]:
    # one BLAS thread: on a shared 2-core runner, BLAS threads contending with others are slower
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "verispec", *args], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)


@pytest.mark.model
@pytest.mark.slow
def test_calibrate_cli_and_generate_with_early_exit(tmp_path: Path) -> None:
    """Real SmolLM2: a small calibration (4 prompts x 5 steps), then serve and audit with it; a
    calibration for another model is refused in one line."""
    out = tmp_path / "cal.json"
    done = verispec("calibrate", "--model", "smollm2-135m", "--max-prompts", "4", "--tokens-per-prompt", "5",
                    "--layers", "8,16,24", "--q", "0.9", "--out", str(out), "--report", str(tmp_path / "r.png"))
    assert done.returncode == 0, done.stderr
    assert "calibrate [" in done.stderr and "10/20 tokens" in done.stderr  # the progress bar
    raw = json.loads(out.read_text())
    assert raw["layers"] == [8, 16, 24] and raw["n"] == 10 and raw["n_lens"] == 10 and raw["lens"] is not None
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    gen = verispec("generate", "--model", "smollm2-135m", "--prompt", "The capital of France is", "--temperature", "0",
                   "--max-tokens", "6", "--early-exit", str(out), "--audit", "--json")
    assert gen.returncode == 0, gen.stderr
    result = json.loads(gen.stdout)
    ee = result["early_exit"]
    assert len(result["ids"]) == 6 and ee["audited"] == 5 and ee["flips"] is not None
    assert sum(ee["exit_histogram"].values()) == 6
    plain = verispec("generate", "--model", "smollm2-135m", "--prompt", "The capital of France is", "--temperature", "0",
                     "--max-tokens", "6", "--json")
    if ee["flips"] == 0:  # no flip: the served tokens are the full model's greedy tokens
        assert json.loads(plain.stdout)["ids"] == result["ids"]
    wrong = verispec("generate", "--model", "gemma3-270m", "--prompt", "x", "--temperature", "0", "--early-exit", str(out))
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "calibration is for model SmolLM2" in wrong.stderr
