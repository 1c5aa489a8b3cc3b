"""Held-out measurement of certified early exit (a lab experiment): ``python -m lab.measure_early_exit``.

    OPENBLAS_NUM_THREADS=1 python -m lab.measure_early_exit --model smollm2-135m \
        [--prompts hand|generated] [--prompts-per-kind N] [--lens-prompts-per-kind 8] [--tokens-per-prompt 16] \
        [--heldout-tokens 32] [--q 0.9] [--depth-sets "8,12,16,20,24;24"] [--speed-prompts 2] \
        [--json OUT.json] [--records OUT.npz]

Run from the repository root (lab/ is not installed with verispec).

1. Calibrate on the hand-written pool (verispec/data/prompts_calibration.jsonl, all of it by
   default; ``--prompts generated``: the seeded generator, :mod:`verispec.calibration_prompts`, 60
   per kind) while a disjoint generated set fits the tuned lens: greedy trajectories of the full model, per-kind
   prompt-level thresholds (:mod:`reference.calibration`), with the model's own head and with the
   lens, for each q and each set of candidate depths (all from the same trajectories).
2. Held-out: the hand-written prompts of verispec/data/prompts_heldout.jsonl (disjoint from the
   pool and the generator, tests/test_calibration_prompts.py), kinds by the rule of
   :mod:`reference.prompt_kind`. Per gate the first admitted depth of each step, exactly as the
   serve loop decides it (:func:`reference.early_exit.gate_admits`'s comparisons on the same
   float32 margins, the kind's thresholds). The claim tested is prompt-level ("expected flip
   fraction of a new prompt ≤ α, valid when prompts (not tokens) are exchangeable"), so the
   statistics are per prompt (tokens of one prompt are correlated, so counting every token as a
   trial would overstate the evidence): the mean over prompts of each prompt's flip fraction with
   a one-sided 95% upper bound valid for any losses in [0, 1] (:mod:`lab.bounded_mean`), per
   kind a verdict on H0: mean <= α at 0.05 / (number of kinds) (:func:`verdict`); and one uniformly
   drawn step per prompt (seeded) whose flip is a Bernoulli with mean exactly that expected flip
   fraction: k flips of m prompts, a Clopper-Pearson 95% interval, and the one-sided binomial
   p-value of k against α. ``--records`` saves every scored step, for
   :mod:`lab.early_exit_shift` (generated vs hand-written prompts, for a ``--prompts
   generated`` run; no model work).
3. Cost: the exit head's time (own / lens + head, one row) relative to a full one-token forward;
   tokens/s of plain greedy decoding vs early-exit decoding (deferred KV catch-up included) on
   the first ``--speed-prompts`` held-out prompts of each kind, in the same run, configurations
   interleaved prompt by prompt; early exit on the model loaded as the serve loader loads it (the
   int8 layer chain cut at the candidate depths), plain decoding on the uncut one.

The run's JSON is the result: written (atomically, before anything is rendered) to ``--json``,
by default ``lab/measurements/early_exit_MODEL.json`` (``..._generated.json`` for ``--prompts
generated``), where the docs' results pages are generated from; nothing here writes into a README.
The markdown tables (:func:`markdown`) are printed after the run; ``--from-json OUT.json`` prints
them for a saved run without running the model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from lab.bounded_mean import p_value_above, upper_bound
from lab.provenance import commit as head_commit
from verispec.atomic import replace_file
from verispec.calibration_prompts import DEFAULT_SEED, generate_mix
from verispec.commands.calibrate import (
    HELDOUT_PROMPTS,
    Progress,
    chat_stop_ids,
    encode_prompts,
    hand_written_pool,
    read_prompts,
)
from verispec.engine.generate import generate_any
from verispec.engine.model import FastModel
from verispec.engine_load import load_engine, weights_mode_of
from verispec.reference.calibration import (
    Calibration,
    Records,
    Trajectory,
    build,
    default_depths,
    file_sha256,
    greedy_trajectory,
    lens_from,
    score,
)
from verispec.reference.certificate import residual_admits
from verispec.reference.conformal import PROMPT_CLAIM
from verispec.reference.early_exit import GateKind, Lens, exit_depths, exit_logits, generate_early_exit
from verispec.reference.early_exit import Model as ExitModel
from verispec.reference.generate import GenerationRequest
from verispec.reference.model import Model
from verispec.reference.prompt_kind import prompt_kind
from verispec.reference.sampling import SamplingParams
from verispec.registry import resolve_model

DRAW_SEED = 18  # the seed of the one-step-per-prompt draw
MEASUREMENTS = Path(__file__).resolve().parent / "measurements"  # lab/measurements/: the saved runs


def default_json_path(model: str, source: str) -> Path:
    """Where a run's JSON goes without ``--json``: the name the saved runs already have."""
    return MEASUREMENTS / f"early_exit_{model}{'_generated' if source == 'generated' else ''}.json"


