"""Early exit: tuned lens, gates, and greedy serving with exits on tiny models (oracles: the plain
greedy loop and full forwards with hidden states, computed independently of the exit code)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from tests.support.tolerances import assert_within, gamma
from verispec.reference.calibration import Calibration, DepthCalibration
from verispec.reference.certificate import top2
from verispec.reference.early_exit import (
    ExitStats,
    exit_depths,
    exit_logits,
    fit_lens,
    gate_admits,
    generate_early_exit,
)
from verispec.reference.errors import CalibrationError, SamplingError
from verispec.reference.generate import GenerationRequest, generate
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def calibration(n_layer: int, depths: dict[int, float], *, gate: Any = "margin", quantile: float = 1.0) -> Calibration:
    """A hand-made artifact: per depth a margin threshold (and one residual quantile for all)."""
    return Calibration(
        model_sha256="0" * 64,
        model_name="tiny",
        n_layer=n_layer,
        q=Fraction(9, 10),
        gate=gate,
        residual="halfrange",
        n=100,
        n_lens=0,
        depths=tuple(DepthCalibration(k, quantile, quantile, t, 0.5) for k, t in sorted(depths.items())),
    )


class ByteTokenizer:
    """Just enough tokenizer for the decode loops: no EOG, bytes as text."""

    eog_ids: frozenset[int] = frozenset()
    bos_id: int | None = None

    def stream_decoder(self) -> Any:
        class D:
            def push(self, token: int) -> str:
                return chr(65 + token % 26)

            def flush(self) -> str:
                return ""

        return D()


def tiny(tiny_gguf: Any, **options: Any) -> Model:
    return Model.load(tiny_gguf("llama", n_layer=6, n_vocab=64, context_length=128, tied=False, **options))


def test_lens_recovers_an_affine_map() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 400, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    y = x[1] @ w + b
    lens = fit_lens([3, 5], x, y, ridge=1e-9)
    # Derived tolerance: y is x w + b off by E, |E| <= g (|x| |w| + |b|), g = gamma(9) (8 products
    # and the bias add). The float64 least-squares fit reproduces x w + b + P E at the samples (P the
    # projection on [x 1]; the 1e-9 ridge and float64 rounding move it by < 1e-8 relative), and
    # |(P E)_ij| <= ||E_:j||_2. Storing the map in float32 and applying it adds <= 2 g (|x| |w| + |b|).
    magnitude = np.abs(x[1]).astype(np.float64) @ np.abs(w) + np.abs(b)
    e = gamma(9) * magnitude
    bound = np.sqrt(np.sum(e**2, axis=0)) + 3.0 * e + 1e-8 * magnitude
    assert_within(lens.apply(5, x[1]), y, bound, "the lens at depth 5")
    assert not np.allclose(lens.apply(3, x[0]), y, atol=0.5)  # depth 3's data is unrelated noise
    with pytest.raises(CalibrationError, match="no map for depth 4"):
        lens.apply(4, x[0])
    with pytest.raises(CalibrationError, match="do not match"):
        fit_lens([3], x, y)


def test_gates_follow_the_certificate_and_the_threshold() -> None:
    row = np.zeros(10, dtype=np.float32)
    row[3], row[7] = np.float32(5.0), np.float32(2.0)  # top-1 3, margin 3
    cal = calibration(6, {2: 2.9, 4: 3.0}, quantile=1.0)
    assert gate_admits(cal, "margin", 2, row) == (True, 3)
    assert gate_admits(cal, "margin", 4, row) == (False, 3)  # strict: margin 3 is not > 3
    # residual gate: 2 (Q + slack) < margin; Q = 1 -> 2.0000005 < 3 admits, Q = 1.5 -> 3.000001 does not
    assert gate_admits(cal, "halfrange", 2, row)[0]
    assert not gate_admits(calibration(6, {2: 0.0}, quantile=1.5), "supnorm", 2, row)[0]
    assert not gate_admits(calibration(6, {2: 0.0}, quantile=float("inf")), "supnorm", 2, row)[0]
    with pytest.raises(CalibrationError, match="depth 3 is not calibrated"):
        gate_admits(cal, "margin", 3, row)


def test_never_admitting_gate_is_plain_greedy(tiny_gguf: Any) -> None:
    model = tiny(tiny_gguf)
    tok: Any = ByteTokenizer()
    request = GenerationRequest(prompt_ids=(1, 2, 3), params=GREEDY, max_tokens=12, seed=0)
    plain = generate(model, tok, request)
    served, stats = generate_early_exit(model, tok, request, calibration(6, {2: np.inf, 4: np.inf}), audit=True)
    assert served.ids == plain.ids
    assert stats.depths == [6] * 12 and stats.flips == 0 and stats.audited == 11
    assert stats.head_evaluations == 0  # a depth that can never admit is not asked (exit_depths)
    # one depth that can admit: only it is asked, every token after the first; the tokens are the same
    # as when every candidate depth is asked (a refusing depth's gate answers no without changing state)
    two = calibration(6, {2: np.inf, 4: 3.0})
    served, stats = generate_early_exit(model, tok, request, two, audit=True)
    assert stats.head_evaluations == 11 and exit_depths(two, "margin") == (4,)
    assert exit_depths(calibration(6, {2: np.nan, 4: -np.inf}), "margin") == (4,)
    assert exit_depths(calibration(6, {2: 1.0}, quantile=np.inf), "halfrange") == ()
    asked_all, _ = generate_early_exit(model, tok, request, calibration(6, {2: 1e30, 4: 3.0}), audit=True)
    assert served.ids == asked_all.ids


@pytest.mark.parametrize("depth", [2, 4])
def test_always_admitting_gate_serves_the_exit_heads_argmax(tiny_gguf: Any, depth: int) -> None:
    """Oracle: re-run the served sequence through full forwards; each served token (after the
    prompt's) is the exit head's top-1 at ``depth`` of the hidden state of a FULL forward."""
    model = tiny(tiny_gguf, seed=3)
    tok: Any = ByteTokenizer()
    request = GenerationRequest(prompt_ids=(5, 9), params=GREEDY, max_tokens=10, seed=0)
    served, stats = generate_early_exit(model, tok, request, calibration(6, {depth: -np.inf}), audit=False)
    _, audited = generate_early_exit(model, tok, request, calibration(6, {depth: -np.inf}), audit=True)
    seq = list(request.prompt_ids) + list(served.ids)
    full = model.forward(seq, model.new_cache(len(seq)), return_hidden=True)
    assert full.hidden is not None
    assert served.ids[0] == int(np.argmax(full.logits[1]))  # the prompt pass runs every layer
    flips = 0
    for i in range(1, len(served.ids)):
        row = len(request.prompt_ids) + i - 1  # position whose prediction is served.ids[i]
        exit_top1 = top2(model.head(full.hidden[depth, row : row + 1])[0])[0]
        assert served.ids[i] == exit_top1
        flips += int(exit_top1 != int(np.argmax(full.logits[row])))
    assert stats.depths == [6] + [depth] * 9
    assert stats.histogram() == {str(depth): 9, "full": 1}
    assert audited.flips == flips and audited.audited == 9
    if depth == 2:
        assert flips > 0  # the tiny model's shallow exit does disagree: the audit count is exercised


def test_lens_is_used_by_the_exit_head(tiny_gguf: Any) -> None:
    model = tiny(tiny_gguf)
    h = np.ones((1, model.config.n_embd), dtype=np.float32)
    lens = fit_lens(
        [2],
        np.random.default_rng(1).standard_normal((1, 50, model.config.n_embd)).astype(np.float32),
        np.random.default_rng(2).standard_normal((50, model.config.n_embd)).astype(np.float32),
    )
    assert np.array_equal(exit_logits(model, 2, h, None), model.head(h))
    assert np.array_equal(exit_logits(model, 2, h, lens), model.head(lens.apply(2, h)))  # the same ops


def test_refuses_sampling_and_foreign_calibrations(tiny_gguf: Any) -> None:
    model = tiny(tiny_gguf)
    tok: Any = ByteTokenizer()
    with pytest.raises(SamplingError, match="temperature 0.8"):
        generate_early_exit(
            model, tok, GenerationRequest((1,), SamplingParams(temperature=0.8), 4), calibration(6, {2: 1.0})
        )
    with pytest.raises(SamplingError, match="repeat_penalty 1.1"):
        generate_early_exit(
            model,
            tok,
            GenerationRequest((1,), SamplingParams(temperature=0.0, repeat_penalty=1.1), 4),
            calibration(6, {2: 1.0}),
        )
    with pytest.raises(CalibrationError, match="30-layer"):
        generate_early_exit(model, tok, GenerationRequest((1,), GREEDY, 4), calibration(30, {2: 1.0}))


def test_exit_stats() -> None:
    s = ExitStats(n_layer=30, depths=[30, 8, 8, 16, 30])
    assert s.mean_exit_depth == pytest.approx(92 / 5)
    assert s.histogram() == {"8": 2, "16": 1, "full": 2}
    assert s.as_dict()["exited"] == 3


def test_the_prompt_kind_picks_its_own_thresholds(tiny_gguf: Any) -> None:
    """Mondrian serving: kind "code" admits every token at depth 2, kind "prose" (too few prompts:
    +inf) and an uncalibrated kind admit none; no kind means the pooled thresholds."""
    from dataclasses import replace

    from verispec.reference.calibration import KindCalibration

    model = tiny(tiny_gguf, seed=3)
    tok: Any = ByteTokenizer()
    request = GenerationRequest(prompt_ids=(5, 9), params=GREEDY, max_tokens=6, seed=0)
    pooled = calibration(6, {2: np.inf})
    kinds = {
        "code": KindCalibration("code", 30, 300, 19, (DepthCalibration(2, 1.0, 1.0, -np.inf, 0.5),)),
        "prose": KindCalibration("prose", 5, 50, 19, (DepthCalibration(2, np.inf, np.inf, np.inf, 0.5),)),
    }
    cal = replace(pooled, kinds=kinds, n_prompts=35)
    depths = {
        kind: generate_early_exit(model, tok, request, cal, kind=kind)[1].depths
        for kind in ("code", "prose", "poetry", None)
    }
    assert depths["code"] == [6] + [2] * 5
    assert depths["prose"] == depths["poetry"] == depths[None] == [6] * 6
    assert cal.for_kind("code").refusal is None
    assert cal.for_kind("poetry").refusal is not None and "not calibrated" in str(cal.for_kind("poetry").refusal)
