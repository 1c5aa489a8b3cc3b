"""The head mode section (``verispec bench --head sparse``): the sparse head beside the full head.

Plain greedy decoding of the same prompt on the int8 model with its full head and on a sparse-head
model sharing its weights (:meth:`engine.model.FastModel.with_head`), run in alternating rounds in
this one process (a burst of load falls on both), each step timed in two parts: the layers (up to
the head's input, :meth:`FastModel.last_head_input`) and the head with the greedy decision (the
full head's logits and the law's argmax, or :func:`engine.sparse_head.choose_token`). Reports per
head: median step seconds, tokens/s from it, the head's share of the summed step time, and for the
sparse head its work (rows from candidate chunks, full-head fallbacks by reason, chunks evaluated);
then ``sparse_over_full_tok_s`` and whether the tokens were the same (they must be). The load
average before and after goes with it: the machine may be shared.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from verispec.bench.machine import load_average
from verispec.engine import sampling as fast_sampling
from verispec.engine.model import FastModel
from verispec.engine.sparse_head import choose_token
from verispec.reference.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def timed_decode(model: FastModel, prompt: list[int], n: int) -> tuple[list[int], list[float], list[float]]:
    """Greedy decode ``n`` tokens after ``prompt``: (tokens, seconds of each step, of its head part).

    A step is the layers of one token then the head and the decision; the prompt's pass is not
    timed. The full head: its logits, the engine's law and draw; a sparse head: choose_token."""
    cache = model.new_cache(len(prompt) + n + 1)
    rng = np.random.default_rng(0)
    history = list(prompt)
    x = model.last_head_input(prompt, cache)
    tokens: list[int] = []
    steps: list[float] = []
    heads: list[float] = []
    t0 = time.perf_counter()
    for i in range(n + 1):
        t1 = time.perf_counter()
        if model.sparse_head is None:
            logits = model.head_from_input(x)[0]
            token = fast_sampling.sample(fast_sampling.target_distribution(logits, history, GREEDY), rng)
        else:
            token = choose_token(model, x, history, GREEDY, rng)
        t2 = time.perf_counter()
        if i > 0:  # the first decision follows the untimed prompt pass
            heads.append(t2 - t1)
            steps.append(t2 - t0)
        tokens.append(token)
        history.append(token)
        if i == n:
            break
        t0 = time.perf_counter()
        x = model.last_head_input([token], cache)
    return tokens, steps, heads


def head_section(path: Path, model: FastModel, prompt: list[int], tokens: int, rounds: int) -> dict[str, Any]:
    """Full against sparse head on ``model`` (int8, loaded from ``path``), ``rounds`` alternating
    rounds of ``tokens`` greedy steps each (the order flips every round)."""
    full = model if model.sparse_head is None else model.with_head("full", path)
    sparse = model if model.sparse_head is not None else model.with_head("sparse", path)
    assert sparse.sparse_head is not None
    sparse.sparse_head.stats.reset()
    load_start = load_average()
    steps: dict[str, list[float]] = {"full": [], "sparse": []}
    heads: dict[str, list[float]] = {"full": [], "sparse": []}
    outputs: dict[str, list[list[int]]] = {"full": [], "sparse": []}
    for r in range(max(1, rounds)):
        order = ("full", "sparse") if r % 2 == 0 else ("sparse", "full")
        for name in order:
            out, step_s, head_s = timed_decode(full if name == "full" else sparse, prompt, tokens)
            steps[name] += step_s
            heads[name] += head_s
            outputs[name].append(out)
    per_head: dict[str, Any] = {}
    for name in ("full", "sparse"):
        median = statistics.median(steps[name])
        per_head[name] = {
            "median_step_s": median,
            "tok_s": 1.0 / median,
            "head_share": sum(heads[name]) / sum(steps[name]),
            "median_head_s": statistics.median(heads[name]),
            "steps": len(steps[name]),
        }
    per_head["sparse"]["work"] = sparse.sparse_head.stats.as_dict()
    return {
        "prompt_tokens": len(prompt),
        "tokens": tokens,
        "rounds": rounds,
        "threads": _threads(),
        "full": per_head["full"],
        "sparse": per_head["sparse"],
        "sparse_over_full_tok_s": per_head["sparse"]["tok_s"] / per_head["full"]["tok_s"],
        "same_tokens": outputs["full"] == outputs["sparse"],
        "load_average_start": load_start,
        "load_average_end": load_average(),
    }


def _threads() -> int:
    from verispec.engine.matmul import default_threads

    return default_threads()