def write_json(path: Path, results: dict[str, Any]) -> None:
    """The run's results as indented JSON, all or nothing (verispec.atomic.replace_file)."""
    with replace_file(path) as f:
        f.write((json.dumps(results, indent=2) + "\n").encode("utf-8"))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact binomial (Clopper-Pearson) interval for k successes in n trials."""
    from scipy.stats import beta

    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def binomial_p_value(k: int, n: int, bound: float) -> float:
    """P(Binomial(n, bound) >= k): the one-sided p-value of k flips against the bound."""
    from scipy.stats import binom

    return float(binom.sf(k - 1, n, bound))


def at_depths(records: Records, keep: Sequence[int]) -> Records:
    """The records of a subset of the candidate depths (same steps, same prompts)."""
    rows = [records.depths.index(d) for d in keep]
    return Records(
        tuple(keep),
        records.supnorm[rows],
        records.halfrange[rows],
        records.margins[rows],
        records.flips[rows],
        list(records.kinds),
        records.prompt,
    )


def first_exits(
    cal: Calibration, records: Records, gate: GateKind
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], int]:
    """Per step: (depth served, flipped?) under ``gate`` with each step's kind's thresholds, and
    the exit-head evaluations made."""
    depth = np.full(records.n, cal.n_layer, dtype=np.int64)
    flipped = np.zeros(records.n, dtype=np.bool_)
    evaluations = 0
    views = {kind: cal.for_kind(kind) for kind in set(records.kinds)}
    for step in range(records.n):
        view = views[records.kinds[step]]
        for i, d in enumerate(view.depths):
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


@dataclass(frozen=True)
class PromptStats:
    """Prompt-level held-out statistics of one gate on a set of prompts."""

    prompts: int
    steps: int
    flips: int  # flipped steps (all steps of all prompts)
    mean_flip_fraction: float  # mean over prompts of flips / steps
    drawn_flips: int  # flips among one drawn step per prompt
    ci95: tuple[float, float]  # Clopper-Pearson on drawn_flips / prompts
    p_value: float  # P(Bin(prompts, alpha) >= drawn_flips)
    admitted: float  # fraction of steps admitted at some depth
    mean_depth: float
    fractions: tuple[float, ...]  # [prompts] each prompt's flip fraction (the per-prompt loss)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ci95": list(self.ci95), "fractions": list(self.fractions)}


def prompt_stats(
    depth: npt.NDArray[np.int64],
    flipped: npt.NDArray[np.bool_],
    prompt: npt.NDArray[np.int64],
    mask: npt.NDArray[np.bool_],
    n_layer: int,
    alpha: float,
    draw: dict[int, int],
) -> PromptStats:
    """Statistics over the prompts with steps in ``mask``; ``draw`` maps a prompt to its drawn step."""
    ids = sorted(set(prompt[mask].tolist()))
    fractions = [float(np.mean(flipped[prompt == p])) for p in ids]
    drawn = sum(int(flipped[draw[p]]) for p in ids)
    m = len(ids)
    return PromptStats(
        m,
        int(mask.sum()),
        int(flipped[mask].sum()),
        float(np.mean(fractions)) if ids else 0.0,
        drawn,
        clopper_pearson(drawn, m) if m else (0.0, 1.0),
        binomial_p_value(drawn, m, alpha) if m else 1.0,
        float(np.mean(depth[mask] < n_layer)) if m else 0.0,
        float(depth[mask].mean()) if m else float(n_layer),
        tuple(fractions),
    )


def draw_steps(prompt: npt.NDArray[np.int64], seed: int = DRAW_SEED) -> dict[int, int]:
    """One step per prompt, uniformly at random (seeded): prompt -> step index."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in sorted(set(prompt.tolist())):
        steps = np.flatnonzero(prompt == p)
        out[p] = int(steps[rng.integers(steps.size)])
    return out


def held_out_report(cal: Calibration, records: Records, gate: GateKind) -> dict[str, Any]:
    """The held-out statistics of one calibrated gate: overall and per kind (prompt level)."""
    depth, flipped, evaluations = first_exits(cal, records, gate)
    alpha = float(cal.alpha)
    draw = draw_steps(records.prompt)
    kinds = np.asarray(records.kinds)
    everything = np.ones(records.n, dtype=np.bool_)
    per_kind = {
        kind: {
            **prompt_stats(depth, flipped, records.prompt, kinds == kind, cal.n_layer, alpha, draw).as_dict(),
            "calibration_prompts": cal.kinds[kind].n_prompts if kind in cal.kinds else 0,
            "refusal": cal.for_kind(kind).refusal,
        }
        for kind in sorted(set(records.kinds))
    }
    return {
        "gate": gate,
        "q": str(cal.q),
        "alpha": alpha,
        "depths": list(cal.candidate_depths),
        "min_prompts": cal.min_prompts,
        "head_evaluations_per_token": evaluations / records.n,
        **prompt_stats(depth, flipped, records.prompt, everything, cal.n_layer, alpha, draw).as_dict(),
        "per_kind": per_kind,
    }


def trajectories(
    model: ExitModel,
    prompts: list[tuple[str, list[int]]],
    steps: int,
    depths: Sequence[int],
    stop_ids: frozenset[int],
    label: str,
) -> list[Trajectory]:
    bar = Progress(len(prompts) * steps, label)
    out = [
        greedy_trajectory(model, ids, steps, depths, kind=k, stop_ids=stop_ids, on_step=bar.step) for k, ids in prompts
    ]
    bar.close()
    return out


def median_time(fn: Any, repeats: int) -> float:
    return median_times(fn, repeats)[0]


