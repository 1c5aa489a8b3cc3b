"""Batched decoding's cost on a real model: CPU a token at several lockstep widths, same work (minutes; not collected by pytest).

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 nice -n 10 python -m lab.measure.batched_decoding [MODEL] [GENERATIONS] [WIDTHS]

(defaults: smollm2-135m 32 1,8,16,32). One int8 engine decodes the same GENERATIONS generations of
64 tokens (check-decoder's verispec defaults, the n-gram draft, k = 2, block seed 1) once per
width; the tokens are asserted equal across widths (the batched decoder's contract), so every
width does the same work. For each: CPU seconds a token (``process_time``: every thread), wall
seconds, the load average beside it. At the best width, the decomposition of the CPU: the fused
graphs (pre, post) and the head (onnxruntime calls), the per-row attention
(``_attend_invariant``), both timed by ``thread_time`` on the scheduler's thread, and the rest
(the loops' Python: drafting, the target law, verification, the scheduler). Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from verispec.decoder.ours import EngineDecoder
from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel
from verispec.reference.sampling import SamplingParams
from verispec.registry import resolve_model

PROMPT = "The cat sat on the"
PARAMS = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)  # check-decoder's verispec defaults
MAX_TOKENS = 64


def decode(decoder: EngineDecoder, prompt: tuple[int, ...], n: int, width: int) -> tuple[list[Any], dict[str, float]]:
    decoder.batch = width
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    gens = decoder.generate(prompt, PARAMS, MAX_TOKENS, n, seed=1)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    tokens = sum(len(g["ids"]) for g in gens)
    return gens, {
        "width": width,
        "tokens": tokens,
        "cpu_ms_per_token": round(1e3 * cpu / tokens, 2),
        "wall_s": round(wall, 1),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


class Timers:
    """thread_time of the model's parts, wrapped around the class methods for one run."""

    def __init__(self) -> None:
        self.seconds = {"graphs_pre_post": 0.0, "head": 0.0, "attention_per_row": 0.0}
        self.saved: list[tuple[type, str, Any]] = []
        self.in_head = False  # the head's own onnxruntime calls count as the head's
        self.in_graph = False  # a graph run inside another graph run is timed once

    def wrap(self, owner: type, name: str, key: str) -> None:
        original = getattr(owner, name)
        self.saved.append((owner, name, original))

        def timed(*args: Any, **kwargs: Any) -> Any:
            # a graph run inside the head, or inside another graph run (run_bound falls back to run
            # for a prefill), is timed by the outer one only
            if key == "graphs_pre_post" and (self.in_head or self.in_graph):
                return original(*args, **kwargs)
            began = time.thread_time()
            self.in_head = self.in_head or key == "head"
            self.in_graph = self.in_graph or key == "graphs_pre_post"
            try:
                return original(*args, **kwargs)
            finally:
                self.in_head = self.in_head and key != "head"
                self.in_graph = self.in_graph and key != "graphs_pre_post"
                self.seconds[key] += time.thread_time() - began

        setattr(owner, name, timed)

    def __enter__(self) -> "Timers":
        self.wrap(OrtGraph, "run", "graphs_pre_post")
        self.wrap(OrtGraph, "run_bound", "graphs_pre_post")  # the layer chain's path (IO binding)
        self.wrap(FastModel, "head", "head")
        self.wrap(FastModel, "_attend_invariant", "attention_per_row")
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self.saved):
            setattr(owner, name, original)


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    widths = [int(w) for w in (sys.argv[3] if len(sys.argv) > 3 else "1,8,16,32").split(",")]
    decoder = EngineDecoder(resolve_model(model), "int8")
    assert getattr(decoder.model, "batches_spans", False), "the int8 engine does not batch spans here"
    tokenizer = decoder.tokenizer
    prompt = tuple(tokenizer.encode(PROMPT, add_bos=tokenizer.add_bos, parse_special=True))
    decoder.generate(prompt, PARAMS, 8, 2, seed=0)  # warm
    out: dict[str, Any] = {"model": model, "generations": n, "max_tokens": MAX_TOKENS, "runs": []}
    reference: list[Any] | None = None
    for width in widths:
        gens, row = decode(decoder, prompt, n, width)
        assert reference is None or gens == reference, f"width {width} decoded other tokens"
        reference = gens
        out["runs"].append(row)
        print(json.dumps(row), flush=True)
    best = min(out["runs"], key=lambda r: r["cpu_ms_per_token"])
    with Timers() as timers:
        cpu = time.process_time()
        gens, row = decode(decoder, prompt, n, best["width"])
        cpu = time.process_time() - cpu
    assert gens == reference
    per_token: Callable[[float], float] = lambda s: round(1e3 * s / row["tokens"], 2)  # noqa: E731
    parts = {key: per_token(s) for key, s in timers.seconds.items()}
    parts["rest_python"] = round(per_token(cpu) - sum(parts.values()), 2)
    out["decomposition_at_best_width"] = {
        "width": best["width"],
        "cpu_ms_per_token": per_token(cpu),
        **parts,
        "load_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
