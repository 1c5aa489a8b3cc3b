"""Held-out measurement of certified early exit: ``python -m verispec.measure_early_exit``.

    OPENBLAS_NUM_THREADS=1 python -m verispec.measure_early_exit --model smollm2-135m \
        [--engine fast] [--tokens-per-prompt 48] [--q 0.9,0.99] [--speed-prompts 4] [--json OUT.json]

1. Calibrate on the built-in calibration mix (verispec/data/prompts_calibration.jsonl): greedy
   trajectories of the full model, a tuned lens fit on every other prompt of each kind, scores on
   the others; artifacts with and without the lens, for each q.
2. Held-out (verispec/data/prompts_heldout.jsonl, never used for calibration or the lens): the
   full model's greedy trajectories, and per gate the first admitted depth of each step, exactly
   as the serve loop decides it (:func:`reference.early_exit.gate_admits` on the same float32
   margins). Reported per gate: observed flip rate (served top-1 != full argmax) with a
   Clopper-Pearson 95% interval vs the bound 1 - q, admitted fraction, mean exit depth, flip rate
   per prompt kind.
3. Cost: the exit head's time (lens + head on one row) relative to a full one-token forward, both
   measured here; tokens/s of plain greedy decoding vs early-exit decoding (deferred KV catch-up
   included) on the first ``--speed-prompts`` held-out prompts, in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import numpy as np

from reference.calibration import (
    Calibration, Records, Trajectory, build, default_depths, file_sha256, greedy_trajectory, lens_from, score,
    split_for_lens,
)
from reference.certificate import residual_admits
from reference.early_exit import GATE_KINDS, GateKind, exit_logits, generate_early_exit
from reference.generate import GenerationRequest, generate
from reference.model import Model
from reference.sampling import SamplingParams
from verispec.commands.calibrate import (
    CALIBRATION_PROMPTS, HELDOUT_PROMPTS, Progress, chat_stop_ids, encode_prompts, read_prompts,
)
from verispec.engine_load import load_engine
from verispec.registry import resolve_model


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial (Clopper-Pearson) interval for k successes in n trials."""
    from scipy.stats import beta

    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def first_exits(cal: Calibration, records: Records, gate: GateKind) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]:
    """Per step: (depth served, flipped?) under ``gate``, and the exit-head evaluations made."""
    n_layer = cal.n_layer
    depth = np.full(records.n, n_layer, dtype=np.int64)
    flipped = np.zeros(records.n, dtype=bool)
    evaluations = 0
    for step in range(records.n):
        for i, d in enumerate(cal.depths):
            evaluations += 1
            margin = float(records.margins[i, step])
            if gate == "margin":
                admit = margin > d.margin_threshold
            else:
                admit = residual_admits(gate, margin, d.quantile(gate))
            if admit:
                depth[step], flipped[step] = d.depth, bool(records.flips[i, step])
                break
    return depth, flipped, evaluations


def held_out_report(cal: Calibration, records: Records, gate: GateKind) -> dict[str, Any]:
    depth, flipped, evaluations = first_exits(cal, records, gate)
    n = records.n
    flips = int(flipped.sum())
    lo, hi = clopper_pearson(flips, n)
    kinds = np.asarray(records.kinds)
    per_kind = {}
    for kind in sorted(set(records.kinds)):
        mask = kinds == kind
        per_kind[kind] = {"n": int(mask.sum()), "flips": int(flipped[mask].sum()),
                          "admitted": float(np.mean(depth[mask] < cal.n_layer))}
    return {
        "gate": gate, "q": str(cal.q), "bound": float(1 - cal.q), "n": n, "flips": flips,
        "flip_rate": flips / n, "flip_ci95": [lo, hi], "admitted": float(np.mean(depth < cal.n_layer)),
        "mean_exit_depth": float(depth.mean()), "layer_fraction": float(depth.mean()) / cal.n_layer,
        "head_evaluations_per_token": evaluations / n, "per_kind": per_kind,
    }