def median_times(fn: Any, repeats: int) -> tuple[float, float]:
    """Median wall and process CPU seconds of ``fn()`` (at 1 thread the CPU is the call's own work)."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return float(np.median(wall)), float(np.median(cpu))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab.measure_early_exit", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--engine", choices=("fast", "reference"), default="fast")
    parser.add_argument(
        "--weights",
        choices=("exact", "int8"),
        default="exact",
        help="the weights mode measured (default exact: the mode of the saved measurements)",
    )
    parser.add_argument(
        "--prompts",
        choices=("hand", "generated"),
        default="hand",
        help="calibration prompts: the hand-written pool (default, all of it) or the seeded generator",
    )
    parser.add_argument(
        "--prompts-per-kind",
        type=int,
        default=None,
        help="per kind (default: the whole hand-written pool; 60 generated)",
    )
    parser.add_argument("--lens-prompts-per-kind", type=int, default=8)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--tokens-per-prompt", type=int, default=16)
    parser.add_argument("--heldout-tokens", type=int, default=32)
    parser.add_argument("--q", default="0.9", help="comma-separated levels")
    parser.add_argument(
        "--depth-sets",
        default=None,
        help='candidate depth sets, e.g. "8,12,16,20,24;24" (default: the five default depths, and the deepest alone)',
    )
    parser.add_argument("--speed-prompts", type=int, default=2, help="per kind (0: no cost and speed)")
    parser.add_argument("--max-heldout", type=int, default=None)
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="where the run's JSON goes (default lab/measurements/early_exit_MODEL[_generated].json)",
    )
    parser.add_argument(
        "--records",
        type=Path,
        default=None,
        help="save the scored calibration and held-out steps (.npz) to recalibrate without the model",
    )
    parser.add_argument(
        "--from-records",
        type=Path,
        default=None,
        help="take the scored steps and the lens from a saved --records file (no trajectories; cost and speed run)",
    )
    parser.add_argument(
        "--sparse-cost",
        action="store_true",
        help="also the exit head's cost with the exact sparse head (int8 mode), beside the full head's",
    )
    parser.add_argument(
        "--records-provenance",
        type=Path,
        default=None,
        help="with --from-records: the JSON of the run that saved them, whose provenance becomes this run's source",
    )
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the tables of a saved --json run (no model work)"
    )
    return parser


def depth_sets(text: str | None, n_layer: int) -> list[tuple[int, ...]]:
    """``--depth-sets`` ("8,12;24"), or the default depths and the deepest alone."""
    if text is None:
        default = default_depths(n_layer)
        return [default, (default[-1],)]
    return [tuple(int(x) for x in part.split(",")) for part in text.split(";")]


@dataclass(frozen=True)
class Scored:
    """The scored steps of one run: per head ("own", "lens"), calibration and held-out records."""

    lens: Lens
    n_lens: int  # steps the lens was fitted on
    cal: dict[str, Records]
    held: dict[str, Records]


def score_prompts(
    model: ExitModel,
    prompts: dict[str, list[tuple[str, list[int]]]],
    tokens: int,
    heldout_tokens: int,
    depths: tuple[int, ...],
    stop_ids: frozenset[int],
) -> Scored:
    """Greedy trajectories of the lens, calibration and held-out prompts, the lens fitted on the
    first, the other two scored with each head (trajectories released as soon as scored)."""
    lens_traj = trajectories(model, prompts["lens"], tokens, depths, stop_ids, "lens prompts")
    lens = lens_from(lens_traj, depths, 1e-2)
    n_lens = sum(t.full_logits.shape[0] for t in lens_traj)
    del lens_traj
    cal_traj = trajectories(model, prompts["cal"], tokens, depths, stop_ids, "calibration prompts")
    held_traj = trajectories(model, prompts["held"], heldout_tokens, depths, stop_ids, "held-out prompts")
    cal = {"lens": score(model, cal_traj, depths, lens), "own": score(model, cal_traj, depths, None)}
    held = {"lens": score(model, held_traj, depths, lens), "own": score(model, held_traj, depths, None)}
    return Scored(lens, n_lens, cal, held)


Calibrations = dict[tuple[str, Fraction, tuple[int, ...]], Calibration]  # (head, q, depth set) -> artifact


def gate_rows(
    scored: Scored,
    sets: list[tuple[int, ...]],
    depths: tuple[int, ...],
    levels: list[Fraction],
    identity: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]], Calibrations]:
    """Per head: the held-out agreement per depth; per head, depth set, level and gate: the
    held-out report of a calibration built on the calibration records; and those calibrations.
    ``identity``: model_sha256, model_name, n_layer of the artifacts."""
    agreement: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    cals: Calibrations = {}
    for head in ("own", "lens"):
        agreement[head] = {
            "depths": list(depths),
            "heldout": [float(np.mean(~scored.held[head].flips[i])) for i in range(len(depths))],
        }
        for subset in sets:
            cal_rec, held_rec = at_depths(scored.cal[head], subset), at_depths(scored.held[head], subset)
            keep = [depths.index(d) for d in subset]
            head_lens = None if head == "own" else Lens(subset, scored.lens.weight[keep], scored.lens.bias[keep])
            for level in levels:
                cal = build(cal_rec, q=level, lens=head_lens, n_lens=scored.n_lens if head == "lens" else 0, **identity)
                cals[(head, level, subset)] = cal
                for gate in cast(tuple[GateKind, ...], ("margin", "halfrange")):
                    rows.append({**held_out_report(cal, held_rec, gate), "head": head})
    return agreement, rows, cals


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.from_json is not None:
        print(markdown(json.loads(args.from_json.read_text())))
        return 0

    out_json = args.json or default_json_path(
        Path(args.model).stem if args.model.endswith(".gguf") else args.model, args.prompts
    )
    if not out_json.parent.is_dir():  # checked before the model work, which takes minutes
        parser.error(f"--json {out_json}: the folder {out_json.parent} does not exist")
    path = resolve_model(args.model)
    loaded = load_engine(str(path), engine=args.engine, weights=args.weights)
    model, n_layer = loaded.model, loaded.model.config.n_layer
    sets = depth_sets(args.depth_sets, n_layer)
    depths = tuple(sorted({d for s in sets for d in s}))
    stop_ids = chat_stop_ids(loaded.tokenizer, loaded.chat)
    held_text = [(prompt_kind(text), text) for _, text in read_prompts(HELDOUT_PROMPTS)[: args.max_heldout]]
    texts = {
        "lens": generate_mix(args.lens_prompts_per_kind, args.seed),
        "cal": calibration_text(args.prompts, args.prompts_per_kind, args.seed, args.lens_prompts_per_kind),
        "held": held_text,
    }
    prompts = {name: encode_prompts(loaded.tokenizer, loaded.chat, text) for name, text in texts.items()}

    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    start_commit = provenance(argv, load_start)["commit"]  # the code this run runs
    if args.from_records is not None:  # the saved scores and lens: no trajectories
        scored = load_scored(args.from_records)
    else:
        scored = score_prompts(model, prompts, args.tokens_per_prompt, args.heldout_tokens, depths, stop_ids)
    if args.records is not None:
        save_records(
            args.records,
            {f"cal_{h}": r for h, r in scored.cal.items()} | {f"held_{h}": r for h, r in scored.held.items()},
            scored.lens,
            scored.n_lens,
        )
    print(f"[trajectories and scores: {time.perf_counter() - started:.0f} s]", file=sys.stderr)

    levels = [Fraction(x) for x in args.q.split(",")]
    identity = {"model_sha256": file_sha256(path), "model_name": path.name, "n_layer": n_layer}
    agreement, gates, cals = gate_rows(scored, sets, depths, levels, identity)
    results: dict[str, Any] = {
        "model": path.name,
        "engine": args.engine,
        "weights": weights_mode_of(model),
        "n_layer": n_layer,
        "depth_sets": [list(s) for s in sets],
        "claim": PROMPT_CLAIM,
        "calibration_prompts": scored.cal["own"].n_prompts,
        "calibration_steps": scored.cal["own"].n,
        "lens_prompts": len(prompts["lens"]),
        "lens_steps": scored.n_lens,
        "heldout_prompts": scored.held["own"].n_prompts,
        "heldout_steps": scored.held["own"].n,
        "tokens_per_prompt": args.tokens_per_prompt,
        "heldout_tokens": args.heldout_tokens,
        "calibration_source": args.prompts,
        "seed": args.seed,
        "draw_seed": DRAW_SEED,
        "agreement": agreement,
        "gates": gates,
    }
    if args.speed_prompts > 0:
        held_prompts = prompts["held"]
        timed = [
            p for kind in sorted({k for k, _ in held_prompts}) for p in per_kind(held_prompts, kind, args.speed_prompts)
        ]
        results["speed_prompts"] = len(timed)
        results["cost"] = exit_head_cost(model, held_prompts[0][1], depths[0], scored.lens)
        if args.sparse_cost:
            results["cost"]["sparse"] = sparse_head_cost(
                cast(FastModel, model), path, held_prompts[0][1], depths, results["cost"]["token_cpu_s"]
            )
        results["speed"] = speed(
            model,
            loaded.tokenizer,
            timed,
            args.heldout_tokens,
            stop_ids,
            cals,
            levels,
            sets,
            cut_models(path, model, cuts_needed(cals, timed)),
        )
    results["provenance"] = provenance(argv, load_start, start_commit)
    store = getattr(model, "store", None)  # the int8 law depends on its kernels (engine/tile_*.py)
    if store is not None:
        results["provenance"]["kernels"] = f"layers {store.layer_kernel}, head {store.head_kernel}"
    if args.records_provenance is not None:
        saved = json.loads(args.records_provenance.read_text()).get("provenance", {})
        results["provenance"]["source"] = (
            f"scored steps and lens from {args.from_records.name}, saved by `{saved.get('command')}` at commit "
            f"{saved.get('commit')}, finished {saved.get('finished_utc')}, load average {saved.get('loadavg_at_start')} "
            f"at start, {saved.get('loadavg_at_end')} at end"
        )
    results["wall_s"] = time.perf_counter() - started
    write_json(out_json, results)  # before rendering: a rendering error must not lose the run
    print(markdown(results))
    return 0


def save_records(path: Path, named: dict[str, Records], lens: Lens | None = None, n_lens: int = 0) -> None:
    """Every field of each ``Records`` under ``NAME.field`` in one compressed .npz, and the tuned
    lens they were scored with (``lens.depths``, ``lens.weight``, ``lens.bias``, ``lens.steps``)."""
    arrays: dict[str, Any] = {}  # (numpy's stub types **kwds like its bool allow_pickle)
    if lens is not None:
        arrays |= {
            "lens.depths": np.asarray(lens.depths, dtype=np.int64),
            "lens.weight": lens.weight,
            "lens.bias": lens.bias,
            "lens.steps": np.asarray(n_lens, dtype=np.int64),
        }
    for name, r in named.items():
        arrays |= {
            f"{name}.depths": np.asarray(r.depths, dtype=np.int64),
            f"{name}.supnorm": r.supnorm,
            f"{name}.halfrange": r.halfrange,
            f"{name}.margins": r.margins,
            f"{name}.flips": r.flips,
            f"{name}.kinds": np.asarray(r.kinds, dtype=np.str_),
            f"{name}.prompt": r.prompt,
        }
    with path.open("wb") as f:
        np.savez_compressed(f, **arrays)


def load_records(path: Path, name: str) -> Records:
    """The ``Records`` saved under ``name`` by :func:`save_records`."""
    with np.load(path) as z:
        return Records(
            tuple(int(d) for d in z[f"{name}.depths"]),
            np.asarray(z[f"{name}.supnorm"], dtype=np.float32),
            np.asarray(z[f"{name}.halfrange"], dtype=np.float32),
            np.asarray(z[f"{name}.margins"], dtype=np.float32),
            np.asarray(z[f"{name}.flips"], dtype=np.bool_),
            [str(k) for k in z[f"{name}.kinds"]],
            np.asarray(z[f"{name}.prompt"], dtype=np.int64),
        )


def load_scored(path: Path) -> Scored:
    """The scored steps and the lens saved by a ``--records`` run (no model work); ModelError-free
    KeyError when the file predates the saved lens (re-run with ``--records``)."""
    with np.load(path) as z:
        if "lens.weight" not in z:
            raise SystemExit(f"{path}: no saved lens (records saved before the lens was kept): run the model")
        lens = Lens(
            tuple(int(d) for d in z["lens.depths"]),
            np.asarray(z["lens.weight"], dtype=np.float32),
            np.asarray(z["lens.bias"], dtype=np.float32),
        )
        n_lens = int(z["lens.steps"])
    heads = ("own", "lens")
    return Scored(
        lens,
        n_lens,
        {h: load_records(path, f"cal_{h}") for h in heads},
        {h: load_records(path, f"held_{h}") for h in heads},
    )


def calibration_text(source: str, per_kind: int | None, seed: int, lens_per_kind: int) -> list[tuple[str, str]]:
    """(kind by the rule, text) of the calibration prompts: the hand-written pool (its first
    ``per_kind`` of each kind, default all) or the generator's (after the lens prompts, default 60)."""
    if source == "generated":
        return generate_mix(60 if per_kind is None else per_kind, seed, skip=lens_per_kind)
    return hand_written_pool(per_kind)


