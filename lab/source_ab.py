"""Two source trees of verispec, the same int8 decode, interleaved: a before / after ratio in one run.

``python -m lab.source_ab BEFORE_TREE AFTER_TREE MODEL.gguf [--steps 48] [--rounds 6]`` runs, round
by round, one child process per tree (``PYTHONPATH`` = the tree, so each imports its own
``verispec``), alternating which goes first. Each child loads the int8 mode, decodes the same
prompt greedily for ``--steps`` 1-row steps after a warm-up, and reports every step's seconds and
the tokens, then times three 1-row and 5-row passes (the head on every row, as a verify pass).
Prints JSON: per tree the best and median step over all rounds; ``after_over_before``
(best before / best after, > 1: the after tree is faster) and the same on medians and on the
median step's CPU time (``time.process_time``: at 1 thread less sensitive to the machine's other
work than wall time); per tree the best 5-row pass over the best 1-row pass; whether both
trees produced the same tokens (a change that claims bit-identity must keep them); the load
average before and after. Set ``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS`` as the run
compared with; on a shared machine only ratios from one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies

CHILD = """
import json, sys, time
import numpy as np
from verispec.engine.model import FastModel
model = FastModel.load(sys.argv[1], weights="int8")
prompt, steps = json.loads(sys.argv[2]), int(sys.argv[3])
def decode(n):
    cache = model.new_cache(len(prompt) + n + 1)
    logits = model.forward(prompt, cache, last_only=True).logits[-1]
    times, cpu, tokens = [], [], []
    for _ in range(n):
        token = int(np.argmax(logits))
        tokens.append(token)
        t0, c0 = time.perf_counter(), time.process_time()
        logits = model.forward([token], cache, last_only=True).logits[-1]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu, tokens
def rows_pass(rows):
    cache = model.new_cache(len(prompt) + rows + 1)
    model.forward(prompt, cache, last_only=True)
    t0 = time.perf_counter()
    model.forward(prompt[:rows], cache)
    return time.perf_counter() - t0
decode(4)
times, cpu, tokens = decode(steps)
passes = {str(r): [] for r in (1, 5)}
for _ in range(3):
    for r in (1, 5):
        passes[str(r)].append(rows_pass(r))
print(json.dumps({"times": times, "cpu": cpu, "tokens": tokens, "passes": passes}))
"""


def child(tree: Path, model: Path, steps: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), json.dumps(PROMPT), str(steps)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(before: Path, after: Path, model: Path, steps: int, rounds: int) -> dict[str, Any]:
    load = [os.getloadavg()[0]]
    times: dict[str, list[float]] = {"before": [], "after": []}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    passes: dict[str, dict[str, list[float]]] = {"before": {"1": [], "5": []}, "after": {"1": [], "5": []}}
    tokens: dict[str, list[int]] = {}
    for r in range(rounds):
        order = [("before", before), ("after", after)]
        for name, tree in order if r % 2 == 0 else order[::-1]:
            out = child(tree, model, steps)
            times[name] += out["times"]
            cpu[name] += out["cpu"]
            for rows in ("1", "5"):
                passes[name][rows] += out["passes"][rows]
            tokens[name] = out["tokens"]
    load.append(os.getloadavg()[0])
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    cpu_median = {k: statistics.median(v) for k, v in cpu.items()}
    five_over_one = {k: min(v["5"]) / min(v["1"]) for k, v in passes.items()}
    return {
        "cpu_after_over_before_median": cpu_median["before"] / cpu_median["after"],
        "five_rows_over_one_row": five_over_one,
        "model": model.name,
        "threads": os.environ.get("VERISPEC_THREADS", "default"),
        "steps": steps,
        "rounds": rounds,
        "load_average": load,
        "before": {"tree": str(before), "best_step_ms": 1e3 * best["before"], "median_step_ms": 1e3 * median["before"]},
        "after": {"tree": str(after), "best_step_ms": 1e3 * best["after"], "median_step_ms": 1e3 * median["after"]},
        "after_over_before": best["before"] / best["after"],
        "after_over_before_median": median["before"] / median["after"],
        "same_tokens": tokens["before"] == tokens["after"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    print(
        json.dumps(compare(args.before.resolve(), args.after.resolve(), args.model, args.steps, args.rounds), indent=1)
    )


if __name__ == "__main__":
    main()
