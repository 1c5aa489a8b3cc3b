"""The int8 chain's graphs through IO binding against plain runs, on ONE loaded model, step by step.

``python -m lab.bind_ab MODEL.gguf [--steps 64] [--passes 24]`` loads the int8 mode once and flips
``FastModel.io_binding`` between ``plain`` (``OrtGraph.run``: onnxruntime allocates the outputs,
numpy the feeds, every call) and ``bound`` (``OrtGraph.run_bound``: outputs written into buffers
each graph owns per row count, inputs bound in place): the same sessions, the same weights, so the
only difference is the call path. It decodes the same prompt greedily on two caches in lockstep,
one 1-row step of each in turn (the order alternating, so a burst of the machine's other work
falls on both), then alternates 1-row and 5-row passes (the head on every row, as a verify pass).
Prints JSON: the onnxruntime calls a step makes, the best and median step (wall and
``time.process_time``), 1- and 5-row passes (wall and CPU), the ratios plain / bound (> 1: binding is faster),
whether both produced the same tokens, logits and hidden states (they must), the load average
before and after. Set ``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS``.
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

from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies
PATHS = {"plain": False, "bound": True}


def _timed(model: FastModel, bound: bool, tokens: list[int], cache: Any, last_only: bool) -> tuple[float, float, Any]:
    model.io_binding = bound
    t0, c0 = time.perf_counter(), time.process_time()
    result = model.forward(tokens, cache, last_only=last_only, return_hidden=True)
    return time.perf_counter() - t0, time.process_time() - c0, result


def _summary(values: list[float]) -> dict[str, float]:
    return {"best_ms": 1e3 * min(values), "median_ms": 1e3 * statistics.median(values)}


def compare(path: Path, steps: int, passes: int) -> dict[str, Any]:
    model = FastModel.load(path, weights="int8", fused=True, layer_kernel="mlas")
    load_average = [os.getloadavg()[0]]
    caches = {name: model.new_cache(len(PROMPT) + steps + 8) for name in PATHS}
    results = {name: _timed(model, bound, PROMPT, caches[name], True)[2] for name, bound in PATHS.items()}
    wall: dict[str, list[float]] = {name: [] for name in PATHS}
    cpu: dict[str, list[float]] = {name: [] for name in PATHS}
    tokens: dict[str, list[int]] = {name: [] for name in PATHS}
    kept: dict[str, list[Any]] = {name: [] for name in PATHS}  # every step's logits and hidden states
    calls: dict[str, int] = {}
    order = list(PATHS)
    for step in range(steps):
        for name in order if step % 2 == 0 else order[::-1]:
            token = int(np.argmax(results[name].logits[-1]))
            tokens[name].append(token)
            before = OrtGraph.calls
            w, c, results[name] = _timed(model, PATHS[name], [token], caches[name], True)
            calls[name] = OrtGraph.calls - before
            wall[name].append(w)
            cpu[name].append(c)
            kept[name] += [results[name].logits, *results[name].hidden]
    pass_s: dict[str, dict[int, list[float]]] = {name: {1: [], 5: []} for name in PATHS}
    pass_cpu: dict[str, dict[int, list[float]]] = {name: {1: [], 5: []} for name in PATHS}
    for i in range(passes):
        for name in order if i % 2 == 0 else order[::-1]:
            for k in (1, 5):
                cache = model.new_cache(len(PROMPT) + k + 1)
                model.io_binding = False
                model.forward(PROMPT, cache, last_only=True)
                w, c, result = _timed(model, PATHS[name], PROMPT[:k], cache, False)
                pass_s[name][k].append(w)
                pass_cpu[name][k].append(c)
                if i == 0:
                    kept[name] += [result.logits, *result.hidden]
    load_average.append(os.getloadavg()[0])
    out: dict[str, Any] = {
        "model": path.name,
        "threads": os.environ.get("VERISPEC_THREADS", "default"),
        "steps": steps,
        "passes": passes,
        "load_average": load_average,
    }
    for name in PATHS:
        one, five = pass_s[name][1], pass_s[name][5]
        out[name] = {
            "onnxruntime_calls_per_step": calls[name],
            "step_wall": _summary(wall[name]),
            "step_cpu": _summary(cpu[name]),
            "one_row_pass": _summary(one),
            "five_row_pass": _summary(five),
            "one_row_pass_cpu": _summary(pass_cpu[name][1]),
            "five_row_pass_cpu": _summary(pass_cpu[name][5]),
        }
    plain, bound = out["plain"], out["bound"]
    out["plain_over_bound"] = {
        key: plain[part][stat] / bound[part][stat]
        for key, part, stat in (
            ("step_wall_best", "step_wall", "best_ms"),
            ("step_wall_median", "step_wall", "median_ms"),
            ("step_cpu_best", "step_cpu", "best_ms"),
            ("step_cpu_median", "step_cpu", "median_ms"),
            ("one_row_pass_median", "one_row_pass", "median_ms"),
            ("five_row_pass_median", "five_row_pass", "median_ms"),
            ("one_row_pass_cpu_median", "one_row_pass_cpu", "median_ms"),
            ("five_row_pass_cpu_median", "five_row_pass_cpu", "median_ms"),
        )
    }
    out["same_tokens"] = tokens["plain"] == tokens["bound"]
    out["same_logits_and_hidden"] = all(np.array_equal(a, b) for a, b in zip(kept["plain"], kept["bound"]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--passes", type=int, default=24)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.passes < 1:
        parser.error("--steps and --passes must be at least 1")
    print(json.dumps(compare(args.model, args.steps, args.passes), indent=1))


if __name__ == "__main__":
    main()