def exit_head_cost(model: ExitModel, prompt: list[int], depth: int, lens: Lens) -> dict[str, float]:
    """The exit head's time (own; lens + head) relative to one full one-token forward (medians)."""
    cache = model.new_cache(64)
    model.forward(prompt[:16], cache)
    length = cache.length

    def one_token() -> None:
        cache.truncate(length)
        model.forward([prompt[0]], cache)

    h = np.zeros((1, model.config.n_embd), dtype=np.float32) + np.float32(0.1)
    token_s, token_cpu = median_times(one_token, 15)
    head_s, head_cpu = median_times(lambda: exit_logits(model, depth, h, None), 15)
    lens_head_s, lens_head_cpu = median_times(lambda: exit_logits(model, depth, h, lens), 15)
    return {
        "token_s": token_s,
        "head_s": head_s,
        "lens_head_s": lens_head_s,
        "head_relative": head_s / token_s,
        "lens_head_relative": lens_head_s / token_s,
        "token_cpu_s": token_cpu,
        "head_cpu_relative": head_cpu / token_cpu,
        "lens_head_cpu_relative": lens_head_cpu / token_cpu,
    }


def sparse_head_cost(
    model: FastModel, path: Path, prompt: list[int], depths: Sequence[int], token_cpu_s: float, repeats: int = 5
) -> dict[str, Any]:
    """The exit head at each candidate depth with the full head and with the exact sparse head
    (``FastModel.with_head("sparse")``, the early-exit loop's view: the exact top-2 of the full
    head), on the prompt's last hidden state at that depth: median CPU seconds per evaluation and
    their share of a full one-token forward (``token_cpu_s``, full head); whether both heads gave
    the same top-2 (ids and values); how many of the head's chunks the sparse head evaluated."""
    from verispec.engine.sparse_head import HeadOptions

    sparse = model.with_head(HeadOptions("sparse"), path)
    view = sparse.for_law(SamplingParams(temperature=0.0), exit_head=True)
    assert sparse.sparse_head is not None
    hidden = model.forward(prompt, model.new_cache(len(prompt) + 1), return_hidden=True).hidden
    assert hidden is not None
    full_cpu, sparse_cpu, same = [], [], True
    sparse.sparse_head.stats.reset()
    for depth in depths:
        h = np.ascontiguousarray(hidden[depth][-1:], dtype=np.float32)
        full_cpu.append(median_times(partial(model.head, h), repeats)[1])
        sparse_cpu.append(median_times(partial(view.head, h), repeats)[1])
        want, got = model.head(h)[-1], view.head(h)[-1]
        top = np.argsort(-want, kind="stable")[:2]
        same = same and bool(
            np.array_equal(np.argsort(-got, kind="stable")[:2], top) and np.array_equal(got[top], want[top])
        )
    return {
        "depths": list(depths),
        "full_cpu_s": full_cpu,
        "sparse_cpu_s": sparse_cpu,
        "full_cpu_relative": [c / token_cpu_s for c in full_cpu],
        "sparse_cpu_relative": [c / token_cpu_s for c in sparse_cpu],
        "same_top2": same,
        "sparse_stats": sparse.sparse_head.stats.as_dict(),
    }


