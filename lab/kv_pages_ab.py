"""The engine's KV cache on 4 KiB pages (what it runs) or on NumPy's 2 MiB pages: fresh processes taking turns.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.kv_pages_ab MODEL [--rounds 3] [--steps 96] [--json OUT]

Each child loads MODEL (int8), makes a cache of the context's length (``new_cache()``, as a draft
model's cache and a long request get), runs a 55-token prompt and ``--steps`` greedy steps, and
reports the resident memory the cache work added, the first prompt pass's time, the best and
median step's CPU time, and a digest of the tokens. The ``huge`` side allocates the cache with
``np.zeros`` (NumPy advises 2 MiB pages from 4 MiB up: what the engine did before), the ``small``
side with :func:`engine.pages.zeros_on_small_pages` (what it does). The tokens must agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from lab.load_memory import status_bytes
from lab.provenance import print_and_save, record

PROMPT = 55


def child(model_path: str, huge: bool, steps: int) -> dict[str, Any]:
    """One load, one prompt pass and ``steps`` greedy steps in a full-context cache."""
    import verispec.engine.model as engine_model
    from verispec.engine.model import FastModel

    if huge:  # the cache's K and V from np.zeros, as before: NumPy advises 2 MiB pages
        vars(engine_model)["zeros_on_small_pages"] = lambda shape, dtype: np.zeros(shape, dtype=dtype)
    model = FastModel.load(model_path, weights="int8")
    ids = np.arange(100, 100 + PROMPT, dtype=np.int64) % model.config.n_vocab
    before = status_bytes()["VmRSS"] / 2**20
    started = time.perf_counter()
    cache = model.new_cache()
    token = int(model.forward(ids, cache, last_only=True).logits[-1].argmax())
    first = time.perf_counter() - started
    tokens, cpu = [], []
    for _ in range(steps):
        clock = time.process_time()
        token = int(model.forward([token], cache, last_only=True).logits[-1].argmax())
        cpu.append(time.process_time() - clock)
        tokens.append(token)
    return {
        "rss_growth_mib": status_bytes()["VmRSS"] / 2**20 - before,
        "first_prompt_pass_ms": first * 1e3,
        "step_cpu_best_ms": min(cpu) * 1e3,
        "step_cpu_median_ms": statistics.median(cpu) * 1e3,
        "tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=("small", "huge"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.child == "huge", args.steps)))
        return
    from verispec.registry import resolve_model

    path = str(resolve_model(args.model)) if not Path(args.model).exists() else args.model
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {"small": [], "huge": []}
    for _ in range(args.rounds):
        for side in ("small", "huge"):
            command = [sys.executable, "-m", "lab.kv_pages_ab", path, "--steps", str(args.steps), "--child", side]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    digests = {r["tokens_sha256"] for side in runs.values() for r in side}
    if len(digests) != 1:
        raise SystemExit(f"the two allocations decoded different tokens: {sorted(digests)}")
    median = {
        side: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "tokens_sha256"}
        for side, rs in runs.items()
    }
    results: dict[str, Any] = {
        "model": Path(path).name,
        "rss_growth_mib_huge": median["huge"]["rss_growth_mib"],
        "rss_growth_mib_small": median["small"]["rss_growth_mib"],
        "first_prompt_pass_huge_over_small": median["huge"]["first_prompt_pass_ms"]
        / median["small"]["first_prompt_pass_ms"],
        "step_best_small_over_huge": median["small"]["step_cpu_best_ms"] / median["huge"]["step_cpu_best_ms"],
        "same_tokens": True,
        "runs": runs,
        "provenance": record("lab.kv_pages_ab", load_start),
    }
    print_and_save(results, args.json)


if __name__ == "__main__":
    main()
