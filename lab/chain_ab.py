"""The int8 layer chain against the two graphs a layer it fuses, in ONE process, step by step.

``python -m lab.chain_ab MODEL.gguf [--steps 64] [--passes 24] [--chain-first]`` loads the int8
mode twice (``two`` first unless ``--chain-first``: whether the load order matters is a check):
``two`` with the chain cut after every layer (``VERISPEC_INT8_SPLIT_AFTER=all``: two graphs a
layer, the layout before engine/fused.py's LayerChain) and ``chain`` (one graph between two
attentions, the default). It decodes the same prompt greedily on both in lockstep, one 1-row step
of each in turn (the order alternating), so a burst of the machine's other work falls on both;
then alternates 1-row and 5-row passes (the head on every row, as a verify pass) the same way.
Prints JSON: per layout the onnxruntime calls a step makes (counted), the best and median step
(wall and ``time.process_time``), the best and median 1- and 5-row passes and their ratio; the
ratios two / chain (> 1: the chain is faster); whether both produced the same tokens and logits
(they must: the chain changes no bit); the load average before and after. Set
``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS``; on a shared machine only these in-run ratios
mean anything.
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

from verispec.engine.fused import SPLIT_ENV
from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies
LAYOUTS = {"two": "all", "chain": "none"}


def load(path: Path, split: str) -> FastModel:
    saved = os.environ.get(SPLIT_ENV)
    os.environ[SPLIT_ENV] = split
    try:
        return FastModel.load(path, weights="int8", fused=True, layer_kernel="mlas")
    finally:
        if saved is None:
            del os.environ[SPLIT_ENV]
        else:
            os.environ[SPLIT_ENV] = saved


def _timed(model: FastModel, tokens: list[int], cache: Any, last_only: bool) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    logits = model.forward(tokens, cache, last_only=last_only).logits
    return time.perf_counter() - t0, time.process_time() - c0, logits


def _summary(values: list[float]) -> dict[str, float]:
    return {"best_ms": 1e3 * min(values), "median_ms": 1e3 * statistics.median(values)}


def compare(path: Path, steps: int, passes: int, chain_first: bool = False) -> dict[str, Any]:
    names = list(LAYOUTS)[::-1] if chain_first else list(LAYOUTS)
    loaded = {name: load(path, LAYOUTS[name]) for name in names}  # the load order: a placement check
    models = {name: loaded[name] for name in LAYOUTS}
    load_average = [os.getloadavg()[0]]
    caches = {name: m.new_cache(len(PROMPT) + steps + 8) for name, m in models.items()}
    logits = {name: m.forward(PROMPT, caches[name], last_only=True).logits for name, m in models.items()}
    wall: dict[str, list[float]] = {name: [] for name in models}
    cpu: dict[str, list[float]] = {name: [] for name in models}
    tokens: dict[str, list[int]] = {name: [] for name in models}
    rows: dict[str, list[Any]] = {name: [] for name in models}
    calls: dict[str, int] = {}
    order = list(models)
    for step in range(steps):
        for name in order if step % 2 == 0 else order[::-1]:
            token = int(np.argmax(logits[name][-1]))
            tokens[name].append(token)
            before = OrtGraph.calls
            w, c, logits[name] = _timed(models[name], [token], caches[name], True)
            calls[name] = OrtGraph.calls - before
            wall[name].append(w)
            cpu[name].append(c)
            rows[name].append(logits[name])
    pass_s: dict[str, dict[int, list[float]]] = {name: {1: [], 5: []} for name in models}
    for i in range(passes):
        for name in order if i % 2 == 0 else order[::-1]:
            for k in (1, 5):
                cache = models[name].new_cache(len(PROMPT) + k + 1)
                models[name].forward(PROMPT, cache, last_only=True)
                pass_s[name][k].append(_timed(models[name], PROMPT[:k], cache, False)[0])
    load_average.append(os.getloadavg()[0])
    out: dict[str, Any] = {
        "model": path.name,
        "threads": os.environ.get("VERISPEC_THREADS", "default"),
        "steps": steps,
        "passes": passes,
        "loaded_first": names[0],
        "load_average": load_average,
    }
    for name in models:
        one, five = pass_s[name][1], pass_s[name][5]
        out[name] = {
            "onnxruntime_calls_per_step": calls[name],
            "step_wall": _summary(wall[name]),
            "step_cpu": _summary(cpu[name]),
            "one_row_pass": _summary(one),
            "five_row_pass": _summary(five),
            "five_over_one_best": min(five) / min(one),
            "five_over_one_median": statistics.median(five) / statistics.median(one),
        }
    two, chain = out["two"], out["chain"]
    out["two_over_chain"] = {
        key: two[part][stat] / chain[part][stat]
        for key, part, stat in (
            ("step_wall_best", "step_wall", "best_ms"),
            ("step_wall_median", "step_wall", "median_ms"),
            ("step_cpu_best", "step_cpu", "best_ms"),
            ("step_cpu_median", "step_cpu", "median_ms"),
        )
    }
    out["same_tokens"] = tokens["two"] == tokens["chain"]
    out["same_logits"] = all(np.array_equal(a, b) for a, b in zip(rows["two"], rows["chain"]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--passes", type=int, default=24)
    parser.add_argument("--chain-first", action="store_true", help="load the chain first (default: two first)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.passes < 1:
        parser.error("--steps and --passes must be at least 1")
    print(json.dumps(compare(args.model, args.steps, args.passes, args.chain_first), indent=1))


if __name__ == "__main__":
    main()