def per_kind(prompts: list[tuple[str, list[int]]], kind: str, n: int) -> list[tuple[str, list[int]]]:
    """The first ``n`` prompts of ``kind``, in order."""
    return [p for p in prompts if p[0] == kind][:n]


def boundaries(cal: Calibration, kinds: Sequence[str]) -> tuple[int, ...]:
    """The depths where early exit's passes start and stop under ``cal`` for prompts of ``kinds``
    (each kind's depths that can admit under the margin gate, :func:`exit_depths`): where the
    serve loader cuts the layer chain."""
    return tuple(sorted({d for kind in kinds for d in exit_depths(cal.for_kind(kind), "margin")}))


def cuts_needed(cals: Calibrations, prompts: list[tuple[str, list[int]]]) -> set[tuple[int, ...]]:
    kinds = sorted({kind for kind, _ in prompts})
    return {boundaries(cal, kinds) for cal in cals.values()}


def cut_models(path: Path, model: ExitModel, cuts: set[tuple[int, ...]]) -> dict[tuple[int, ...], ExitModel]:
    """Boundaries -> the model early exit is timed on: the fast engine's fused layers loaded again
    with the chain cut there (``FastModel.load(pass_boundaries=...)``, as the serve loader loads
    it: the same bits, no link half computed and dropped at a candidate depth); no boundaries (every
    kind refused), or any other model: the model as it is."""
    fused = isinstance(model, FastModel) and model.fused
    return {
        cut: FastModel.load(path, weights=model.weights_mode, pass_boundaries=cut)
        if fused and cut and isinstance(model, FastModel)
        else model
        for cut in cuts
    }