def median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verispec.measure_early_exit", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens-per-prompt", type=int, default=48)
    parser.add_argument("--heldout-tokens", type=int, default=48)
    parser.add_argument("--q", default="0.9,0.99")
    parser.add_argument("--layers", default=None)
    parser.add_argument("--speed-prompts", type=int, default=4)
    parser.add_argument("--max-prompts", type=int, default=None, help="first N calibration prompts only")
    parser.add_argument("--max-heldout", type=int, default=None, help="first N held-out prompts only")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--engine", choices=("fast", "reference"), default="fast")
    args = parser.parse_args(argv)

    path = resolve_model(args.model)
    loaded = load_engine(str(path), engine=args.engine)
    model, n_layer = loaded.model, loaded.model.config.n_layer
    depths = default_depths(n_layer) if args.layers is None else tuple(int(x) for x in args.layers.split(","))
    stop_ids = chat_stop_ids(loaded.tokenizer, loaded.chat)
    sha = file_sha256(path)
    cal_prompts = encode_prompts(loaded.tokenizer, loaded.chat, read_prompts(CALIBRATION_PROMPTS)[: args.max_prompts])
    held_prompts = encode_prompts(loaded.tokenizer, loaded.chat, read_prompts(HELDOUT_PROMPTS)[: args.max_heldout])
    log = sys.stderr

    def trajectories(prompts: list[tuple[str, list[int]]], steps: int, label: str) -> list[Trajectory]:
        bar = Progress(len(prompts) * steps, label)
        out = [greedy_trajectory(model, ids, steps, depths, kind=k, stop_ids=stop_ids, on_step=bar.step) for k, ids in prompts]
        bar.close()
        return out

    started = time.perf_counter()
    lens_split, cal_split = split_for_lens(cal_prompts)
    lens_traj = trajectories(lens_split, args.tokens_per_prompt, "lens split")
    lens = lens_from(lens_traj, depths, 1e-2)
    n_lens = sum(t.full_logits.shape[0] for t in lens_traj)
    del lens_traj
    cal_traj = trajectories(cal_split, args.tokens_per_prompt, "calibration split")
    held_traj = trajectories(held_prompts, args.heldout_tokens, "held-out")
    cal_records = {"lens": score(model, cal_traj, depths, lens), "none": score(model, cal_traj, depths, None)}
    held_records = {"lens": score(model, held_traj, depths, lens), "none": score(model, held_traj, depths, None)}
    del cal_traj, held_traj
    print(f"[trajectories and scores: {time.perf_counter() - started:.0f} s]", file=log)

    levels = [Fraction(x) for x in args.q.split(",")]
    results: dict[str, Any] = {
        "model": path.name, "engine": args.engine, "n_layer": n_layer, "depths": list(depths), "n_calibration": cal_records["lens"].n,
        "n_lens": n_lens, "n_heldout": held_records["lens"].n, "agreement": {}, "gates": [],
    }
    cals: dict[tuple[str, Fraction], Calibration] = {}
    for head_kind in ("none", "lens"):
        results["agreement"][head_kind] = {
            "calibration": [float(np.mean(~cal_records[head_kind].flips[i])) for i in range(len(depths))],
            "heldout": [float(np.mean(~held_records[head_kind].flips[i])) for i in range(len(depths))],
        }
        for level in levels:
            cal = build(cal_records[head_kind], q=level, model_sha256=sha, model_name=path.name, n_layer=n_layer,
                        lens=lens if head_kind == "lens" else None, n_lens=n_lens)
            cals[(head_kind, level)] = cal
            for gate in GATE_KINDS:
                row = held_out_report(cal, held_records[head_kind], gate)
                row["head"] = head_kind
                row["thresholds"] = [
                    d.margin_threshold if gate == "margin" else d.quantile(gate) for d in cal.depths
                ]
                results["gates"].append(row)

    # -- cost: exit head vs a full token, measured on this machine in this run --
    cache = model.new_cache(64)
    model.forward(held_prompts[0][1][:16], cache)
    length = cache.length

    def one_token() -> None:
        cache.truncate(length)
        model.forward([held_prompts[0][1][0]], cache)

    h = np.zeros((1, model.config.n_embd), dtype=np.float32) + np.float32(0.1)
    token_s = median_time(one_token, 15)
    head_s = median_time(lambda: exit_logits(model, depths[0], h, None), 15)
    lens_head_s = median_time(lambda: exit_logits(model, depths[0], h, lens), 15)
    results["cost"] = {"token_s": token_s, "head_s": head_s, "lens_head_s": lens_head_s,
                       "head_relative": head_s / token_s, "lens_head_relative": lens_head_s / token_s}

    # -- tokens/s: plain vs early exit, same prompts, same run --
    speed: list[dict[str, Any]] = []
    greedy = SamplingParams(temperature=0.0)
    configs: list[tuple[str, GateKind, str, Fraction]] = [("plain", "margin", "none", levels[0])]
    for level in levels:
        configs.append(("early-exit", "margin", "lens", level))
    configs.append(("early-exit", "halfrange", "lens", levels[0]))
    for label, gate, head_kind, level in configs:
        tokens = 0
        seconds = 0.0
        depth_sum = 0
        diverged = 0
        for kind, ids in held_prompts[: args.speed_prompts]:
            request = GenerationRequest(tuple(ids), greedy, max_tokens=args.heldout_tokens, stop_ids=stop_ids, seed=0)
            t = time.perf_counter()
            if label == "plain":
                # the reference decode loop (the same loop shape as the early-exit one) on the
                # loaded engine's model, which has the reference Model's interface
                out = generate(cast(Model, model), loaded.tokenizer, request)
            else:
                out, stats = generate_early_exit(model, loaded.tokenizer, request, cals[(head_kind, level)], gate=gate)
                depth_sum += sum(stats.depths)
            seconds += time.perf_counter() - t
            tokens += len(out.ids)
        speed.append({"config": label, "gate": gate if label != "plain" else None, "head": head_kind,
                      "q": str(level) if label != "plain" else None, "tokens": tokens, "seconds": seconds,
                      "tokens_per_s": tokens / seconds,
                      "mean_depth": depth_sum / tokens if label != "plain" else float(n_layer)})
        print(f"[speed {label} {gate} q={level}: {tokens / seconds:.2f} tokens/s]", file=log)
    base = speed[0]["tokens_per_s"]
    for row in speed:
        row["speedup"] = row["tokens_per_s"] / base
    results["speed"] = speed
    results["wall_s"] = time.perf_counter() - started

    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def render(r: dict[str, Any]) -> str:
    lines = [
        f"{r['model']}: {r['n_layer']} layers, candidate depths {r['depths']}; calibration n = {r['n_calibration']} "
        f"(+{r['n_lens']} lens steps), held-out n = {r['n_heldout']}",
        "exit top-1 == full argmax, held-out, per depth: "
        + "; ".join(f"{k}: " + " ".join(f"{a:.0%}" for a in v["heldout"]) for k, v in r["agreement"].items()),
        "head  gate       q      flips/n   flip rate [95% CI]        bound   admitted  mean depth  per kind flips/n",
    ]
    for g in r["gates"]:
        lo, hi = g["flip_ci95"]
        kinds = " ".join(f"{k}:{v['flips']}/{v['n']}" for k, v in g["per_kind"].items())
        lines.append(
            f"{g['head']:5s} {g['gate']:9s} {g['q']:6s} {g['flips']:4d}/{g['n']:<4d} {g['flip_rate']:7.2%} "
            f"[{lo:6.2%}, {hi:6.2%}]  {g['bound']:6.2%}  {g['admitted']:7.1%}  {g['mean_exit_depth']:6.2f}/{r['n_layer']}  {kinds}"
        )
    c = r["cost"]
    lines.append(
        f"cost: full token {c['token_s'] * 1000:.1f} ms, exit head {c['head_s'] * 1000:.1f} ms "
        f"({c['head_relative']:.2f} of a token), lens + head {c['lens_head_s'] * 1000:.1f} ms ({c['lens_head_relative']:.2f})"
    )
    for s in r["speed"]:
        lines.append(
            f"speed: {s['config']:10s} {str(s['gate'] or ''):9s} q={str(s['q'] or '-'):6s} {s['tokens']} tokens "
            f"{s['tokens_per_s']:.2f} tokens/s (x{s['speedup']:.2f}), mean depth {s['mean_depth']:.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
