"""A calibration must fit the model it is served with, checked before the model runs.

The model's sha256 binds an artifact to a file only as far as the artifact is honest: without a
key, a forged artifact can name the right sha256 and still carry a lens fit for another width
(which would load and fail inside the first exit head, mid-decode) or depths for another layer
count. :meth:`Calibration.check_fits` refuses both with a CalibrationError naming both sizes;
``generate_early_exit`` calls it before its first forward, and ``verispec generate --early-exit``
before the weights load (from the model's metadata alone).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.calibration_records import synthetic_records
from verispec.reference.calibration import Calibration, build, file_sha256
from verispec.reference.early_exit import Lens, generate_early_exit
from verispec.reference.errors import CalibrationError
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


def tiny_path(tiny_gguf: Any) -> Path:
    path: Path = tiny_gguf("llama", n_layer=6, n_vocab=64, context_length=128, tied=False, seed=5)
    return path


def artifact(tmp_path: Path, model_path: Path, width: int, n_layer: int = 6) -> Path:
    """A sealed artifact for ``model_path``'s sha256, with a lens of ``width``."""
    rng = np.random.default_rng(1)
    lens = Lens(
        (3, 5),
        rng.standard_normal((2, width, width)).astype(np.float32),
        rng.standard_normal((2, width)).astype(np.float32),
    )
    cal = build(
        synthetic_records(n_prompts=40),
        q="0.9",
        model_sha256=file_sha256(model_path),
        model_name="tiny",
        n_layer=n_layer,
        lens=lens,
        n_lens=7,
        ridge=0.5,
    )
    out = tmp_path / f"cal-{width}-{n_layer}.json"
    cal.save(out)
    return out


class NoForward:
    """A model whose forward must not be reached."""

    def __init__(self, model: Model) -> None:
        self.config = model.config

    def forward(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the model ran before the calibration was checked against it")

    def new_cache(self, *args: object) -> None:
        raise AssertionError("the model ran before the calibration was checked against it")


def test_a_lens_of_another_width_is_refused_before_the_first_forward(tiny_gguf: Any, tmp_path: Path) -> None:
    path = tiny_path(tiny_gguf)
    model = Model.load(path)
    width = model.config.n_embd
    good = Calibration.load(artifact(tmp_path, path, width), file_sha256(path))
    good.check_fits(6, width)  # the right width fits
    wrong = Calibration.load(
        artifact(tmp_path, path, width + 8), file_sha256(path)
    )  # loads: the file itself is well-formed
    request = GenerationRequest((1, 2), SamplingParams(temperature=0.0), 4)
    with pytest.raises(CalibrationError) as caught:
        generate_early_exit(NoForward(model), None, request, wrong)  # type: ignore[arg-type]
    message = str(caught.value)
    assert f"{width + 8} wide" in message and f"hidden size {width}" in message and "\n" not in message


def test_another_layer_count_is_refused_before_the_first_forward(tiny_gguf: Any, tmp_path: Path) -> None:
    path = tiny_path(tiny_gguf)
    model = Model.load(path)
    wrong = Calibration.load(artifact(tmp_path, path, model.config.n_embd, n_layer=12), file_sha256(path))
    request = GenerationRequest((1, 2), SamplingParams(temperature=0.0), 4)
    with pytest.raises(CalibrationError, match="12-layer model, the model has 6 layers"):
        generate_early_exit(NoForward(model), None, request, wrong)  # type: ignore[arg-type]


def test_the_command_refuses_a_misfit_lens_before_loading_the_weights(
    tiny_gguf: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verispec.commands import generate_early_exit as command

    path = tiny_path(tiny_gguf)
    width = Model.load(path).config.n_embd
    out = artifact(tmp_path, path, width + 8)

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the weights were loaded before the calibration was checked")

    monkeypatch.setattr(command, "load_engine", no_load)
    monkeypatch.setattr(command, "resolve_model", lambda name: Path(name))
    args = argparse.Namespace(model=str(path), kind="chat", prompt="x", early_exit=str(out))
    with pytest.raises(CalibrationError, match=f"{width + 8} wide, but model {path.name} has hidden size {width}"):
        command.run_early_exit(args)