def speed(
    model: ExitModel,
    tokenizer: Any,
    prompts: list[tuple[str, list[int]]],
    max_tokens: int,
    stop_ids: frozenset[int],
    cals: dict[tuple[str, Fraction, tuple[int, ...]], Calibration],
    levels: list[Fraction],
    sets: list[tuple[int, ...]],
    exit_models: dict[tuple[int, ...], ExitModel],
) -> list[dict[str, Any]]:
    """Tokens/s of plain greedy decoding (on ``model``, the CLI's plain loop for its engine:
    ``engine.generate.generate_any``) and of early exit (margin gate, each head,
    depth set and level, on ``exit_models`` of its boundaries), same prompts, same run, configurations
    interleaved prompt by prompt; each prompt served under its kind's thresholds."""
    greedy = SamplingParams(temperature=0.0)
    configs: list[tuple[str, str, tuple[int, ...], Fraction | None]] = [("plain", "", (), None)]
    configs += [("early exit", head, subset, level) for level in levels for subset in sets for head in ("own", "lens")]
    totals = {c: [0.0, 0.0, 0.0, 0.0, 0.0] for c in configs}  # tokens, seconds, depth sum, head evals, CPU s
    kinds: dict[tuple[Any, ...], dict[str, list[float]]] = {c: {} for c in configs}  # kind -> tokens, CPU s, depths
    if prompts:  # a warm-up of every model (first calls allocate), untimed
        warm = GenerationRequest(tuple(prompts[0][1]), greedy, max_tokens=2, stop_ids=stop_ids, seed=0)
        generate_any(cast(Model, model), tokenizer, warm)
        for exit_model in exit_models.values():
            generate_any(cast(Model, exit_model), tokenizer, warm)
    for kind, ids in prompts:
        request = GenerationRequest(tuple(ids), greedy, max_tokens=max_tokens, stop_ids=stop_ids, seed=0)
        for config in configs:
            label, head, subset, level = config
            t, cpu = time.perf_counter(), time.process_time()
            if level is None:
                out = generate_any(cast(Model, model), tokenizer, request)  # the CLI's plain loop
                depth_sum, evaluations = len(out.ids) * model.config.n_layer, 0
            else:
                cal = cals[(head, level, subset)]
                cut = boundaries(cal, [kind for kind, _ in prompts])
                out, stats = generate_early_exit(exit_models[cut], tokenizer, request, cal, gate="margin", kind=kind)
                depth_sum, evaluations = sum(stats.depths), stats.head_evaluations
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
            total = totals[config]
            total[4] += cpu
            part = kinds[config].setdefault(kind, [0.0, 0.0, 0.0])
            part[0] += len(out.ids)
            part[1] += cpu
            part[2] += depth_sum
            total[0] += len(out.ids)
            total[1] += seconds
            total[2] += depth_sum
            total[3] += evaluations
    rows: list[dict[str, Any]] = []
    for config, (tokens, seconds, depths_total, evaluations_total, cpu_s) in totals.items():
        label, head, subset, level = config
        rows.append(
            {
                "config": label,
                "head": head,
                "depths": list(subset),
                "q": "" if level is None else str(level),
                "tokens": int(tokens),
                "seconds": seconds,
                "tokens_per_s": tokens / seconds,
                "cpu_seconds": cpu_s,
                "tokens_per_cpu_s": tokens / cpu_s,
                "mean_depth": depths_total / max(1, tokens),
                "head_evaluations_per_token": evaluations_total / max(1, tokens),
                "per_kind": {
                    kind: {"tokens": int(t), "cpu_seconds": c, "tokens_per_cpu_s": t / c, "mean_depth": d / max(1, t)}
                    for kind, (t, c, d) in sorted(kinds[config].items())
                },
            }
        )
        print(f"[speed {label} {head} {list(subset)} q={level}: {tokens / seconds:.2f} tokens/s]", file=sys.stderr)
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / rows[0]["tokens_per_s"]
        row["cpu_speedup"] = row["tokens_per_cpu_s"] / rows[0]["tokens_per_cpu_s"]
        for kind, part in row["per_kind"].items():
            part["cpu_speedup"] = part["tokens_per_cpu_s"] / rows[0]["per_kind"][kind]["tokens_per_cpu_s"]
    return rows


