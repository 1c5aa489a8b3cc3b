"""The default weights mode is the fastest lossless one installed (verispec/engine_load.py):
``auto`` is int8 where onnxruntime is importable, the exact float32 mode otherwise (said on
stderr in one line, never silently); ``--exact`` / ``--weights exact`` are the float32 mode by
name, and the old ``--weights f32`` still works. A calibration records the mode whose numerics it
certifies, and early exit serves on that mode or refuses another (reference/calibration/artifact.py).
No model is loaded here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.support.calibration_records import synthetic_records
from verispec import engine_load
from verispec.commands import generate as generate_command
from verispec.commands import logits as logits_command
from verispec.commands.generate_early_exit import serving_weights
from verispec.engine_load import KERNELS_MISSING, resolve_weights
from verispec.reference.calibration import Calibration, build, numerics
from verispec.reference.errors import CalibrationError


def test_auto_is_int8_where_the_kernels_are_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_load, "ort_available", lambda: True)
    assert resolve_weights("auto", arch="llama") == "int8"
    assert resolve_weights("auto", arch="gemma3") == "int8"
    assert capsys.readouterr().err == ""


def test_without_the_kernels_auto_falls_back_to_exact_with_one_stderr_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_load, "ort_available", lambda: False)
    assert resolve_weights("auto", arch="llama") == "f32"
    err = capsys.readouterr().err
    assert err == KERNELS_MISSING + "\n" and "verispec[fast]" in err


@pytest.mark.parametrize(
    ("weights", "kwargs", "expected"),
    [
        ("exact", {}, "f32"),
        ("f32", {}, "f32"),
        ("int8", {}, "int8"),
        ("quantized", {}, "quantized"),
        ("auto", {"engine": "reference"}, "f32"),  # the reference engine keeps float32 weights
        ("auto", {"arch": "phi3"}, "f32"),  # an architecture the fast engine runs on the reference
        ("auto", {"backend": "numpy"}, "f32"),  # an explicit float32 kernel
        ("auto", {"backend": "ort"}, "f32"),
    ],
)
def test_explicit_choices_and_what_auto_cannot_serve(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    weights: str,
    kwargs: dict[str, str],
    expected: str,
) -> None:
    monkeypatch.setattr(engine_load, "ort_available", lambda: True)
    assert resolve_weights(weights, **kwargs) == expected
    assert capsys.readouterr().err == ""  # a deliberate choice is no fallback


def _parse(register: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    register(sub)  # type: ignore[operator]
    return parser.parse_args(argv)


def test_the_flags_name_the_modes_and_keep_the_old_names() -> None:
    gen = ["generate", "--prompt", "x"]
    assert _parse(generate_command.register, gen).weights == "auto"
    assert _parse(generate_command.register, [*gen, "--exact"]).weights == "exact"
    assert _parse(generate_command.register, [*gen, "--weights", "exact"]).weights == "exact"
    assert _parse(generate_command.register, [*gen, "--weights", "f32"]).weights == "f32"
    assert _parse(generate_command.register, [*gen, "--weights", "int8"]).weights == "int8"
    # logits exports numerics: the reference's float32 ones unless asked
    assert _parse(logits_command.register, ["logits", "--prompt", "x", "--out", "o.npy"]).weights == "exact"


def _calibration(weights: str) -> Calibration:
    cal = build(synthetic_records(n_prompts=12), q="0.9", model_sha256="c" * 64, model_name="m.gguf", n_layer=6)
    from dataclasses import replace

    return replace(cal, weights=weights)


def test_a_calibration_records_its_mode_and_refuses_other_numerics(tmp_path: Path) -> None:
    assert numerics("f32") == numerics("quantized") == "exact" and numerics("int8") == "int8"
    cal = _calibration("int8")
    path = tmp_path / "cal.json"
    cal.save(path)
    assert json.loads(path.read_text())["weights"] == "int8"
    back = Calibration.load(path)
    assert back.weights == "int8"
    back.check_weights("int8")
    with pytest.raises(CalibrationError, match="made on the int8 weights mode .* this run uses f32"):
        back.check_weights("f32")
    _calibration("f32").check_weights("quantized")  # the same float32 function


def test_an_artifact_without_the_field_reads_as_the_old_default_f32(tmp_path: Path) -> None:
    from verispec.reference.calibration_seal import SEAL_FIELD, seal

    path = tmp_path / "old.json"
    _calibration("f32").save(path)
    raw = json.loads(path.read_text())
    del raw["weights"], raw[SEAL_FIELD]
    raw[SEAL_FIELD] = seal(raw, None, None)  # an artifact written before the field, sealed as then
    path.write_text(json.dumps(raw))
    assert Calibration.load(path).weights == "f32"


def test_early_exit_serves_on_the_calibrated_mode() -> None:
    assert serving_weights(_calibration("int8"), "auto") == "int8"
    assert serving_weights(_calibration("f32"), "auto") == "f32"
    assert serving_weights(_calibration("f32"), "exact") == "f32"
    with pytest.raises(CalibrationError, match="run with --weights int8"):
        serving_weights(_calibration("int8"), "exact")
    with pytest.raises(CalibrationError, match="calibrate again with --weights int8"):
        serving_weights(_calibration("f32"), "int8")


def _int8_calibration(head_kernel: str) -> Calibration:
    from dataclasses import replace

    return replace(_calibration("int8"), head_kernel=head_kernel)


def test_an_int8_calibration_records_its_head_kernel_and_refuses_the_other(tmp_path: Path) -> None:
    """The int8 mode's two head kernels (engine/tile_head.py) compute two functions: an artifact
    records which one it measured, under its seal, and is served only on that one."""
    assert numerics("int8", "mlas") == numerics("int8") == "int8" and numerics("int8", "tile") == "int8/tile"
    path = tmp_path / "tile.json"
    _int8_calibration("tile").save(path)
    assert json.loads(path.read_text())["head_kernel"] == "tile"
    back = Calibration.load(path)
    assert back.head_kernel == "tile"
    back.check_weights("int8")  # before loading: the run will load the calibrated head
    back.check_weights("int8", "tile")
    with pytest.raises(CalibrationError, match="int8 mode's tile head .* VERISPEC_INT8_HEAD_KERNEL=tile"):
        back.check_weights("int8", "mlas")
    with pytest.raises(CalibrationError, match="VERISPEC_INT8_HEAD_KERNEL=mlas"):
        _int8_calibration("mlas").check_weights("int8", "tile")
    raw = json.loads(path.read_text())
    raw["head_kernel"] = "mlas"  # the claim is sealed: an edit is refused
    path.write_text(json.dumps(raw))
    with pytest.raises(CalibrationError):
        Calibration.load(path)


def test_an_int8_artifact_without_a_head_kernel_reads_as_mlas(tmp_path: Path) -> None:
    """Written before the tile head existed, an int8 artifact was measured on the mlas head."""
    from verispec.reference.calibration_seal import SEAL_FIELD, seal

    path = tmp_path / "old_int8.json"
    _int8_calibration("mlas").save(path)
    raw = json.loads(path.read_text())
    del raw["head_kernel"], raw[SEAL_FIELD]
    raw[SEAL_FIELD] = seal(raw, None, None)
    path.write_text(json.dumps(raw))
    back = Calibration.load(path)
    assert back.head_kernel == "mlas"
    with pytest.raises(CalibrationError, match="VERISPEC_INT8_HEAD_KERNEL=mlas"):
        back.check_weights("int8", "tile")


def test_a_head_kernel_the_mode_cannot_have_is_refused(tmp_path: Path) -> None:
    from verispec.reference.calibration_seal import SEAL_FIELD, seal

    for weights, head_kernel in (("int8", "sse"), ("f32", "tile")):
        path = tmp_path / f"{weights}.json"
        _calibration(weights).save(path)
        raw = json.loads(path.read_text())
        del raw[SEAL_FIELD]
        raw["head_kernel"] = head_kernel
        raw[SEAL_FIELD] = seal(raw, None, None)
        path.write_text(json.dumps(raw))
        with pytest.raises(CalibrationError, match="head_kernel"):
            Calibration.load(path)


def _int8_layers_calibration(layer_kernel: str, head_kernel: str = "mlas") -> Calibration:
    from dataclasses import replace

    return replace(_calibration("int8"), head_kernel=head_kernel, layer_kernel=layer_kernel)


def test_the_int8_numerics_name_both_kernels() -> None:
    """Each int8 kernel choice is its own law; the names of the mlas-layer laws are the old ones."""
    assert numerics("int8", "mlas", "mlas") == numerics("int8") == "int8"
    assert numerics("int8", "tile", "mlas") == numerics("int8", "tile") == "int8/tile"
    assert numerics("int8", "mlas", "tile") == numerics("int8", None, "tile") == "int8/tile-layers"
    assert numerics("int8", "tile", "tile") == "int8/tile/tile-layers"
    assert numerics("f32", None, None) == numerics("quantized") == "exact"


def test_an_int8_calibration_records_its_layer_kernel_and_refuses_the_other(tmp_path: Path) -> None:
    """The int8 mode's two layer kernels (engine/tile_layers.py) compute two functions: an artifact
    records which one it measured, under its seal, and is served only on that one."""
    path = tmp_path / "tile_layers.json"
    _int8_layers_calibration("tile").save(path)
    assert json.loads(path.read_text())["layer_kernel"] == "tile"
    back = Calibration.load(path)
    assert back.layer_kernel == "tile" and back.head_kernel == "mlas"
    back.check_weights("int8")  # before loading: the run will load the calibrated kernels
    back.check_weights("int8", "mlas", "tile")
    with pytest.raises(CalibrationError, match="int8 mode's tile layers .* VERISPEC_INT8_LAYER_KERNEL=tile"):
        back.check_weights("int8", "mlas", "mlas")
    with pytest.raises(CalibrationError, match="VERISPEC_INT8_LAYER_KERNEL=mlas"):
        _int8_layers_calibration("mlas").check_weights("int8", "mlas", "tile")
    raw = json.loads(path.read_text())
    raw["layer_kernel"] = "mlas"  # the claim is sealed: an edit is refused
    path.write_text(json.dumps(raw))
    with pytest.raises(CalibrationError):
        Calibration.load(path)


def test_a_run_on_both_other_kernels_is_told_both_settings() -> None:
    cal = _int8_layers_calibration("tile", head_kernel="tile")
    cal.check_weights("int8", "tile", "tile")
    with pytest.raises(CalibrationError) as refused:
        cal.check_weights("int8", "mlas", "mlas")
    message = str(refused.value)
    assert "int8 mode's tile head and tile layers (int8/tile/tile-layers numerics)" in message
    assert "this run's head is mlas and layers are mlas (int8 numerics)" in message
    assert "VERISPEC_INT8_HEAD_KERNEL=tile VERISPEC_INT8_LAYER_KERNEL=tile" in message
    with pytest.raises(CalibrationError, match="VERISPEC_INT8_HEAD_KERNEL=tile, or calibrate again"):
        cal.check_weights("int8", "mlas", "tile")  # only the head differs: only its setting is named


def test_an_int8_artifact_without_a_layer_kernel_reads_as_mlas(tmp_path: Path) -> None:
    """Written before the tile layer kernel existed, an int8 artifact was measured on the mlas layers."""
    from verispec.reference.calibration_seal import SEAL_FIELD, seal

    path = tmp_path / "old_int8_layers.json"
    _int8_layers_calibration("mlas").save(path)
    raw = json.loads(path.read_text())
    del raw["layer_kernel"], raw[SEAL_FIELD]
    raw[SEAL_FIELD] = seal(raw, None, None)
    path.write_text(json.dumps(raw))
    back = Calibration.load(path)
    assert back.layer_kernel == "mlas"
    with pytest.raises(CalibrationError, match="VERISPEC_INT8_LAYER_KERNEL=mlas"):
        back.check_weights("int8", "mlas", "tile")


def test_a_layer_kernel_the_mode_cannot_have_is_refused(tmp_path: Path) -> None:
    from verispec.reference.calibration_seal import SEAL_FIELD, seal

    for weights, layer_kernel in (("int8", "auto"), ("f32", "tile"), ("quantized", "mlas")):
        path = tmp_path / f"{weights}.json"
        _calibration(weights).save(path)
        raw = json.loads(path.read_text())
        del raw[SEAL_FIELD]
        raw["layer_kernel"] = layer_kernel
        raw[SEAL_FIELD] = seal(raw, None, None)
        path.write_text(json.dumps(raw))
        with pytest.raises(CalibrationError, match="layer_kernel"):
            Calibration.load(path)


def test_calibrate_refuses_a_layer_kernel_the_mode_cannot_have() -> None:
    """reference.calibration.calibrate checks the kernels it is told before any trajectory."""
    from verispec.reference.calibration import calibrate

    with pytest.raises(CalibrationError, match="layer kernel 'sse' is not one of mlas, tile"):
        calibrate(None, [], model_sha256="c" * 64, model_name="m", weights="int8", layer_kernel="sse")  # type: ignore[arg-type]
    with pytest.raises(CalibrationError, match="layer kernels are the int8 mode's"):
        calibrate(None, [], model_sha256="c" * 64, model_name="m", weights="f32", layer_kernel="tile")  # type: ignore[arg-type]
