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

from tests.support.calibration_records import synthetic_records
from tests.support.tolerances import assert_within, forward_spread
from verispec.reference.calibration import (
    FORMAT,
    Calibration,
    build,
    calibrate,
    default_depths,
    greedy_trajectory,
    score,
    split_for_lens,
)
from verispec.reference.certificate import halfrange_residual, supnorm_residual, top2
from verispec.reference.conformal import prompt_risk_threshold
from verispec.reference.early_exit import gate_admits
from verispec.reference.errors import CalibrationError
from verispec.reference.model import Model

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
    # evaluations of one forward, each element within its derived tolerance (tests/support/tolerances.py)
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


def test_build_calibrates_each_kind_over_its_prompts() -> None:
    """Pooled and per-kind thresholds are prompt-level risk control at alpha/K over each set of
    prompts (reference.conformal.prompt_risk_threshold, checked exactly in tests/spec)."""
    rec = synthetic_records(n_prompts=120, kinds=("chat", "code", "prose"))
    cal = build(rec, q="0.9", model_sha256="a" * 64, model_name="m", n_layer=6)
    assert cal.alpha_per_depth == Fraction(1, 20) and cal.min_prompts == 19 and cal.n_prompts == 120
    every = np.ones(rec.n, dtype=bool)
    for i, d in enumerate(cal.depths):
        assert d.margin_threshold == prompt_risk_threshold(rec.margins[i], rec.flips[i], rec.prompt, "0.1", 2)
        assert d.halfrange_quantile == prompt_risk_threshold(rec.halfrange[i], every, rec.prompt, "0.1", 2)
        assert d.supnorm_quantile == prompt_risk_threshold(rec.supnorm[i], every, rec.prompt, "0.1", 2)
        assert d.agreement == pytest.approx(float(np.mean(~rec.flips[i])))
    assert sorted(cal.kinds) == ["chat", "code", "prose"]
    code = rec.select("code")
    assert code.n_prompts == 40 and code.n == 200 and sorted(set(code.prompt.tolist())) == list(range(40))
    view = cal.for_kind("code")
    assert view.kind == "code" and view.n_prompts == 40 and view.refusal is None
    for i, d in enumerate(view.depths):
        assert d.margin_threshold == prompt_risk_threshold(code.margins[i], code.flips[i], code.prompt, "0.1", 2)
    # the claim, in exactly these words
    assert view.claim == "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable"


def test_a_kind_with_too_few_prompts_refuses_everything_and_says_so() -> None:
    rec = synthetic_records(n_prompts=30, kinds=("chat", "chat", "structured"))  # 10 structured prompts
    cal = build(rec, q="0.9", model_sha256="a" * 64, model_name="m", n_layer=6)  # needs 19 per kind
    chat, structured = cal.for_kind("chat"), cal.for_kind("structured")
    assert chat.refusal is None and any(math.isfinite(d.margin_threshold) for d in chat.depths)
    assert all(math.isinf(d.margin_threshold) and math.isinf(d.halfrange_quantile) for d in structured.depths)
    assert structured.refusal == (
        "prompt kind 'structured' has 10 calibration prompts; alpha = 1/10 over K = 2 depths needs at least 19: "
        "early exit admits nothing"
    )
    unknown = cal.for_kind("poetry")
    assert all(math.isinf(d.margin_threshold) for d in unknown.depths)
    assert unknown.refusal is not None and "'poetry' was not calibrated" in unknown.refusal
    margin = np.float32(1e30)  # even a huge margin is refused
    assert not any(gate_admits(structured, "margin", d, np.asarray([margin, 0.0], dtype=np.float32))[0] for d in (3, 5))


