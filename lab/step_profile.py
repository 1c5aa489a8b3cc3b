"""Where one int8 decode step goes: wall time per component, accumulated over greedy 1-row steps.

``python -m lab.step_profile MODEL.gguf [--steps 64] [--repeats 3]`` prints JSON: milliseconds per
step in the layer graphs (engine/fused.py's chain: ``pre`` = a layer's first half alone, ``post`` =
its second half alone, ``link`` = one layer's second half with the next's first; onnxruntime calls
including their Python wrapper),
the attention (the batch-invariant Python attention), the KV store, the RoPE tables, the head
(final norm, the head's kernel calls, softcap), the embedding, and ``other`` (the rest of
``forward``: the loop, checks, the finite test); the number of onnxruntime calls a step makes;
the best and median step. The components are timed by wrapping the model's own methods (a
``perf_counter`` pair each, ~0.1 us, against ~20-400 us a component), so their sum is the
measured step. ``--cpu`` times CPU seconds (``time.process_time``; at 1 thread the work of the
step, less sensitive to a loaded machine than wall time). Set ``OPENBLAS_NUM_THREADS=1`` and
``VERISPEC_THREADS`` as the run you compare with; on a shared machine compare only components
measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies


class Clock:
    """Seconds and calls accumulated per component name (``timer``: wall or CPU seconds)."""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.timer = timer

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = self.timer()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + self.timer() - t0
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def instrument(model: FastModel, clock: Clock) -> None:
    """Wrap the model's components (instance attributes shadow the class's methods)."""
    chain = model.store.fused_layers
    if chain is None:
        raise SystemExit("step_profile measures the fused int8 mode (load with weights='int8', fused)")
    for name, graphs in (("pre", chain.entry), ("post", chain.exit), ("link", chain.link)):
        for graph in graphs.values():  # both call paths (the model's io_binding picks one; a 1-row
            # bound call never goes through run, so nothing is timed twice)
            graph.run = clock.wrap(name, graph.run)  # type: ignore[method-assign]
            graph.run_bound = clock.wrap(name, graph.run_bound)  # type: ignore[method-assign]
    for attr, name in (
        ("_attend_invariant", "attention"),
        ("head", "head"),
        ("embed", "embed"),
        ("_rope_tables", "rope_tables"),
    ):
        setattr(model, attr, clock.wrap(name, getattr(model, attr)))
    forward = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:  # onnxruntime runs of either call path (OrtGraph.calls)
        before = OrtGraph.calls
        try:
            return forward(*args, **kwargs)
        finally:
            clock.calls["onnxruntime_calls"] = clock.calls.get("onnxruntime_calls", 0) + OrtGraph.calls - before

    model.forward = clock.wrap("step", counted)  # type: ignore[method-assign]


def steps(model: FastModel, n: int, clock: Clock) -> list[float]:  # seconds on the clock's timer
    """Greedy 1-row steps after the prompt; the seconds of each (the clock counts only these)."""
    cache = model.new_cache(len(PROMPT) + n + 8)
    cache_store = cache.store
    cache.store = clock.wrap("kv_store", cache_store)  # type: ignore[method-assign]
    logits = model.forward(PROMPT, cache, last_only=True).logits[-1]
    clock.reset()
    times = []
    for _ in range(n):
        token = int(np.argmax(logits))
        t0 = clock.timer()
        logits = model.forward([token], cache, last_only=True).logits[-1]
        times.append(clock.timer() - t0)
    return times


def profile(path: Path, n_steps: int, repeats: int, cpu: bool = False) -> dict[str, Any]:
    model = FastModel.load(path, weights="int8", fused=True)
    clock = Clock(time.process_time if cpu else time.perf_counter)
    instrument(model, clock)
    steps(model, 2, clock)  # warm-up
    load = [os.getloadavg()[0]]
    best: dict[str, float] | None = None
    all_times: list[float] = []
    calls: dict[str, int] = {}
    for _ in range(repeats):
        times = steps(model, n_steps, clock)
        all_times += times
        total = sum(times)
        if best is None or total < best["_total"]:
            best = dict(clock.seconds, _total=total)
            calls = dict(clock.calls)
    load.append(os.getloadavg()[0])
    assert best is not None
    per_step = {k: 1e3 * v / n_steps for k, v in best.items() if not k.startswith("_")}
    # wrappers nest (kv_store and attention are inside forward, pre/post too): other is the step less the parts
    parts = ("pre", "post", "link", "attention", "kv_store", "rope_tables", "head", "embed")
    per_step["other"] = per_step["step"] - sum(per_step.get(k, 0.0) for k in parts)
    return {
        "model": path.name,
        "threads": os.environ.get("VERISPEC_THREADS", "default"),
        "steps": n_steps,
        "repeats": repeats,
        "timer": "process_time" if cpu else "perf_counter",
        "load_average": load,
        "ms_per_step": {k: round(v, 3) for k, v in per_step.items()},
        "onnxruntime_calls_per_step": calls.get("onnxruntime_calls", 0) / n_steps,
        "best_step_ms": 1e3 * min(all_times),
        "median_step_ms": 1e3 * statistics.median(all_times),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="CPU seconds (time.process_time), not wall")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    print(json.dumps(profile(args.model, args.steps, args.repeats, args.cpu), indent=1))


if __name__ == "__main__":
    main()
