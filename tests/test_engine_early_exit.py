"""Early exit on the engine: the same exit decisions (depth per token) and tokens as on the
reference, for the margin and residual gates, with deferred KV catch-up (reference/early_exit.py's
loop; only the model changes). A hand-made calibration on a tiny random model puts the gate
thresholds where some tokens exit and some run every layer, so both branches are compared."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from verispec.engine.model import FastModel
from verispec.reference.calibration import Calibration, DepthCalibration
from verispec.reference.early_exit import generate_early_exit
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


def _calibration(n_layer: int, threshold: float, gate: Any) -> Calibration:
    half = float(np.float32(threshold / 2))  # residual quantiles must be float32 values
    depths = tuple(DepthCalibration(d, half, half, threshold, 0.5) for d in (1, 2, 3))
    return Calibration("0" * 64, "tiny", n_layer, Fraction(99, 100), gate, "halfrange", 100, 0, depths)


@pytest.mark.model
@pytest.mark.parametrize("gate", ["margin", "halfrange"])
def test_early_exit_decisions_identical(tiny_gguf: Any, smollm2_tokenizer: Any, gate: str) -> None:
    path = tiny_gguf("llama", n_layer=5, n_vocab=64, context_length=96, weight_scale=1.0)
    ref, fast = Model.load(path), FastModel.load(path)
    request = GenerationRequest((5, 9, 12, 7, 3), params=SamplingParams(temperature=0.0), max_tokens=24, seed=0)
    calibration = _calibration(5, 0.6, gate)
    want, want_stats = generate_early_exit(ref, smollm2_tokenizer, request, calibration, backlog_bound=4)
    got, got_stats = generate_early_exit(fast, smollm2_tokenizer, request, calibration, backlog_bound=4)
    assert got.ids == want.ids
    assert got_stats.depths == want_stats.depths
    assert len(set(want_stats.depths)) >= 2  # some tokens exit early, some run every layer