def test_artifact_round_trip_is_exact_and_atomic(tmp_path: Path) -> None:
    rec = synthetic_records(n_prompts=30, kinds=("chat", "code"))
    rng = np.random.default_rng(1)
    from verispec.reference.early_exit import Lens

    lens = Lens(
        (3, 5), rng.standard_normal((2, 4, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    )
    cal = build(rec, q="0.999", model_sha256="b" * 64, model_name="m.gguf", n_layer=6, lens=lens, n_lens=7, ridge=0.5)
    # (n+1) alpha/K < 1: never admit
    assert all(math.isinf(d.margin_threshold) and math.isinf(d.halfrange_quantile) for d in cal.depths)
    path = tmp_path / "cal.json"
    cal.save(path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and names[0] == "cal.json" and names[1].startswith("cal.lens.")  # no temp files left
    raw = json.loads(path.read_text())
    assert raw["q"] == "999/1000" and raw["alpha_per_depth"] == "1/2000" and raw["layers"] == [3, 5]
    assert raw["unit"] == "prompt" and raw["claim"].startswith("expected flip fraction of a new prompt")
    assert raw["depths"][0]["margin_threshold"] == "inf"  # JSON has no infinities
    assert raw["kinds"]["code"]["n_prompts"] == 15 and raw["kinds"]["code"]["admits"] is False
    back = Calibration.load(path, "b" * 64)
    assert back.depths == cal.depths and back.q == cal.q and back.n == rec.n and back.ridge == 0.5
    assert back.kinds == cal.kinds and back.n_prompts == 30
    assert back.lens is not None and np.array_equal(back.lens.weight, lens.weight)
    with pytest.raises(CalibrationError, match="not for the model"):
        Calibration.load(path, "c" * 64)
    (tmp_path / names[1]).write_bytes(b"tampered")
    with pytest.raises(CalibrationError, match="does not match the sha256"):
        Calibration.load(path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "gate": "margin"}))
    with pytest.raises(CalibrationError, match="malformed"):
        Calibration.load(bad)
    bad.write_text('{"format": "verispec-early-exit-calibration/1"}')
    with pytest.raises(CalibrationError, match="older, token-level calibration"):
        Calibration.load(bad)
    bad.write_text('{"format": "verispec-early-exit-calibration/2"}')
    with pytest.raises(CalibrationError, match="without its scores"):
        Calibration.load(bad)
    bad.write_text("[1, 2")
    with pytest.raises(CalibrationError, match="cannot read"):
        Calibration.load(bad)
    with pytest.raises(CalibrationError, match="does not exist"):
        cal.save(tmp_path / "missing-dir" / "cal.json")


def test_a_nan_threshold_is_refused(tmp_path: Path) -> None:
    """Python's json reads NaN; a NaN threshold would make the gate silently never admit."""
    cal = build(synthetic_records(), q="0.9", model_sha256="b" * 64, model_name="m", n_layer=6)
    path = tmp_path / "cal.json"
    cal.save(path)
    for field_name in ("margin_threshold", "halfrange_quantile", "supnorm_quantile"):
        raw = json.loads(path.read_text())
        raw["kinds"]["chat"]["depths"][1][field_name] = float("nan")
        bad = tmp_path / f"nan-{field_name}.json"
        bad.write_text(json.dumps(raw))  # writes the bare token NaN
        assert "NaN" in bad.read_text()
        with pytest.raises(CalibrationError, match=f"{field_name} is NaN"):
            Calibration.load(bad)
    raw = json.loads(path.read_text())
    raw["depths"][0]["halfrange_quantile"] = -1.0
    bad = tmp_path / "negative.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(CalibrationError, match="negative residual quantile"):
        Calibration.load(bad)


def test_the_pair_is_one_atomic_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed between the lens and the JSON, the old artifact (JSON + its lens) still loads; after
    a completed save only the new lens file is left."""
    from verispec.reference.calibration import artifact as calibration_artifact
    from verispec.reference.early_exit import Lens

    rng = np.random.default_rng(2)

    def lens() -> Lens:
        return Lens(
            (3, 5), rng.standard_normal((2, 4, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
        )

    old = build(synthetic_records(), q="0.9", model_sha256="b" * 64, model_name="m", n_layer=6, lens=lens())
    new = build(synthetic_records(seed=3), q="0.9", model_sha256="b" * 64, model_name="m", n_layer=6, lens=lens())
    path = tmp_path / "cal.json"
    old.save(path)
    real_write = calibration_artifact.atomic_write

    def die_on_json(target: Path, data: bytes) -> None:
        if target.suffix == ".json":
            raise KeyboardInterrupt  # killed after the lens, before the JSON
        real_write(target, data)

    monkeypatch.setattr(calibration_artifact, "atomic_write", die_on_json)
    with pytest.raises(KeyboardInterrupt):
        new.save(path)
    monkeypatch.setattr(calibration_artifact, "atomic_write", real_write)
    back = Calibration.load(path)
    assert back.depths == old.depths and back.lens is not None and old.lens is not None
    assert np.array_equal(back.lens.weight, old.lens.weight)
    new.save(path)
    back = Calibration.load(path)
    assert back.lens is not None and new.lens is not None and np.array_equal(back.lens.weight, new.lens.weight)
    assert len(list(tmp_path.glob("cal.lens.*.npz"))) == 1  # the stale lens file is gone


def test_calibrate_splits_prompts_and_checks_depths(tiny_gguf: Any) -> None:
    prompts = [("chat", [1, 2]), ("chat", [3]), ("code", [4, 5]), ("code", [6]), ("code", [7])]
    lens_split, cal_split = split_for_lens(prompts)
    assert lens_split == [("chat", [1, 2]), ("code", [4, 5]), ("code", [7])]
    assert cal_split == [("chat", [3]), ("code", [6])]
    assert default_depths(30) == (8, 12, 16, 20, 24)
    model = tiny(tiny_gguf)
    cal, rec = calibrate(model, prompts, model_sha256="d" * 64, model_name="t", depths=[2, 4], q="0.9", n_steps=4)
    assert cal.n == rec.n == 8 and cal.n_lens == 12 and cal.lens is not None
    assert cal.prompts == {"chat": 4, "code": 4} and cal.n_prompts == 2 and rec.prompt.tolist() == [0] * 4 + [1] * 4
    lens_prompts = [("prose", [9, 9, 3])]
    cal, rec = calibrate(
        model,
        prompts,
        model_sha256="d" * 64,
        model_name="t",
        depths=[2, 4],
        q="0.9",
        n_steps=2,
        lens_prompts=lens_prompts,
    )
    assert cal.n_prompts == 5 and cal.n_lens == 2 and sorted(cal.kinds) == ["chat", "code"]
    with pytest.raises(CalibrationError, match="must be non-empty and in 1..5"):
        calibrate(model, prompts, model_sha256="d" * 64, model_name="t", depths=[6], n_steps=2)


def verispec(*args: str) -> subprocess.CompletedProcess[str]:
    # one BLAS thread: on a shared 2-core runner, BLAS threads contending with others are slower
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "verispec", *args], capture_output=True, text=True, cwd=ROOT, timeout=600, env=env
    )


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``verispec ARGS`` run by cli.main in this process (the exit status, argparse's included, and
    the two streams), for the commands' behaviour; the process boundary itself (``python -m
    verispec``, its exit status and streams) is checked by one real child, the first call of
    test_calibrate_checks_arguments_and_the_output_folder_before_the_model."""
    from verispec import cli

    capsys.readouterr()  # what earlier calls printed
    try:
        status = cli.main(list(args))
    except SystemExit as exc:  # argparse refuses with exit status 2
        status = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["verispec", *args], status, captured.out, captured.err)


