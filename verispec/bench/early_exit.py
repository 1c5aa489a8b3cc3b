"""The bench's early-exit section (``--early-exit CAL.json``): certified early exit (greedy, the
artifact's gate) against plain greedy decoding of the same request on the same engine.

Keys when measured: ``available`` (true), ``calibration``, ``gate``, ``plain_tok_s``,
``early_exit_tok_s``, ``speedup``, ``mean_exit_depth``, ``n_layer``, ``admitted_fraction``,
``head_evaluations_per_token``, ``same_tokens_as_plain``; otherwise ``available`` (false) and a
``note`` saying how to get it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from verispec.bench.options import BenchOptions
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.reference.generate import GenerationRequest
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

if TYPE_CHECKING:
    from verispec.reference.calibration import Calibration

NOT_ASKED = "pass --early-exit CAL.json (made by verispec calibrate for this model)"


def load_calibration(path: Path, options: BenchOptions) -> "Calibration | None":
    """The early-exit artifact, checked to be for this model file (CalibrationError otherwise)."""
    if options.early_exit is None:
        return None
    from verispec.reference.calibration import Calibration, file_sha256

    return Calibration.load(options.early_exit, file_sha256(path))


def early_exit_section(
    calibration: "Calibration | None",
    model: FastModel,
    tokenizer: Tokenizer,
    ids: tuple[int, ...],
    options: BenchOptions,
    plain_model: FastModel | None = None,
) -> dict[str, Any]:
    """Early exit (on ``model``) vs plain greedy decode (on ``plain_model``, default ``model``: the
    same numerics, bit for bit, its own layer layout) of the same request, alternating, best tok/s
    of each."""
    if calibration is None:
        return {"available": False, "note": NOT_ASKED}
    from verispec.reference.early_exit import generate_early_exit

    request = GenerationRequest(
        ids, params=SamplingParams(temperature=0.0), max_tokens=options.decode_tokens, seed=options.seed
    )
    plain_best = exit_best = 0.0
    for _ in range(max(1, options.repeats)):
        plain = fast_generate(model if plain_model is None else plain_model, tokenizer, request)
        result, stats = generate_early_exit(model, tokenizer, request, calibration)
        plain_best = max(plain_best, plain.stats.tokens_per_s)
        exit_best = max(exit_best, result.stats.tokens_per_s)
    n = max(1, len(stats.depths))
    return {
        "available": True,
        "calibration": str(options.early_exit),
        "gate": calibration.gate,
        "plain_tok_s": plain_best,
        "early_exit_tok_s": exit_best,
        "speedup": exit_best / plain_best if plain_best > 0 else None,
        "mean_exit_depth": stats.mean_exit_depth,
        "n_layer": model.config.n_layer,
        "admitted_fraction": sum(1 for d in stats.depths if d < model.config.n_layer) / n,
        "head_evaluations_per_token": stats.head_evaluations / n,
        "same_tokens_as_plain": result.ids == plain.ids,
    }
