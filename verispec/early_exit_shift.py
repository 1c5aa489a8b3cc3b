"""Is a held-out excess a shift between generated and hand-written prompts? ``python -m verispec.early_exit_shift``.

    python -m verispec.early_exit_shift --from-json RUN.json --records RUN.npz [--folds 6] [--markdown]

Reads a saved ``verispec.measure_early_exit`` run (``--json`` for the configuration, ``--records``
for the scored steps) and, per head, depth set, level and prompt kind, compares two flip fractions
under THE SAME calibrations, no model work:

- generated, out of fold: the kind's generated calibration prompts are split into ``--folds``
  seeded folds; each fold's prompts are served under the thresholds calibrated on the other
  folds (every kind calibrated on its other-fold prompts), so each generated prompt gets one
  flip fraction from a calibration that did not see it: what the guarantee promises for new
  prompts exchangeable with the generated ones;
- hand-written: every held-out prompt served under each of those fold calibrations, its flip
  fractions averaged over the folds.

A kind whose hand-written mean is well above its generated out-of-fold mean is shifted: the
generator does not represent what the hand-written prompts of that kind do. Both near α means
the excess is the calibration draw's (the guarantee is an expectation over calibration draws, so
one artifact's held-out risk may sit above α by about its sampling spread). Standard errors are
over prompts (out-of-fold values share calibration prompts, so treat them as approximate).
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from reference.calibration import Records, build
from verispec.measure_early_exit import at_depths, first_exits, load_records

FOLD_SEED = 1130


def of_prompts(records: Records, keep: npt.NDArray[np.bool_]) -> Records:
    """The steps of the prompts with ``keep[prompt]`` (prompt ids kept as they are)."""
    mask = keep[records.prompt]
    return Records(
        records.depths, records.supnorm[:, mask], records.halfrange[:, mask], records.margins[:, mask],
        records.flips[:, mask], [k for k, m in zip(records.kinds, mask) if m], records.prompt[mask],
    )


def renumbered(records: Records) -> Records:
    """The same steps with prompt ids 0..m-1 (in order), as calibration requires."""
    _, prompt = np.unique(records.prompt, return_inverse=True)
    return Records(records.depths, records.supnorm, records.halfrange, records.margins, records.flips,
                   list(records.kinds), np.asarray(prompt, dtype=np.int64).reshape(-1))


def folds_of(records: Records, n_folds: int, seed: int = FOLD_SEED) -> npt.NDArray[np.int64]:
    """A fold per prompt id: within each kind a seeded permutation dealt round-robin."""
    n_prompts = int(records.prompt.max()) + 1
    kind_of = {int(p): k for p, k in zip(records.prompt, records.kinds)}
    fold = np.full(n_prompts, -1, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for kind in sorted(set(kind_of.values())):
        ids = np.asarray(sorted(p for p, k in kind_of.items() if k == kind), dtype=np.int64)
        fold[rng.permutation(ids)] = np.arange(ids.size) % n_folds
    return fold


def per_prompt_fractions(flipped: npt.NDArray[np.bool_], prompt: npt.NDArray[np.int64]) -> dict[int, float]:
    return {int(p): float(np.mean(flipped[prompt == p])) for p in np.unique(prompt)}


def compare(cal: Records, held: Records, q: Fraction, n_layer: int, n_folds: int) -> dict[str, dict[str, Any]]:
    """Per kind: generated out-of-fold and hand-written flip fractions (margin gate) under the fold calibrations."""
    fold = folds_of(cal, n_folds)
    generated: dict[int, float] = {}
    hand: dict[int, list[float]] = {}
    for f in range(n_folds):
        calibration = build(renumbered(of_prompts(cal, fold != f)), q=q, model_sha256="0" * 64, model_name="shift", n_layer=n_layer)
        test = of_prompts(cal, fold == f)
        _, flipped, _ = first_exits(calibration, test, "margin")
        generated |= per_prompt_fractions(flipped, test.prompt)
        _, flipped, _ = first_exits(calibration, held, "margin")
        for p, x in per_prompt_fractions(flipped, held.prompt).items():
            hand.setdefault(p, []).append(x)
    kind_cal = {int(p): k for p, k in zip(cal.prompt, cal.kinds)}
    kind_held = {int(p): k for p, k in zip(held.prompt, held.kinds)}
    out = {}
    for kind in sorted(set(kind_cal.values())):
        g = np.asarray([x for p, x in generated.items() if kind_cal[p] == kind])
        h = np.asarray([float(np.mean(xs)) for p, xs in hand.items() if kind_held[p] == kind] or [np.nan])
        out[kind] = {
            "generated": float(g.mean()), "generated_se": float(g.std(ddof=1) / np.sqrt(g.size)), "generated_prompts": int(g.size),
            "hand": float(h.mean()), "hand_se": float(h.std(ddof=1) / np.sqrt(h.size)), "hand_prompts": int(h.size),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verispec.early_exit_shift", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--from-json", type=Path, required=True)
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--folds", type=int, default=6)
    args = parser.parse_args(argv)
    run = json.loads(args.from_json.read_text())
    levels = sorted({Fraction(g["q"]) for g in run["gates"]}, reverse=True)
    print(f"{run['model']}: margin gate, flip fraction mean over prompts ± s.e.; generated out of fold "
          f"({args.folds} folds) vs hand-written, same calibrations")
    kinds = sorted(set(load_records(args.records, "cal_own").kinds))
    print("\n| head | depths | α | " + " | ".join(kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for head in ("own", "lens"):
        cal_all, held_all = load_records(args.records, f"cal_{head}"), load_records(args.records, f"held_{head}")
        for subset in run["depth_sets"]:
            cal, held = at_depths(cal_all, subset), at_depths(held_all, subset)
            for q in levels:
                result = compare(cal, held, q, run["n_layer"], args.folds)
                cells = [
                    f"gen {100 * r['generated']:.1f} ± {100 * r['generated_se']:.1f} / hand {100 * r['hand']:.1f} ± {100 * r['hand_se']:.1f}"
                    for r in (result[kind] for kind in kinds)
                ]
                print(f"| {head} | {','.join(map(str, subset))} | {float(1 - q):g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