def test_calibrate_checks_arguments_and_the_output_folder_before_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing output folder (or a bad --q) is reported in one line before anything loads: the
    model path given does not even exist, and it is not what the error is about. The first call
    is a real `python -m verispec` child (the process's exit status and streams), the rest run
    cli.main in this process."""
    missing = verispec(
        "calibrate", "--model", str(tmp_path / "no-model.gguf"), "--out", str(tmp_path / "no" / "cal.json")
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "folder" in missing.stderr and "does not exist" in missing.stderr
    bad_q = in_process(
        capsys,
        "calibrate",
        "--model",
        str(tmp_path / "no-model.gguf"),
        "--q",
        "1.5",
        "--out",
        str(tmp_path / "cal.json"),
    )
    assert bad_q.returncode == 2 and "--q must be in (0, 1)" in bad_q.stderr
    not_json = in_process(
        capsys, "calibrate", "--model", str(tmp_path / "no-model.gguf"), "--out", str(tmp_path / "cal.txt")
    )
    assert not_json.returncode == 2 and "must end in .json" in not_json.stderr
    no_file = in_process(
        capsys,
        "calibrate",
        "--model",
        str(tmp_path / "no-model.gguf"),
        "--prompts",
        str(tmp_path / "none.jsonl"),
        "--out",
        str(tmp_path / "cal.json"),
    )
    assert no_file.returncode == 2 and "cannot read prompts" in no_file.stderr and no_file.stderr.count("\n") == 1


@pytest.mark.model
@pytest.mark.slow
def test_calibrate_cli_and_generate_with_early_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real SmolLM2: a small calibration (the default hand-written pool's first 3 prompts per kind,
    1 generated prompt per kind for the lens, 5 steps), then serve and audit with it; a calibration for another model is refused in one line.
    The commands run by cli.main in this process (in_process: the same exit status and streams).
    Their loads go through the real loader (engine_load.load_engine), each distinct request once:
    a request is the resolved file, engine, weights mode (``auto`` resolved as the loader resolves
    it), backend, pass boundaries and head mode, so a command asking for what an earlier one loaded
    gets the object that load built (no command mutates a model: each runs on caches of its own).
    Here calibrate, the early-exit serve (a calibration that admits nothing: no boundaries) and the
    plain serve ask for one model, which is asserted."""
    from verispec.commands import calibrate as calibrate_command
    from verispec.commands import generate as generate_command
    from verispec.commands import generate_early_exit as early_exit_command
    from verispec.engine_load import AUTO, head_kernel_of, layer_kernel_of, load_engine, resolve_weights
    from verispec.registry import resolve_model

    loads: dict[tuple[Any, ...], Any] = {}

    def load_once(
        source: str,
        *,
        need_chat: bool = False,
        engine: str = "fast",
        weights: str = AUTO,
        backend: str = "auto",
        pass_boundaries: Any = (),
        head: str = "full",
        head_kernel: str | None = None,
        layer_kernel: str | None = None,
    ) -> Any:
        boundaries = tuple(pass_boundaries)
        mode = resolve_weights(weights, engine=engine, backend=backend)
        key: tuple[Any, ...] = (resolve_model(source), engine, mode, backend, boundaries, head)
        if key not in loads or (need_chat and loads[key].chat is None):
            loads[key] = load_engine(
                source,
                need_chat=need_chat,
                engine=engine,
                weights=weights,
                backend=backend,
                pass_boundaries=boundaries,
                head=head,
                head_kernel=head_kernel,
                layer_kernel=layer_kernel,
            )
        # the early-exit serve names the calibrated head and layer kernels; the default load must have them
        assert head_kernel in (None, head_kernel_of(loads[key].model)), (
            head_kernel,
            loads[key].model.store.head_kernel,
        )
        assert layer_kernel in (None, layer_kernel_of(loads[key].model)), (
            layer_kernel,
            loads[key].model.store.layer_kernel,
        )
        return loads[key]

    for command in (calibrate_command, generate_command, early_exit_command):
        monkeypatch.setattr(command, "load_engine", load_once)
    out = tmp_path / "cal.json"
    done = in_process(
        capsys,
        "calibrate",
        "--model",
        "smollm2-135m",
        "--prompts-per-kind",
        "3",
        "--lens-prompts-per-kind",
        "1",
        "--tokens-per-prompt",
        "5",
        "--layers",
        "8,16,24",
        "--q",
        "0.5",
        "--out",
        str(out),
        "--report",
        str(tmp_path / "r.png"),
    )
    assert done.returncode == 0, done.stderr
    assert "calibrate [" in done.stderr and "/80 tokens" in done.stderr  # the progress bar: (12 + 4) x 5
    assert "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable" in done.stdout
    raw = json.loads(out.read_text())
    assert raw["layers"] == [8, 16, 24] and raw["n_prompts"] == 12 and raw["lens"] is not None
    assert raw["weights"] == "int8"  # calibrated on the default mode (onnxruntime is installed here)
    assert sorted(raw["kinds"]) == ["chat", "code", "prose", "structured"]
    # alpha = 1/2 over K = 3 depths needs ceil(6) - 1 = 5 prompts per kind: 3 are too few
    assert raw["min_prompts"] == 5 and not any(k["admits"] for k in raw["kinds"].values())
    assert "admits nothing" in done.stdout
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    gen = in_process(
        capsys,
        "generate",
        "--model",
        "smollm2-135m",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
        "--early-exit",
        str(out),
        "--audit",
        "--json",
    )
    assert gen.returncode == 0, gen.stderr
    assert "prompt kind 'prose' has 3 calibration prompts" in gen.stderr
    result = json.loads(gen.stdout)
    ee = result["early_exit"]
    assert len(result["ids"]) == 6 and ee["audited"] == 5 and ee["flips"] == 0 and ee["kind"] == "prose"
    assert ee["exit_histogram"] == {"full": 6}  # the refusing kind admits nothing
    plain = in_process(
        capsys,
        "generate",
        "--model",
        "smollm2-135m",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
        "--json",
    )
    assert json.loads(plain.stdout)["ids"] == result["ids"]
    assert len(loads) == 1, list(loads)  # the three commands asked for one model
    (served,) = loads.values()  # the artifact names the int8 kernels the calibration ran on
    assert (raw["head_kernel"], raw["layer_kernel"]) == (head_kernel_of(served.model), layer_kernel_of(served.model))
    other_numerics = in_process(
        capsys,
        "generate",
        "--model",
        "smollm2-135m",
        "--prompt",
        "x",
        "--temperature",
        "0",
        "--exact",
        "--early-exit",
        str(out),
    )
    assert other_numerics.returncode == 2 and other_numerics.stderr.count("\n") == 1
    assert "calibration was made on the int8 weights mode" in other_numerics.stderr
    wrong = in_process(
        capsys, "generate", "--model", "gemma3-270m", "--prompt", "x", "--temperature", "0", "--early-exit", str(out)
    )
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "calibration is for model SmolLM2" in wrong.stderr
