"""`verispec generate --early-exit CAL.json [--audit]`: greedy decoding with certified early exit.

Reached from :func:`verispec.commands.generate.run` when ``--early-exit`` is given; the rest of the
flags mean what they mean for plain generation. The artifact must be for this very model file
(sha256), else a one-line CalibrationError. The prompt's kind (``--kind``, or the rule of
:func:`reference.prompt_kind.prompt_kind` on the prompt text) picks that kind's thresholds; stderr
states the claim, "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens) are
exchangeable", or, for a kind with too few calibration prompts, that nothing will be admitted.
Stats add the mean exit depth, the exit histogram, and with ``--audit`` (every token also runs
every layer) the observed flips.
"""

from __future__ import annotations

import argparse
import json
import sys

from verispec.commands.request import build_request, result_json, stats_line
from verispec.commands.validate import model_config
from verispec.engine_load import (
    AUTO,
    head_kernel_of,
    head_stats_of,
    layer_kernel_of,
    load_engine,
    resolve_weights,
    weights_mode_of,
)
from verispec.reference.calibration import Calibration, file_sha256
from verispec.reference.early_exit import ExitStats, exit_depths, generate_early_exit
from verispec.reference.generate import GenerationResult
from verispec.reference.prompt_kind import prompt_kind
from verispec.registry import resolve_model


def exit_line(stats: ExitStats) -> str:
    """One stderr line: mean depth, histogram, head evaluations, flips (with --audit)."""
    hist = " ".join(f"{depth}:{count}" for depth, count in stats.histogram().items())
    flips = "" if stats.flips is None else f"; audit: {stats.flips} flips in {stats.audited} tokens"
    return (
        f"[early exit: mean depth {stats.mean_exit_depth:.2f}/{stats.n_layer} "
        f"({stats.mean_exit_depth / stats.n_layer:.1%} of layers); exits {hist}; "
        f"{stats.head_evaluations} exit-head evaluations; {stats.catchup_rows} owed layer rows caught up{flips}]"
    )


def claim_line(calibration: Calibration) -> str:
    """One stderr line: the kind in force and its guarantee, or why it admits nothing."""
    refusal = calibration.refusal
    if refusal is not None:
        return f"[early exit: {refusal}]"
    return (
        f"[early exit: prompt kind {calibration.kind!r}, {calibration.n_prompts} calibration prompts; "
        f"{calibration.claim} (α = {calibration.alpha})]"
    )


def serving_weights(calibration: Calibration, requested: str) -> str:
    """The weights mode early exit serves on: the calibrated one under ``auto`` (a certificate
    holds for the numerics it was measured on), the requested one if it has those numerics;
    CalibrationError otherwise."""
    if requested == AUTO:
        return calibration.weights
    weights = resolve_weights(requested)
    calibration.check_weights(weights)
    return weights


def run_early_exit(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    kind = args.kind if getattr(args, "kind", None) else prompt_kind(args.prompt)
    calibration = Calibration.load(args.early_exit, file_sha256(path)).for_kind(kind)
    config = model_config(str(path))  # the metadata only: a misfit is refused before the weights load
    calibration.check_fits(config.n_layer, config.n_embd, f"model {path.name}")
    weights = serving_weights(calibration, getattr(args, "weights", AUTO))  # refused before the model loads
    print(claim_line(calibration), file=sys.stderr)
    loaded = load_engine(
        str(path),
        need_chat=args.chat,
        engine=getattr(args, "engine", "fast"),
        weights=weights,
        backend=getattr(args, "backend", "auto"),
        pass_boundaries=exit_depths(calibration, calibration.gate),  # where every pass starts and stops
        head=getattr(args, "head", "full"),
        # under auto, the calibrated head and layer kernels; an explicit mode, the environment's (checked next)
        head_kernel=calibration.head_kernel if getattr(args, "weights", AUTO) == AUTO else None,
        layer_kernel=calibration.layer_kernel if getattr(args, "weights", AUTO) == AUTO else None,
    )
    # e.g. --engine reference serves f32; VERISPEC_INT8_HEAD_KERNEL / _LAYER_KERNEL another kernel's numerics
    calibration.check_weights(
        weights_mode_of(loaded.model), head_kernel_of(loaded.model), layer_kernel_of(loaded.model)
    )
    request = build_request(args, loaded)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def run(streaming: bool) -> tuple[GenerationResult, ExitStats]:
        return generate_early_exit(
            loaded.model,
            loaded.tokenizer,
            request,
            calibration,
            audit=args.audit,
            on_text=stream if streaming else None,
        )

    if args.json:
        result, stats = run(False)
        out = result_json(result)
        exit_stats = stats.as_dict()
        exit_stats["kind"] = calibration.kind
        exit_stats["claim"] = calibration.refusal or f"{calibration.claim} (α = {calibration.alpha})"
        out["early_exit"] = exit_stats
        head = head_stats_of(loaded.model)
        if head is not None:
            out["head"] = head
        print(json.dumps(out, ensure_ascii=False))
        return 0
    result, stats = run(True)
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(stats_line(result), file=sys.stderr)
    print(exit_line(stats), file=sys.stderr)
    return 0
