"""A measured run of the depth test at its full design (not collected by pytest: minutes).

    OPENBLAS_NUM_THREADS=1 python -m lab.measure.decoder_depth {deviation|correct} [max_tokens] [rows] [workers]
    OPENBLAS_NUM_THREADS=1 python -m lab.measure.decoder_depth ratio [max_tokens] [generations]

On a tiny synthetic GGUF (tests/support/tiny_gguf.py: vocab 64, one layer, 32 wide), the case
of tests/test_decoder_depth.py with full support (temperature 1, repeat penalty 1.5), alpha 1e-3
(check-decoder's default), the design: power 0.99 against TV 0.05 on 10% of positions.
``deviation``: spec.decoder.mutants.DesignDeviation (exactly that deviation, flattened) must
FAIL; ``correct``: the mutant loop without bugs must PASS after the final look. Prints the
verdict, the design's N, the seconds taken, the CPU seconds of this process and of the workers
(on a loaded machine the wall time is mostly waiting) and the load average before and after. ``rows``: where
the decoder's own logits come from: ``path`` (default: spec/decoder/prefix_rows.py, one KV cache along
the decode path) or ``one-pass`` (spec.decoder.check.ReferenceLogits: one forward of the whole
prefix per new prefix, the former way). ``workers`` (``correct`` only, default 1): the bug-free
loop decodes each block's generations in that many forked processes (2: both cores).

``ratio``: the same bounded work (``generations`` generations of the bug-free loop through the
depth test, its pilot included, same seeds) timed both ways in one run, alternating, three rounds
each: the speed-up of the path rows, measured on the same work in the same run.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import sys
import time
from collections.abc import Callable
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.depth import tiny_depth_model
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.check import ReferenceLogits
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows, verdict_json
from verispec.spec.decoder.first_tokens import CachedLaw
from verispec.spec.decoder.mutants import DesignDeviation, LoopDecoder
from verispec.spec.decoder.prefix_rows import PathRows

EOG = 2
PARAMS = SamplingParams(temperature=1.0, repeat_penalty=1.5, repeat_last_n=32)
DRAFT = SamplingParams(temperature=1.5, top_k=12)
ROWS: dict[str, Callable[[Model], Any]] = {"path": PathRows, "one-pass": ReferenceLogits}  # model -> row provider


class FreshLoop:
    """The bug-free loop, its memos fresh per block (bounded memory over 10^5 tokens); with
    ``workers`` > 1 the block's generations are decoded in that many forked processes (the
    decoder under test on both cores; the depth test itself runs in this process)."""

    def __init__(self, model: Model, rows: str = "path", workers: int = 1) -> None:
        self.model = model
        self.rows = ROWS[rows]
        self.pool: Pool | None = None
        self.workers = workers

    def generate(self, prompt_ids, params, max_tokens, n, seed, min_tokens=0):  # type: ignore[no-untyped-def]
        if self.workers == 1:
            return decode_block((self, prompt_ids, params, max_tokens, n, seed, min_tokens, range(n)))
        if self.pool is None:  # forked at the first block, once WORKER holds this engine
            WORKER["engine"] = self
            self.pool = multiprocessing.get_context("fork").Pool(self.workers)
        parts = [range(j, n, self.workers) for j in range(self.workers)]
        done = self.pool.map(
            decode_block, [(None, prompt_ids, params, max_tokens, n, seed, min_tokens, part) for part in parts]
        )
        out: list[dict[str, Any] | None] = [None] * n
        for part, gens in zip(parts, done):
            for i, g in zip(part, gens):
                out[i] = g
        return out


WORKER: dict[str, FreshLoop] = {}


def decode_block(task: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Generations ``indices`` of one block: generation i is the loop's decode on the i-th seed of
    ``seed`` (as LoopDecoder.generate draws them), so the split over workers changes no stream."""
    engine, prompt_ids, params, max_tokens, n, seed, min_tokens, indices = task
    engine = engine or WORKER["engine"]
    loop = LoopDecoder(engine.rows(engine.model), DRAFT, 2, eog=frozenset({EOG}), law=CachedLaw())
    seeds = np.random.default_rng(seed).integers(2**63, size=n)
    out = []
    for i in indices:
        traced = loop.decode(
            prompt_ids, params, max_tokens, np.random.default_rng(int(seeds[i])), min_tokens=min_tokens
        )
        out.append({"ids": traced.ids, "cycles": [list(c) for c in traced.cycles]})
    return out


class FreshDeviation(FreshLoop):
    def generate(self, prompt_ids, params, max_tokens, n, seed, min_tokens=0):  # type: ignore[no-untyped-def]
        return DesignDeviation(self.rows(self.model), eog=frozenset({EOG})).generate(
            prompt_ids, params, max_tokens, n, seed, min_tokens
        )


def tiny_model() -> Model:
    """The depth test's tiny model (tests/support/depth.py), written to /tmp."""
    return tiny_depth_model(Path("/tmp") / "verispec-depth-tiny.gguf")


def ratio(model: Model, case: DepthCase, generations: int) -> None:
    seconds: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(3):
        for name in ROWS:
            started = time.perf_counter()
            check_depth(FreshLoop(model, name), reference_rows(model), case, alpha=1e-3, max_generations=generations)
            seconds[name].append(time.perf_counter() - started)
    best = {name: min(s) for name, s in seconds.items()}
    print(
        {
            "work": f"{generations} generations + pilot, max_tokens {case.max_tokens}",
            "seconds": seconds,
            "speed-up (best of 3)": round(best["one-pass"] / best["path"], 2),
            "load": os.getloadavg(),
        }
    )


def main() -> None:
    which = sys.argv[1]
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    model = tiny_model()
    case = DepthCase((1, 5, 9, 13), PARAMS, max_tokens, frozenset({EOG}))
    if which == "ratio":
        ratio(model, case, int(sys.argv[3]) if len(sys.argv) > 3 else 200)
        return
    rows = sys.argv[3] if len(sys.argv) > 3 else "path"
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    engine = FreshDeviation(model, rows) if which == "deviation" else FreshLoop(model, rows, workers)
    load_before = os.getloadavg()
    started = time.perf_counter()
    verdict = check_depth(engine, reference_rows(model), case, alpha=1e-3)
    seconds = round(time.perf_counter() - started, 1)
    if engine.pool is not None:
        engine.pool.close()
        engine.pool.join()  # the workers' CPU time is counted once they are reaped
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        {
            **verdict_json(verdict),
            "seconds": seconds,
            "rows": rows,
            "workers": workers,
            "cpu_s": {
                "this process": round(own.ru_utime + own.ru_stime, 1),
                "workers": round(children.ru_utime + children.ru_stime, 1),
            },
            "load_before": load_before,
            "load_after": os.getloadavg(),
        }
    )


if __name__ == "__main__":
    main()
