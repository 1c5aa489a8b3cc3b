"""The bench's two clocks: the least-disturbed call of a function, and each step of a decode."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from verispec.engine import sampling as fast_sampling
from verispec.engine.model import FastModel
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of ``repeats`` calls (after one warm-up): the least-disturbed run."""
    fn()
    best = math.inf
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def decode_steps(model: "FastModel | Model", prompt: list[int], n: int) -> list[float]:
    """Seconds of each greedy decode step (one-token forward + the engine's law + draw), on
    either engine (the law is bit-identical on both; the forward is what differs)."""
    cache = model.new_cache(len(prompt) + n + 1)
    logits = model.forward(prompt, cache).logits[-1]
    history = list(prompt)
    params = SamplingParams(temperature=0.0)
    rng = np.random.default_rng(0)
    times: list[float] = []
    for _ in range(max(1, n)):
        t0 = time.perf_counter()
        token = fast_sampling.sample(fast_sampling.target_distribution(logits, history, params), rng)
        history.append(token)
        logits = model.forward([token], cache).logits[-1]  # one row: the head runs on it alone
        times.append(time.perf_counter() - t0)
    return times
