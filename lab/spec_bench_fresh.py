"""Plain vs speculative decoding on a Spec-Bench-style workload written apart from the bench's own.

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 python -m lab.spec_bench_fresh MODEL OUT.json \
        [--drafts auto,ngram] [--k 6] [--weights int8] [--greedy-only]

The workload is ``lab/data/workload_fresh.jsonl`` (six categories: summarisation, RAG over a given
passage, code editing, translation, maths reasoning, multi-turn chat; three requests each, written
for this measurement, not taken from ``verispec/data/workload.jsonl`` or any data set). Every
request goes through :func:`verispec.bench.workload.workload_section`, the bench's own workload
runner: per request and draft, the engine's plain decode and its speculative decode back to back
(interleaved, the same prompt ids, the same number of tokens: the length of the engine's plain
greedy answer, end of generation ignored on both sides), greedy and at T = 0.8; llama.cpp plain
and prompt lookup beside each greedy request when ``llama_cpp`` is importable. Greedy outputs must
equal plain greedy token for token (``all_greedy_same_tokens``; the script exits 1 otherwise).

Written to OUT.json: ``{"provenance": {...}, "summary": {...}, "report": {...}}`` with the
load average at start and end, and per draft and temperature, per category: the speedup over
the engine's own plain decode (wall-clock and process CPU), tokens per target pass, and, with
llama.cpp, the speedup over llama.cpp plain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lab.provenance import commit as head_commit
from verispec.bench.machine import load_average, machine_info
from verispec.bench.means import geomean
from verispec.bench.options import BenchOptions
from verispec.bench.workload import workload_section
from verispec.engine.model import FastModel
from verispec.engine_load import resolve_weights
from verispec.reference.chat import chat_format
from verispec.reference.draft_choice import PRIOR_ROWS
from verispec.reference.gguf import GGUFFile
from verispec.reference.tokenizer import Tokenizer
from verispec.workload import WorkloadItem, load_workload

FRESH = Path(__file__).resolve().parent / "data" / "workload_fresh.jsonl"
GROUNDED = ("summarisation", "rag", "code_edit")


def choose_items(items: tuple[WorkloadItem, ...], per_category: int, max_tokens: int) -> tuple[WorkloadItem, ...]:
    """The first ``per_category`` requests of each category (all: 0), ``max_tokens`` capped (0: not)."""
    seen: dict[str, int] = {}
    out = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        if per_category and seen[item.category] > per_category:
            continue
        out.append(replace(item, max_tokens=min(item.max_tokens, max_tokens)) if max_tokens else item)
    return tuple(out)


def per_category(runs: list[dict[str, Any]], temperature: float) -> dict[str, dict[str, float]]:
    """Per category at one temperature: geomean speedups (wall, CPU) and mean tokens per pass."""
    chosen = [r for r in runs if r["temperature"] == temperature]
    out: dict[str, dict[str, float]] = {}
    for category in dict.fromkeys(r["category"] for r in chosen):
        mine = [r for r in chosen if r["category"] == category]
        out[category] = {
            "speedup": geomean([r["speedup"] for r in mine]),
            "speedup_cpu": geomean([r["speedup_cpu"] for r in mine]),
            "tokens_per_pass": sum(r["tokens_per_pass"] * r["generated_tokens"] for r in mine)
            / max(1, sum(r["generated_tokens"] for r in mine)),
        }
    return out


def summary(workload: dict[str, Any], beside: dict[str, Any], temperatures: tuple[float, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for draft, section in workload.items():
        rows: dict[str, Any] = {}
        for t in temperatures:
            cats = per_category(section["runs"], t)
            rows[str(t)] = {
                "per_category": cats,
                "geomean_speedup": geomean([c["speedup"] for c in cats.values()]),
                "geomean_speedup_cpu": geomean([c["speedup_cpu"] for c in cats.values()]),
                "grounded_geomean_speedup_cpu": geomean([cats[c]["speedup_cpu"] for c in GROUNDED if c in cats]),
            }
        rows["all_greedy_same_tokens"] = section["all_greedy_same_tokens"]
        out[draft] = rows
    out["llama_cpp"] = {
        "available": bool(beside.get("runs")),
        "geomean": beside.get("geomean"),
        "note": beside.get("note"),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--drafts", default="auto,ngram")
    parser.add_argument("--k", type=int, default=6)
    parser.add_argument("--weights", default="int8")
    parser.add_argument("--greedy-only", action="store_true")
    parser.add_argument("--workload", default=str(FRESH))
    parser.add_argument("--per-category", type=int, default=0, help="the first N requests of each category (0: all)")
    parser.add_argument("--max-tokens", type=int, default=0, help="cap every request's max_tokens (0: the file's)")
    args = parser.parse_args(argv)
    started, load_start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), load_average()
    commit = head_commit()
    path = Path(args.model)
    with GGUFFile.open(path) as f:
        model = FastModel.load(f, weights=resolve_weights(args.weights, arch=str(f.get("general.architecture", ""))))
        tokenizer = Tokenizer.from_gguf(f.metadata)
        chat = chat_format(f.metadata)
    curve = model.verify_cost_curve(PRIOR_ROWS)  # measured now, outside every timed decode
    options = BenchOptions(
        drafts=tuple(args.drafts.split(",")),
        k=args.k,
        repeats=1,
        workload=choose_items(load_workload(Path(args.workload)), args.per_category, args.max_tokens),
        workload_sampled=not args.greedy_only,
        workload_weights=args.weights,
    )
    workload, beside = workload_section(model, tokenizer, chat, options, path)
    temperatures = (0.0,) if args.greedy_only else (0.0, options.sampled_temperature)
    result = {
        "provenance": {
            "command": " ".join(["python -m lab.spec_bench_fresh", *sys.argv[1:]]),
            "commit": commit,
            "started_utc": started,
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_at_start": load_start,
            "loadavg_at_end": load_average(),
            "threads": os.environ.get("VERISPEC_THREADS"),
            "weights": model.weights_mode,
            "head_kernel": model.store.head_kernel,  # the int8 law depends on it (engine/tile_head.py)
            "layer_kernel": model.store.layer_kernel,  # and on this (engine/tile_layers.py)
            "verify_cost_curve": curve,
            "note": "interleaved plain / speculative per request and draft, same prompt ids and token counts; "
            "the machine is shared with other work (see load averages): the CPU-time ratios are the steadier",
        },
        "summary": summary(workload, beside, temperatures),
        "report": {"workload": workload, "workload_llama_cpp": beside, "machine": machine_info().as_json()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0 if all(s["all_greedy_same_tokens"] for d, s in result["summary"].items() if d != "llama_cpp") else 1


if __name__ == "__main__":
    raise SystemExit(main())
