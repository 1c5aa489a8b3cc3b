"""Does handing a load's memory back change the decode step? Both loads in one process, interleaved.

``python -m lab.hand_back_step_ab MODEL.gguf [--rounds 12] [--steps 16]`` loads the int8 mode twice
in this process: once as the engine does (file pages, the whole mapping and the freed heap handed
back) and once with every hand-back switched off (engine.pages / engine.matmul's calls replaced by
no-ops while it loads). Then, round by round, alternating which goes first, each model decodes the
same greedy steps; each step's ``process_time`` is recorded. Prints JSON: per variant the best and
median step (ms), ``with_over_without`` (median with / median without, > 1: the hand-backs cost
step time), whether the two produced the same tokens, the load average. Run with
``VERISPEC_THREADS=1``: process time then is the step's own CPU (one thread), which other
processes on the machine do not inflate the way they inflate wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both real vocabularies


HAND_BACKS = ("file-pages", "mapping", "heap", "ort-maps")


def load_without_hand_backs(path: Path, off: tuple[str, ...] = HAND_BACKS) -> Any:
    """The int8 load with the hand-backs named in ``off`` switched off (see :data:`HAND_BACKS`)."""
    from verispec.engine import matmul, pages, weights
    from verispec.engine.model import FastModel

    saved: dict[tuple[Any, str], Any] = {}
    by_name: dict[str, dict[tuple[Any, str], Callable[..., Any]]] = {
        "file-pages": {(weights, "drop_pages"): lambda view: False},
        "mapping": {(weights, "drop_mapping"): lambda view: False},
        "heap": {(matmul, "release_freed_memory"): lambda: None},
        "ort-maps": {(matmul, "drop_folder_pages"): lambda folder: 0, (pages, "drop_folders"): lambda folders: 0},
    }
    stubs = {key: stub for name in off for key, stub in by_name[name].items()}
    for (module, name), stub in stubs.items():
        saved[(module, name)] = getattr(module, name)
        setattr(module, name, stub)
    try:
        return FastModel.load(path, weights="int8")
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)


FAULTS: dict[str, int] = {}


def decode(model: Any, steps: int, name: str = "") -> tuple[list[float], list[int]]:
    cache = model.new_cache(len(PROMPT) + steps + 1)
    logits = model.forward(PROMPT, cache, last_only=True).logits[-1]
    times, tokens = [], []
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        token = int(np.argmax(logits))
        tokens.append(token)
        t0 = time.process_time()
        logits = model.forward([token], cache, last_only=True).logits[-1]
        times.append(time.process_time() - t0)
    FAULTS[name] = FAULTS.get(name, 0) + resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    return times, tokens


def main() -> None:
    from verispec.engine.model import FastModel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--off", default=",".join(HAND_BACKS), help=f"hand-backs switched off: of {HAND_BACKS}")
    parser.add_argument("--with-first", action="store_true", help="load the engine's way first")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    off = tuple(name for name in args.off.split(",") if name)
    unknown = set(off) - set(HAND_BACKS)
    if unknown:
        parser.error(f"unknown hand-backs {sorted(unknown)}")
    loads: dict[str, Callable[[], Any]] = {
        "without": lambda: load_without_hand_backs(args.model, off),
        "with": lambda: FastModel.load(args.model, weights="int8"),
    }
    load_order = ["with", "without"] if args.with_first else ["without", "with"]
    models = {name: loads[name]() for name in load_order}
    times: dict[str, list[float]] = {"with": [], "without": []}
    tokens: dict[str, list[int]] = {}
    for model in models.values():
        decode(model, 4)  # warm-up
    for round_index in range(args.rounds):
        order = ["with", "without"] if round_index % 2 == 0 else ["without", "with"]
        for name in order:
            found, tokens[name] = decode(models[name], args.steps, name)
            times[name] += found
    out: dict[str, Any] = {
        "model": args.model.name,
        "threads": os.environ.get("VERISPEC_THREADS"),
        "off": off,
        "loaded_first": load_order[0],
    }
    for name, found in times.items():
        out[name] = {
            "best_step_ms": 1e3 * min(found),
            "median_step_ms": 1e3 * statistics.median(found),
            "minor_faults_per_step": FAULTS.get(name, 0) / len(found),
        }
    out["with_over_without"] = out["with"]["median_step_ms"] / out["without"]["median_step_ms"]
    out["same_tokens"] = tokens["with"] == tokens["without"]
    out["load_average"] = [load_start, os.getloadavg()[0]]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
