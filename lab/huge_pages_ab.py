"""A load's memory on 2 MiB pages or on 4 KiB pages: the int8 decode step, fresh processes taking turns.

``python -m lab.huge_pages_ab MODEL [--weights int8] [--rounds 4] [--steps 32] [--json OUT]`` runs,
``--rounds`` times, one child process with ``VERISPEC_HUGE_PAGES=1`` and one with ``=0`` (the
order alternating round by round, so a burst of the machine's other work falls on both). Each
child loads ``MODEL`` once, as a user's process does (a second load in one process runs at
another speed: where its memory lands differs), decodes greedy 1-row steps (lab/fused_bench.py's
``decode_steps``) and reports its best step of CPU time (``time.process_time``: at 1 thread the
step's own work), the load's CPU seconds, the MiB on 2 MiB pages (engine/huge_pages.py) and its
RSS. Both sides' steps compute the same logits (tests/test_engine_huge_pages.py). Set
``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lab.load_memory import status_bytes
from lab.provenance import print_and_save, record


def child(model: str, weights: str, steps: int) -> dict[str, float]:
    """One load, ``steps`` greedy steps three times: the best step's CPU ms and the load's figures."""
    from lab.fused_bench import decode_steps
    from verispec.engine.model import FastModel
    from verispec.registry import resolve_model

    started = time.process_time()
    loaded = FastModel.load(resolve_model(model), weights=weights)
    load_cpu = time.process_time() - started
    decode_steps(loaded, 2)  # warm-up: first calls allocate
    best = float("inf")
    for _ in range(3):
        begin = time.process_time()
        decode_steps(loaded, steps)
        best = min(best, (time.process_time() - begin) / steps)
    return {
        "step_cpu_ms": 1e3 * best,
        "load_cpu_s": load_cpu,
        "huge_page_mib": loaded.store.huge_page_bytes / 2**20,
        "rss_mib": status_bytes()["VmRSS"] / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a registered model name or a GGUF path")
    parser.add_argument("--weights", default="int8", choices=("int8", "f32"))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--json", type=Path, help="save the result here (with provenance)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.weights, args.steps)))
        return
    runs: dict[str, list[dict[str, float]]] = {"huge": [], "small": []}
    load_start = os.getloadavg()[0]
    for round_ in range(args.rounds):
        order = ("huge", "small") if round_ % 2 == 0 else ("small", "huge")
        for side in order:
            env = {**os.environ, "VERISPEC_HUGE_PAGES": "1" if side == "huge" else "0"}
            command = [sys.executable, "-m", "lab.huge_pages_ab", args.model, "--weights", args.weights]
            out = subprocess.run(
                [*command, "--steps", str(args.steps), "--child"], env=env, capture_output=True, text=True, check=True
            )
            runs[side].append(json.loads(out.stdout))
    median = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()}
    result: dict[str, Any] = {
        "provenance": record("lab.huge_pages_ab", load_start),
        "model": args.model,
        "weights": args.weights,
        "step_small_over_huge": median["small"]["step_cpu_ms"] / median["huge"]["step_cpu_ms"],
        "load_cpu_huge_minus_small_s": median["huge"]["load_cpu_s"] - median["small"]["load_cpu_s"],
        "huge_page_mib": median["huge"]["huge_page_mib"],
        "rss_huge_over_small": median["huge"]["rss_mib"] / median["small"]["rss_mib"],
        "runs": runs,
    }
    print_and_save(result, str(args.json) if args.json else None)


if __name__ == "__main__":
    main()