def provenance(argv: list[str] | None, load_start: float, commit: str | None = None) -> dict[str, str]:
    """Date, machine, command, commit (``commit``: taken when the run started) and load average of
    this run (the results page shows them)."""

    flags = sys.argv[1:] if argv is None else argv
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "VERISPEC_THREADS")}
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other work",
        "command": " ".join(["python -m lab.measure_early_exit", *flags]),
        "commit": commit or head_commit(),
        "loadavg_at_start": f"{load_start:.2f}",
        "loadavg_at_end": f"{os.getloadavg()[0]:.2f}",
        "note": ", ".join(f"{k}={v}" for k, v in threads.items()),
    }


LEVEL = 0.05  # per-kind upper bounds at 1 - LEVEL; verdicts at LEVEL / (number of kinds)


def verdict(fractions: Sequence[float], alpha: float, n_kinds: int) -> tuple[float, float, str]:
    """(upper bound, p-value, verdict) for a kind's claim "mean flip fraction <= alpha" from its
    held-out prompts' flip fractions (:mod:`lab.bounded_mean`). "exceeds": H0 mean <= alpha
    rejected at LEVEL / n_kinds; "within (shown)": the upper bound itself is <= alpha; "within":
    not rejected, not shown."""
    level = LEVEL / n_kinds
    ucb = upper_bound(fractions, LEVEL)
    p = p_value_above(fractions, alpha, level)
    if p <= level:
        return ucb, p, f"**exceeds** (rejected at {level:.4g}, p = {p:.2g})"
    return ucb, p, "within (shown)" if ucb <= alpha else "within"


