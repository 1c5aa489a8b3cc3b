"""The int8 engine's plain decode step against llama.cpp's, interleaved in one process, with the
bytes-streamed bound beside them.

``python -m lab.llama_plain_ab MODEL.gguf [--steps 32] [--rounds 4]`` (llama-cpp-python installed;
``VERISPEC_THREADS`` = the threads both get, one process per count: onnxruntime's pool is a process
setting). Both decode the same prompt ids greedily in lockstep, a step of one then a step of the
other (alternating which goes first round by round), for ``--steps`` 1-row steps (llama.cpp: ``Llama.eval`` of one token, the argmax of its
logits; the engine: ``FastModel.forward`` of one token, the head on that row). Prints JSON: per
engine the best and median step, ``int8_over_llama_cpp`` (llama.cpp's best step / the engine's:
> 1, the engine is faster) and on medians; the bound: the file's bytes over the read rate of one
core (a NumPy sum over 400 MB, timed in the same run), and each best step over it; whether both
generated the same tokens (not required: two int8 laws); the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from verispec.engine import matmul
from verispec.engine.model import FastModel

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies


def engine_decoder(model: FastModel, steps: int) -> Iterator[tuple[float, int]]:
    """Greedy 1-row steps after the prompt: (seconds, token) per step."""
    cache = model.new_cache(len(PROMPT) + steps + 1)
    logits = model.forward(PROMPT, cache, last_only=True).logits[-1]
    for _ in range(steps):
        token = int(np.argmax(logits))
        t0 = time.perf_counter()
        logits = model.forward([token], cache, last_only=True).logits[-1]
        yield time.perf_counter() - t0, token


def llama_decoder(llm: Any, steps: int) -> Iterator[tuple[float, int]]:
    """llama.cpp's greedy steps after the same prompt ids: (seconds of ``eval([token])``, token)."""
    llm.reset()
    llm.eval(PROMPT)
    for _ in range(steps):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = time.perf_counter()
        llm.eval([token])
        yield time.perf_counter() - t0, token


def lockstep(model: FastModel, llm: Any, steps: int, engine_first: bool) -> dict[str, list[tuple[float, int]]]:
    """Both decoders a step each in turn, so a change of load falls on both alike."""
    decoders = {"int8": engine_decoder(model, steps), "llama_cpp": llama_decoder(llm, steps)}
    names = ["int8", "llama_cpp"] if engine_first else ["llama_cpp", "int8"]
    out: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
    for _ in range(steps):
        for name in names:
            out[name].append(next(decoders[name]))
    return out


def read_rate() -> float:
    """Bytes a second one core reads (a NumPy float32 sum over 400 MB, best of 3)."""
    data = np.ones(100_000_000, dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - t0)
    return data.nbytes / best


def compare(path: Path, steps: int, rounds: int) -> dict[str, Any]:
    import llama_cpp  # type: ignore[import-not-found, unused-ignore]

    threads = matmul.default_threads()
    load = [os.getloadavg()[0]]
    model = FastModel.load(path, weights="int8")
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=len(PROMPT) + steps + 8, n_threads=threads, n_threads_batch=threads, verbose=False
    )
    lockstep(model, llm, 2, True)  # warm-up
    times: dict[str, list[float]] = {"int8": [], "llama_cpp": []}
    tokens: dict[str, list[int]] = {}
    for r in range(rounds):
        for name, run in lockstep(model, llm, steps, engine_first=r % 2 == 0).items():
            times[name] += [t for t, _ in run]
            tokens[name] = [tok for _, tok in run]
    rate = read_rate()
    load.append(os.getloadavg()[0])
    bound = path.stat().st_size / rate
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "model": path.name,
        "threads": threads,
        "steps": steps,
        "rounds": rounds,
        "llama_cpp_version": getattr(llama_cpp, "__version__", None),
        "load_average": load,
        **{
            name: {
                "best_step_ms": 1e3 * best[name],
                "median_step_ms": 1e3 * median[name],
                "best_over_bound": best[name] / bound,
            }
            for name in times
        },
        "int8_over_llama_cpp": best["llama_cpp"] / best["int8"],
        "int8_over_llama_cpp_median": median["llama_cpp"] / median["int8"],
        "bound_ms": 1e3 * bound,
        "read_gb_s": rate / 1e9,
        "same_tokens": tokens["int8"] == tokens["llama_cpp"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    print(json.dumps(compare(args.model, args.steps, args.rounds), indent=1))


if __name__ == "__main__":
    main()
