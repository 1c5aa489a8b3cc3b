"""The int8 engine's two head kernels, or its two layer kernels, ``mlas`` and ``tile``
(engine/tile_head.py, engine/tile_layers.py): whole decode steps, the k-row pass, greedy
speculation and peak RSS, fresh processes taking turns.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.head_kernel_ab MODEL [--part head|layers] [--rounds 3] [--json OUT]

Each child loads the int8 model as the engine does, ``FastModel.load(path, weights="int8",
head_kernel=SIDE, layer_kernel="mlas")`` (``--part head``, the default: everything but the head is
the same, the layers on MLAS) or ``FastModel.load(path, weights="int8", layer_kernel=SIDE)``
(``--part layers``: the head is the default's either way), on ``VERISPEC_THREADS`` threads. The two
kernels compute two int8 laws, so their greedy tokens may differ; each side's own speculation must
reproduce its own plain greedy decode token for token (checked: exit 1 otherwise).

Per side and round: the best step over 48 greedy steps after a prompt, CPU and wall time (with
more than one thread the wall time is the figure: CPU time adds the threads up); the k-row pass (5 rows
over 1, the engine's own verify-cost curve); on the first request of each category of
lab/data/workload_fresh.jsonl (48 tokens, greedy, end of generation ignored), the ``auto`` draft's
speculative decode against plain decode, CPU time; and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from lab.provenance import print_and_save, record

FRESH = Path(__file__).resolve().parent / "data" / "workload_fresh.jsonl"
SIDES = ("mlas", "tile")


def child(path: str, side: str, part: str = "head") -> dict[str, Any]:
    from verispec.engine.model import FastModel

    if part == "head":
        model = FastModel.load(path, weights="int8", head_kernel=side, layer_kernel="mlas")
    else:
        model = FastModel.load(path, weights="int8", layer_kernel=side)
    prompt = np.arange(100, 132, dtype=np.int64) % model.config.n_vocab
    cache = model.new_cache(256)
    token = int(model.forward(prompt, cache, last_only=True).logits[-1].argmax())
    cpu, wall = [], []
    for _ in range(48):
        clock, started = time.process_time(), time.perf_counter()
        token = int(model.forward([token], cache, last_only=True).logits[-1].argmax())
        cpu.append(time.process_time() - clock)
        wall.append(time.perf_counter() - started)
    curve = model.verify_cost_curve(5)
    spec = speculation(model, path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"head_kernel": model.store.head_kernel, "layer_kernel": model.store.layer_kernel, "step_cpu_best_ms": min(cpu) * 1e3,
            "step_cpu_median_ms": statistics.median(cpu) * 1e3, "step_wall_best_ms": min(wall) * 1e3,
            "rows_5_over_1": curve[5], **spec, "peak_rss_mib": peak / 2**20}  # fmt: skip


def speculation(model: Any, path: str) -> dict[str, Any]:
    """``auto`` against plain, greedy, the first request of each category: CPU ratio, and whether
    every speculative decode gave the plain decode's tokens."""
    from verispec.engine import sampling as fast_sampling
    from verispec.engine.generate import generate as fast_generate
    from verispec.reference.chat import ChatMessage, chat_format
    from verispec.reference.decode import SpeculativeOptions, speculative_generate
    from verispec.reference.drafts import make_draft, parse_draft_spec
    from verispec.reference.generate import GenerationRequest
    from verispec.reference.gguf import GGUFFile
    from verispec.reference.sampling import SamplingParams
    from verispec.reference.tokenizer import Tokenizer

    with GGUFFile.open(path) as f:
        tokenizer, chat = Tokenizer.from_gguf(f.metadata), chat_format(f.metadata)
    items, seen = [], set()
    for line in FRESH.read_text().splitlines():
        item = json.loads(line)
        if item["category"] not in seen:
            seen.add(item["category"])
            items.append(item)
    plain_s = spec_s = 0.0
    same = True
    for item in items:
        text = chat.render([ChatMessage(m["role"], m["content"]) for m in item["messages"]])
        ids = tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))
        request = GenerationRequest(ids, params=SamplingParams(temperature=0.0), max_tokens=48, seed=0, ignore_eog=True)
        clock = time.process_time()
        plain = fast_generate(model, tokenizer, request)
        plain_s += time.process_time() - clock
        draft = make_draft(parse_draft_spec("auto"), model, tokenizer)
        clock = time.process_time()
        spec = speculative_generate(
            model, tokenizer, request, draft, SpeculativeOptions(k=6, adaptive=True),
            law=fast_sampling.target_distribution, draw=fast_sampling.sample,
        )  # fmt: skip
        spec_s += time.process_time() - clock
        same = same and spec.generation.ids == plain.ids
    return {"auto_over_plain_cpu": plain_s / spec_s, "speculation_same_tokens": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--part", choices=("head", "layers"), default="head")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.child, args.part)))
        return
    from verispec.registry import resolve_model

    path = args.model if Path(args.model).exists() else str(resolve_model(args.model))
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for _ in range(args.rounds):
        for side in SIDES:
            command = [sys.executable, "-m", "lab.head_kernel_ab", path, "--part", args.part, "--child", side]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    same = all(r["speculation_same_tokens"] for rs in runs.values() for r in rs)
    numbers = [k for k, v in runs["mlas"][0].items() if isinstance(v, float)]
    median = {side: {k: statistics.median(r[k] for r in rs) for k in numbers} for side, rs in runs.items()}
    results: dict[str, Any] = {
        "model": Path(path).name,
        "threads": os.environ.get("VERISPEC_THREADS", "1"),
        "part": args.part,
        "head_kernel": runs["tile"][0]["head_kernel"],
        "layer_kernel": runs["tile"][0]["layer_kernel"],
        "step_mlas_over_tile": median["mlas"]["step_cpu_best_ms"] / median["tile"]["step_cpu_best_ms"],
        "step_wall_mlas_over_tile": median["mlas"]["step_wall_best_ms"] / median["tile"]["step_wall_best_ms"],
        "rows_5_over_1_mlas": median["mlas"]["rows_5_over_1"],
        "rows_5_over_1_tile": median["tile"]["rows_5_over_1"],
        "auto_over_plain_mlas": median["mlas"]["auto_over_plain_cpu"],
        "auto_over_plain_tile": median["tile"]["auto_over_plain_cpu"],
        "peak_rss_mib_mlas": median["mlas"]["peak_rss_mib"],
        "peak_rss_mib_tile": median["tile"]["peak_rss_mib"],
        "speculation_same_tokens_as_plain": same,
        "runs": runs,
        "provenance": record("lab.head_kernel_ab", load_start),
    }
    print_and_save(results, args.json)
    if not same:
        raise SystemExit("a speculative decode differed from its own plain greedy decode")


if __name__ == "__main__":
    main()
