"""A measured run of ``check-decoder --ours --weights MODE --depth 64`` on a real model (minutes; not collected by pytest).

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 nice -n 10 python -m lab.measure.engine_depth [MODEL] [WEIGHTS] [BUDGET_S] [WORKERS]

(defaults: smollm2-135m int8 480 2; BUDGET_S 0: the costs only). First the three costs of one judged token, measured in this
process on the same generations (CPU seconds, so a loaded machine inflates them less than wall
time): decoding (the engine's speculative decoder, n-gram draft, k = 2), teacher forcing (one
k-row pass per generation; and its wall computed ahead on threads, as the checker does) and scoring (the target law and the statistics of every position).
Then the gate itself with ``WORKERS`` processes and a ``BUDGET_S`` budget: its design's N, the
tokens it judged, the wall time. The projection of the full-power run is N times the CPU seconds
a token costs, over the cores (the workers decode, this process teacher-forces and scores).
Prints one JSON object; the load average beside every number.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from verispec.decoder.api import FORCING_THREADS, check_decoder
from verispec.decoder.ours import EngineDecoder
from verispec.reference.sampling import SamplingParams
from verispec.registry import resolve_model
from verispec.spec.decoder.depth.forcing import ConcurrentRows, rows_in_order
from verispec.spec.decoder.depth.law import DepthCase, score

PROMPT = "The cat sat on the"
PARAMS = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)  # check-decoder's verispec defaults
COST_GENERATIONS = (
    32  # decoded in lockstep, as a depth block (up to 50 generations) is: 4 overstated the per-token cost
)


def given_rows(rows: Any, sequence: tuple[int, ...], length: int) -> Any:
    """A teacher-forced pass already computed: the rows, whatever is asked (scoring alone is timed)."""
    return rows


def costs(path: Path, weights: str) -> dict[str, float]:
    """CPU seconds per token of decoding, teacher forcing and scoring, on the same generations."""
    decoder = EngineDecoder(path, weights)
    tokenizer = decoder.tokenizer
    prompt = tuple(tokenizer.encode(PROMPT, add_bos=tokenizer.add_bos, parse_special=True))
    case = DepthCase(prompt, PARAMS, 64, frozenset(tokenizer.eog_ids))
    began = time.process_time()
    gens = decoder.generate(prompt, PARAMS, 64, COST_GENERATIONS, seed=1)
    decode = time.process_time() - began
    tokens = sum(len(g["ids"]) for g in gens)
    rows = [decoder.forced_rows(list(prompt) + g["ids"], len(prompt)) for g in gens]  # warm, then timed
    began = time.process_time()
    rows = [decoder.forced_rows(list(prompt) + g["ids"], len(prompt)) for g in gens]
    forcing = time.process_time() - began
    # the checker's way (spec/decoder/depth/forcing.py): the passes FORCING_THREADS generations ahead, wall per token
    ahead_rows = ConcurrentRows(decoder.forced_rows, FORCING_THREADS)
    keys = [g["ids"] for g in gens]
    began_wall = time.perf_counter()
    ahead = [f(prompt + tuple(ids), len(prompt)) for ids, f in zip(keys, rows_in_order(ahead_rows, prompt, keys, bool))]
    forcing_ahead_wall = time.perf_counter() - began_wall
    if not all(np.array_equal(a, b) for a, b in zip(ahead, rows)):
        raise AssertionError("the passes computed ahead on threads differ from the serial ones")
    rng = np.random.default_rng(0)
    began = time.process_time()
    for g, r in zip(gens, rows):
        score(functools.partial(given_rows, r), case, g["ids"], rng)
    scoring = time.process_time() - began
    return {
        "tokens": tokens,
        "decode_cpu_s_per_token": decode / tokens,
        "forcing_cpu_s_per_token": forcing / tokens,
        "forcing_ahead_wall_s_per_token": forcing_ahead_wall / tokens,
        "scoring_cpu_s_per_token": scoring / tokens,
    }


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    weights = sys.argv[2] if len(sys.argv) > 2 else "int8"
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else 480.0
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    path = resolve_model(model)
    out: dict[str, object] = {"model": model, "weights": weights, "load_before": os.getloadavg()}
    per_token = costs(path, weights)
    out["costs"] = per_token
    out["load_after_costs"] = os.getloadavg()
    print(json.dumps(out), flush=True)  # the costs, before the (long) gate run
    if budget <= 0:
        return
    began = time.perf_counter()
    report = check_decoder(
        ours=True, weights=weights, model=path, prompts=[PROMPT], depth=64, budget=budget, workers=workers
    )
    wall = time.perf_counter() - began
    numbers = report.results[0].numbers
    design = int(numbers["design_tokens"])
    cpu = (
        per_token["decode_cpu_s_per_token"]
        + per_token["forcing_cpu_s_per_token"]
        + per_token["scoring_cpu_s_per_token"]
    )
    cores = min(workers + 1, os.cpu_count() or 1)
    out.update(
        {
            "state": numbers["state"],
            "design_tokens": design,
            "tokens_judged": numbers["tokens"],
            "generations": numbers["generations"],
            "power_reached": numbers["power"],
            "wall_s": round(wall, 1),
            "judged_tokens_per_wall_s": round(float(numbers["tokens"]) / wall, 2),
            "workers": workers,
            "projected_full_power_wall_min_on_cores": {"cores": cores, "minutes": round(design * cpu / cores / 60, 1)},
            "projected_full_power_wall_min_at_this_runs_rate": round(
                design / (float(numbers["tokens"]) / wall) / 60, 1
            ),
            "load_after": os.getloadavg(),
        }
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