def kind_cell(s: dict[str, Any], alpha: float, n_kinds: int) -> str:
    if s["refusal"]:
        return f"refused ({s['calibration_prompts']} calibration prompts), adm. 0%, depth {s['mean_depth']:.2f}"
    ucb, _, word = verdict(s["fractions"], alpha, n_kinds)
    return (
        f"{_pct(s['mean_flip_fraction'])}% ≤ {_pct(ucb)}%, {word}, adm. {_pct(s['admitted'])}%, "
        f"depth {s['mean_depth']:.2f}"
    )


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(r: dict[str, Any]) -> str:
    """The markdown tables of one model's run (printed after a run, or for ``--from-json``)."""
    hand = r.get("calibration_source", "generated") == "hand"  # runs before the pool: generated
    source = "hand-written" if hand else "generated"
    pool = " from verispec/data/prompts_calibration.jsonl" if hand else ""
    lens_source = "generated" if hand else "other generated"
    lines = [
        f"**{r['model']}** ({r['n_layer']} layers; {r['engine']} engine"
        f"{', ' + r['weights'] + ' weights' if 'weights' in r else ''}). Calibration: {r['calibration_prompts']} {source} "
        f"prompts{pool} ({r['calibration_steps']} steps, {r['tokens_per_prompt']} per prompt; lens on {r['lens_prompts']} "
        f"{lens_source} prompts); held-out: {r['heldout_prompts']} hand-written prompts, {r['heldout_steps']} steps "
        f"({r['heldout_tokens']} per prompt). Claim per kind: *{r['claim']}*.",
        "",
        "| head | gate | depths | α | needs / kind | flip fraction (mean over prompts) | its 95% upper bound | drawn flips / prompts [95% CI] | p vs α | admitted | mean depth |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in r["gates"]:
        lo, hi = g["ci95"]
        lines.append(
            f"| {g['head']} | {g['gate']} | {','.join(map(str, g['depths']))} | {g['alpha']:g} | {g['min_prompts']} | "
            f"{_pct(g['mean_flip_fraction'])}% ({g['flips']}/{g['steps']} steps) | {_pct(upper_bound(g['fractions'], LEVEL))}% | {g['drawn_flips']}/{g['prompts']} "
            f"[{_pct(lo)}, {_pct(hi)}]% | {g['p_value']:.2g} | {_pct(g['admitted'])}% | {g['mean_depth']:.2f} |"
        )
    kinds = sorted(r["gates"][0]["per_kind"])
    lines += [
        "",
        f"Per kind (margin gate): mean flip fraction over the kind's held-out prompts, its one-sided "
        f"{1 - LEVEL:.0%} upper bound (betting), verdict at level {LEVEL:g}/{len(kinds)} = {LEVEL / len(kinds):.4g} "
        f"per kind (Bonferroni over the {len(kinds)} kinds of a row), admitted fraction, mean depth served:",
        "",
        "| head | depths | α | " + " | ".join(kinds) + " |",
        "|---|---|---|" + "---|" * len(kinds),
    ]
    for g in r["gates"]:
        if g["gate"] != "margin":
            continue
        cells = [kind_cell(g["per_kind"][kind], g["alpha"], len(kinds)) for kind in kinds]
        lines.append(
            f"| {g['head']} | {','.join(map(str, g['depths']))} | {g['alpha']:g} | " + " | ".join(cells) + " |"
        )
    agree = "; ".join(
        f"{head}: " + ", ".join(f"{d}: {_pct(a)}%" for d, a in zip(v["depths"], v["heldout"]))
        for head, v in r["agreement"].items()
    )
    lines += ["", f"Held-out agreement of the exit head's top-1 with the full argmax, per depth: {agree}."]
    return "\n".join(lines + cost_lines(r))


def sparse_lines(sparse: dict[str, Any] | None) -> list[str]:
    """The exit head's CPU share of a token with the full head and with the exact sparse head."""
    if sparse is None:
        return []
    cells = ", ".join(
        f"{d}: {f:.2f} → {s:.2f}"
        for d, f, s in zip(sparse["depths"], sparse["full_cpu_relative"], sparse["sparse_cpu_relative"])
    )
    stats = sparse["sparse_stats"]
    offered = stats.get("chunks_offered") or 0
    share = f"{stats.get('chunks_evaluated', 0) / offered:.0%}" if offered else "n/a"
    return [
        "",
        f"Exit head per evaluation, CPU share of a full token, head=full → head=sparse (the exact sparse head, "
        f"engine/sparse_head.py; the same top-2: {sparse['same_top2']}), per candidate depth on a held-out prompt's "
        f"hidden state: {cells}; the sparse head evaluated {share} of the head's row chunks.",
    ]


def cost_lines(r: dict[str, Any]) -> list[str]:
    """The exit head's cost share of a token and the tokens/s table (none when not measured)."""
    if "cost" not in r:
        return ["", "Cost and tokens/s: not measured in this run."]
    c = r["cost"]
    lines = [
        "",
        f"Cost: one exit-head evaluation is {c['head_relative']:.2f} of a full token ({1000 * c['head_s']:.1f} ms vs "
        f"{1000 * c['token_s']:.1f} ms), lens + head {c['lens_head_relative']:.2f}"
        + (
            f"; in CPU time {c['head_cpu_relative']:.2f} and {c['lens_head_cpu_relative']:.2f} of a token "
            f"({1000 * c['token_cpu_s']:.1f} ms)."
            if "token_cpu_s" in c
            else "."
        ),
        *sparse_lines(c.get("sparse")),
        "",
        f"Tokens/s over {r.get('speed_prompts', '?')} held-out prompts (the first of each kind; "
        f"{r['speed'][0]['tokens']} greedy tokens of plain decoding), same run, configurations interleaved prompt by "
        "prompt, early exit on the model loaded as the serve loader loads it (its layer chain cut at the candidate "
        "depths), margin gate, each prompt under its kind's thresholds; wall time and process CPU time (on a shared "
        "machine the CPU ratio is the one to read):",
        "",
        "| decoding | head | depths | q | tokens/s | × plain | tokens per CPU s | × plain | mean depth | "
        "exit-head evaluations / token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in r["speed"]:
        lines.append(
            f"| {s['config']} | {s['head'] or '-'} | {','.join(map(str, s['depths'])) or '-'} | "
            f"{s['q'] if s['config'] != 'plain' else '-'} | "
            f"{s['tokens_per_s']:.2f} | {s['speedup']:.2f} | {_num(s.get('tokens_per_cpu_s'))} | "
            f"{_num(s.get('cpu_speedup'))} | "
            f"{s['mean_depth']:.2f} | "
            f"{s.get('head_evaluations_per_token', 0.0):.2f} |"
        )
    kinds = sorted(r["speed"][0].get("per_kind", {}))
    if kinds:
        lines += [
            "",
            "Per kind: tokens per CPU second × plain's, and the mean depth served:",
            "",
            "| decoding | head | depths | q | " + " | ".join(kinds) + " |",
            "|---|---|---|---|" + "---|" * len(kinds),
        ]
        for s in r["speed"][1:]:
            cells = [f"{s['per_kind'][k]['cpu_speedup']:.2f} ({s['per_kind'][k]['mean_depth']:.2f})" for k in kinds]
            lines.append(
                f"| {s['config']} | {s['head']} | {','.join(map(str, s['depths']))} | {s['q']} | "
                + " | ".join(cells)
                + " |"
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())
