"""Early-exit decoding on the int8 layer chain cut at its candidate depths against the uncut chain, in ONE process.

``python -m lab.exit_chain_ab MODEL.gguf [--depths 8,12,16,20,24] [--steps 48] [--rounds 3] [--json OUT]``
loads the int8 mode twice: ``inside`` (the default chain: a candidate depth falls inside a link, so
a pass that stops there runs the next layer's ``pre`` half and drops it, and the pass that resumes
there runs the link again past its ``post`` half) and ``cut`` (``FastModel.load(pass_boundaries=
depths)``, what the early-exit loader now loads: no half dropped). It decodes the same prompt on
both through the deferred decoder (reference/early_exit.py: exits, owed rows caught up in later
tokens' passes, forced catch-ups), one step of each in turn (the order alternating, so a burst of
the machine's other work falls on both), under two exit policies that need no calibration:

- ``never``: no token exits (every token still stops at each candidate depth to ask the gate: the
  pass structure of a gate that rarely admits, which is what the calibrated gates do: they admit
  8-40% of tokens at q = 0.9 and nothing at q = 0.99);
- ``every-third``: every third token exits at the deepest candidate depth (owed rows join later
  tokens' passes).

The policy evaluates no exit head (its cost is the same on both layouts; the layer chain is what
differs). Per layout and policy: the CPU (``time.process_time``: at 1 thread the step's own work,
robust to the machine's load) and wall time of a step, best and median; onnxruntime calls a step
(counted); that both produced the same tokens and hidden states (they must: the cut changes no
bit). Also a plain 1-row decode step on both (a pass that crosses the cuts without stopping: one
call more a cut). Set ``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS=1``; on a shared machine
read the CPU ratios, of a run with each load order (``--cut-first``: a model loaded second can run
faster, lab/chain_ab.py; the plain step, one call more a cut on ``cut``, shows the bias).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from lab.provenance import commit
from verispec.engine.matmul import OrtGraph
from verispec.engine.model import FastModel
from verispec.reference.early_exit import DeferredDecoder

PROMPT = [1, 504, 2365, 6354, 28, 1130, 314, 260]  # token ids valid in both vocabularies
LAYOUTS = ("inside", "cut")
POLICIES = ("never", "every-third")


def load(path: Path, layout: str, depths: tuple[int, ...]) -> FastModel:
    return FastModel.load(
        path, weights="int8", fused=True, pass_boundaries=depths if layout == "cut" else (), layer_kernel="mlas"
    )


def _summary(values: list[float]) -> dict[str, float]:
    return {"best_ms": 1e3 * min(values), "median_ms": 1e3 * statistics.median(values)}


def _exit_here(at: int, depth: int, hidden: Any) -> bool:
    """The policy: exit at depth ``at`` (0: nowhere)."""
    return depth == at


def exit_decode(
    models: dict[str, FastModel], depths: tuple[int, ...], policy: str, steps: int, flip: bool
) -> dict[str, Any]:
    """One early-exit decode of ``steps`` tokens on every layout in lockstep, timed per step."""
    deepest = depths[-1]
    decoders = {name: DeferredDecoder(m, m.new_cache(len(PROMPT) + steps + 2), depths) for name, m in models.items()}
    tokens = {name: int(np.argmax(d.prefill(PROMPT)[-1])) for name, d in decoders.items()}
    cpu: dict[str, list[float]] = {name: [] for name in models}
    wall: dict[str, list[float]] = {name: [] for name in models}
    calls: dict[str, list[int]] = {name: [] for name in models}
    same = True
    order = list(models)[::-1] if flip else list(models)
    for step in range(steps):
        exit_now = policy == "every-third" and step % 3 == 2
        hidden: dict[str, Any] = {}
        for name in order if step % 2 == 0 else order[::-1]:
            decoder = decoders[name]
            before, t0, c0 = OrtGraph.calls, time.perf_counter(), time.process_time()
            depth, x = decoder.step(tokens[name], partial(_exit_here, exit_now and deepest))
            c1, t1 = time.process_time(), time.perf_counter()
            cpu[name].append(c1 - c0)
            wall[name].append(t1 - t0)
            calls[name].append(OrtGraph.calls - before)
            hidden[name] = x
            # the next token: the head's argmax at the depth reached (untimed: the layers are what differ)
            tokens[name] = int(np.argmax(decoder.model.head(x)[-1]))
        same = same and all(np.array_equal(hidden[order[0]], h) for h in hidden.values())
        same = same and len({tokens[name] for name in models}) == 1
    return {
        "cpu": {name: _summary(v) for name, v in cpu.items()},
        "wall": {name: _summary(v) for name, v in wall.items()},
        "calls_per_step_mean": {name: float(np.mean(v)) for name, v in calls.items()},
        "same_bits": same,
    }


def plain_steps(models: dict[str, FastModel], steps: int) -> dict[str, Any]:
    """Plain 1-row decode steps (every layer in one pass, the head) on every layout in lockstep."""
    caches = {name: m.new_cache(len(PROMPT) + steps + 2) for name, m in models.items()}
    logits = {name: m.forward(PROMPT, caches[name], last_only=True).logits for name, m in models.items()}
    cpu: dict[str, list[float]] = {name: [] for name in models}
    calls: dict[str, int] = {}
    order = list(models)
    for step in range(steps):
        for name in order if step % 2 == 0 else order[::-1]:
            token = int(np.argmax(logits[name][-1]))
            before, c0 = OrtGraph.calls, time.process_time()
            logits[name] = models[name].forward([token], caches[name], last_only=True).logits
            cpu[name].append(time.process_time() - c0)
            calls[name] = OrtGraph.calls - before
    return {"cpu": {name: _summary(v) for name, v in cpu.items()}, "calls_per_step": calls}


def provenance(argv: list[str], load_start: float) -> dict[str, str]:
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other work",
        "command": " ".join(["python -m lab.exit_chain_ab", *argv]),
        "commit": commit(),
        "loadavg_at_start": f"{load_start:.2f}",
        "loadavg_at_end": f"{os.getloadavg()[0]:.2f}",
        "note": ", ".join(f"{k}={os.environ.get(k, 'unset')}" for k in ("OPENBLAS_NUM_THREADS", "VERISPEC_THREADS")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.exit_chain_ab", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--depths", default="8,12,16,20,24", help="candidate exit depths (comma-separated)")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3, help="decodes per policy, the layouts' order alternating")
    parser.add_argument("--cut-first", action="store_true", help="load the cut layout first (placement check)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.steps < 3 or args.rounds < 1:
        parser.error("--steps must be at least 3 and --rounds at least 1")
    depths = tuple(sorted({int(d) for d in args.depths.split(",")}))
    load_start = os.getloadavg()[0]
    order = LAYOUTS[::-1] if args.cut_first else LAYOUTS  # the load order: a placement check
    built = {name: load(args.model, name, depths) for name in order}
    loaded = {name: built[name] for name in LAYOUTS}
    out: dict[str, Any] = {
        "what": "early-exit decoding on the int8 layer chain cut at the candidate depths (pass_boundaries, the "
        "early-exit loader's layout) against the uncut chain (a candidate depth inside a link), same process",
        "model": args.model.name,
        "depths": list(depths),
        "steps": args.steps,
        "rounds": args.rounds,
        "loaded_first": order[0],
    }
    for policy in POLICIES:
        runs = [exit_decode(loaded, depths, policy, args.steps, flip=r % 2 == 1) for r in range(args.rounds)]
        cpu = {name: [run["cpu"][name]["median_ms"] for run in runs] for name in LAYOUTS}
        out[policy] = {
            "runs": runs,
            "same_bits": all(run["same_bits"] for run in runs),
            "calls_per_step_mean": runs[0]["calls_per_step_mean"],
            "cpu_median_ms": {name: statistics.median(v) for name, v in cpu.items()},
        }
        out[f"{policy}_cpu_inside_over_cut"] = (
            out[policy]["cpu_median_ms"]["inside"] / out[policy]["cpu_median_ms"]["cut"]
        )
        out[f"{policy}_calls_per_step_inside"] = runs[0]["calls_per_step_mean"]["inside"]
        out[f"{policy}_calls_per_step_cut"] = runs[0]["calls_per_step_mean"]["cut"]
        out[f"{policy}_same_bits"] = out[policy]["same_bits"]
    plain = plain_steps(loaded, args.steps)
    out["plain_step"] = plain
    out["plain_cpu_inside_over_cut"] = plain["cpu"]["inside"]["median_ms"] / plain["cpu"]["cut"]["median_ms"]
    out["plain_calls_per_step_inside"] = plain["calls_per_step"]["inside"]
    out["plain_calls_per_step_cut"] = plain["calls_per_step"]["cut"]
    out["provenance"] = provenance(sys.argv[1:] if argv is None else argv, load_start)
    text = json.dumps(out, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
