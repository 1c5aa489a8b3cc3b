"""Fused vs per-matrix int8 layers (engine/fused.py), one process, interleaved, best of N (a lab microbenchmark).

``python -m lab.fused_bench MODEL.gguf [--steps 32] [--repeats 5] [--profile]`` prints JSON:
for each path, the best and median greedy decode step (a 1-row forward over a growing cache, the
head on the last row, as plain decoding runs it) and the best 5-row forward over the best 1-row
forward at the same cache length; ``fused_over_unfused``: unfused step / fused step (> 1: fused is
faster). Both paths run the same prompt, alternating path by path every repeat, so both see the
same minutes of a shared machine's load. ``--profile`` adds cProfile's top entries of a fused
decode (where the remaining time of a step goes). Set ``OPENBLAS_NUM_THREADS=1`` and
``VERISPEC_THREADS`` as the run you compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from verispec.engine.model import FastModel

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies


def decode_steps(model: FastModel, steps: int) -> list[float]:
    """Seconds of each greedy 1-row step after the prompt."""
    cache = model.new_cache(len(PROMPT) + steps + 8)
    logits = model.forward(PROMPT, cache, last_only=True).logits[-1]
    times = []
    for _ in range(steps):
        token = int(np.argmax(logits))
        t0 = time.perf_counter()
        logits = model.forward([token], cache, last_only=True).logits[-1]
        times.append(time.perf_counter() - t0)
    return times


def rows_pass(model: FastModel, rows: int) -> float:
    """Seconds of one ``rows``-row forward after the prompt (the head on every row, as verify)."""
    cache = model.new_cache(len(PROMPT) + rows + 1)
    model.forward(PROMPT, cache, last_only=True)
    t0 = time.perf_counter()
    model.forward(PROMPT[:rows], cache)
    return time.perf_counter() - t0


def compare(path: Path, steps: int, repeats: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    models = {
        "fused": FastModel.load(path, weights="int8", fused=True, layer_kernel="mlas"),
        "unfused": FastModel.load(path, weights="int8", fused=False),
    }
    for m in models.values():  # warm-up: first calls allocate
        decode_steps(m, 2)
    step: dict[str, list[float]] = {n: [] for n in models}
    one: dict[str, float] = {n: float("inf") for n in models}
    five: dict[str, float] = {n: float("inf") for n in models}
    for _ in range(repeats):
        for name, m in models.items():
            step[name] += decode_steps(m, steps)
            one[name] = min(one[name], rows_pass(m, 1))
            five[name] = min(five[name], rows_pass(m, 5))
    out: dict[str, Any] = {
        "model": path.name,
        "steps": steps,
        "repeats": repeats,
        "load_average": [load_before, os.getloadavg()[0]],
    }
    for name in models:
        out[name] = {
            "best_step_ms": 1e3 * min(step[name]),
            "median_step_ms": 1e3 * statistics.median(step[name]),
            "five_rows_over_one_row": five[name] / one[name],
        }
    out["fused_over_unfused"] = min(step["unfused"]) / min(step["fused"])
    out["fused_over_unfused_median"] = statistics.median(step["unfused"]) / statistics.median(step["fused"])
    return out


def profile(path: Path, steps: int, top: int = 25) -> list[str]:
    """cProfile's top entries (cumulative and own time) of ``steps`` fused decode steps."""
    import cProfile
    import io
    import pstats

    model = FastModel.load(path, weights="int8", fused=True)
    decode_steps(model, 2)
    profiler = cProfile.Profile()
    profiler.enable()
    decode_steps(model, steps)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue().splitlines()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    report = compare(args.model, args.steps, args.repeats)
    if args.profile:
        report["profile_fused"] = profile(args.model, args.steps)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
