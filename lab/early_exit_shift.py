"""Is a held-out excess a shift between generated and hand-written prompts? ``python -m lab.early_exit_shift``.

    python -m lab.early_exit_shift --from-json RUN.json --records RUN.npz [--folds 6] [--json OUT.json]

Reads a saved ``lab.measure_early_exit`` run (``--json`` for the configuration, ``--records``
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

Prints the comparison as markdown; ``--json OUT.json`` also saves its numbers (:func:`results`),
from which the docs' results pages are generated; nothing here writes into a README.
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

from lab.measure_early_exit import at_depths, first_exits, load_records, write_json
from verispec.reference.calibration import Records, build
from verispec.reference.errors import CalibrationError

FOLD_SEED = 1130


def of_prompts(records: Records, keep: npt.NDArray[np.bool_]) -> Records:
    """The steps of the prompts with ``keep[prompt]`` (prompt ids kept as they are)."""
    mask = keep[records.prompt]
    return Records(
        records.depths,
        records.supnorm[:, mask],
        records.halfrange[:, mask],
        records.margins[:, mask],
        records.flips[:, mask],
        [k for k, m in zip(records.kinds, mask) if m],
        records.prompt[mask],
    )


def renumbered(records: Records) -> Records:
    """The same steps with prompt ids 0..m-1 (in order), as calibration requires."""
    _, prompt = np.unique(records.prompt, return_inverse=True)
    return Records(
        records.depths,
        records.supnorm,
        records.halfrange,
        records.margins,
        records.flips,
        list(records.kinds),
        np.asarray(prompt, dtype=np.int64).reshape(-1),
    )


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
        calibration = build(
            renumbered(of_prompts(cal, fold != f)), q=q, model_sha256="0" * 64, model_name="shift", n_layer=n_layer
        )
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
            "generated": float(g.mean()),
            "generated_se": float(g.std(ddof=1) / np.sqrt(g.size)),
            "generated_prompts": int(g.size),
            "hand": float(h.mean()),
            "hand_se": float(h.std(ddof=1) / np.sqrt(h.size)),
            "hand_prompts": int(h.size),
        }
    return out


def joined(a: Records, b: Records) -> Records:
    """The steps of ``a`` then ``b`` as one calibration set (b's prompt ids after a's, renumbered)."""
    a, b = renumbered(a), renumbered(b)
    return Records(
        a.depths,
        np.concatenate([a.supnorm, b.supnorm], axis=1),
        np.concatenate([a.halfrange, b.halfrange], axis=1),
        np.concatenate([a.margins, b.margins], axis=1),
        np.concatenate([a.flips, b.flips], axis=1),
        a.kinds + b.kinds,
        np.concatenate([a.prompt, b.prompt + a.n_prompts]),
    )


def with_hand_written(
    cal: Records,
    held: Records,
    q: Fraction,
    n_layer: int,
    n_folds: int = 2,
    generated: bool = True,
) -> dict[str, dict[str, Any]]:
    """Per kind: the hand-written prompts' flip fractions (margin gate) when calibration holds the
    other folds of the hand-written prompts (seeded folds per kind) -- with every generated prompt
    (``generated``) or alone: each hand-written prompt served under a calibration that never saw
    it. Alone, calibration and test prompts are exchangeable by construction (a seeded split of
    one pool): what the guarantee assumes; with the generated ones, what adding a small
    hand-written pool to the shipped calibration would buy."""
    fold = folds_of(held, n_folds)
    hand: dict[int, float] = {}
    admitted = np.zeros(held.n, dtype=np.bool_)  # [steps of held]
    for f in range(n_folds):
        pool = of_prompts(held, fold != f)
        calibration = build(
            joined(cal, pool) if generated else renumbered(pool),
            q=q,
            model_sha256="0" * 64,
            model_name="shift",
            n_layer=n_layer,
        )
        test = of_prompts(held, fold == f)
        depth, flipped, _ = first_exits(calibration, test, "margin")
        hand |= per_prompt_fractions(flipped, test.prompt)
        admitted[fold[held.prompt] == f] = depth < n_layer
    kind_held = {int(p): k for p, k in zip(held.prompt, held.kinds)}
    out = {}
    for kind in sorted(set(kind_held.values())):
        h = np.asarray([x for p, x in hand.items() if kind_held[p] == kind])
        out[kind] = {
            "hand_mixed": float(h.mean()),
            "hand_mixed_se": float(h.std(ddof=1) / np.sqrt(h.size)),
            "prompts": int(h.size),
            "admitted": float(admitted[np.asarray(held.kinds) == kind].mean()),
        }
    return out


def _se(mean: float, se: float) -> str:
    return f"{100 * mean:.1f}±{100 * se:.1f}"


def _alone(r: dict[str, Any]) -> str:
    return "refused" if r["admitted"] == 0.0 else _se(r["hand_mixed"], r["hand_mixed_se"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.early_exit_shift", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--from-json", type=Path, required=True)
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--folds", type=int, default=6)
    parser.add_argument("--json", type=Path, default=None, help="also save the comparison's numbers here")
    args = parser.parse_args(argv)
    try:
        shift = results(args.from_json, args.records, args.folds)
    except CalibrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        write_json(args.json, shift)
    print(markdown(shift))
    return 0


def results(from_json: Path, records: Path, folds: int) -> dict[str, Any]:
    """The comparison for one saved run: per head, depth set and level, per kind the four flip
    fractions (:func:`compare`, :func:`with_hand_written` with and without the generated prompts)."""
    run = json.loads(from_json.read_text())
    if run.get("calibration_source", "generated") != "generated":  # runs before the pool have no field
        raise CalibrationError(
            f"{str(from_json)!r} calibrated on {run['calibration_source']!r} prompts: the comparison "
            "needs a run calibrated on generated prompts (measure_early_exit --prompts generated)"
        )
    levels = sorted({Fraction(g["q"]) for g in run["gates"]}, reverse=True)
    kinds = sorted(set(load_records(records, "cal_own").kinds))
    rows: list[dict[str, Any]] = []
    for head in ("own", "lens"):
        cal_all, held_all = load_records(records, f"cal_{head}"), load_records(records, f"held_{head}")
        for subset in run["depth_sets"]:
            cal, held = at_depths(cal_all, subset), at_depths(held_all, subset)
            for q in levels:
                rows.append(
                    {
                        "head": head,
                        "depths": list(subset),
                        "alpha": float(1 - q),
                        "generated_vs_hand": compare(cal, held, q, run["n_layer"], folds),
                        "added": with_hand_written(cal, held, q, run["n_layer"]),
                        "alone": with_hand_written(cal, held, q, run["n_layer"], generated=False),
                    }
                )
    return {
        "model": run["model"],
        "from_json": str(from_json),
        "records": str(records),
        "folds": folds,
        "kinds": kinds,
        "rows": rows,
    }


def markdown(shift: dict[str, Any]) -> str:
    """The comparison as a markdown table (what a run prints)."""
    kinds = shift["kinds"]
    lines = [
        f"**{shift['model']}**, margin gate, flip fraction in % (mean over prompts ± s.e.), per kind: "
        f"*generated* prompts out of fold ({shift['folds']} folds) / *hand*-written prompts under the same calibrations / "
        f"hand-written out of fold (2 folds) with the other fold *added* to the generated calibration prompts / "
        f"the same with the other fold *alone* as calibration (15 per kind).",
        "",
        "| head | depths | α | " + " | ".join(f"{k}: gen / hand / added / alone" for k in kinds) + " |",
        "|---|---|---|" + "---|" * len(kinds),
    ]
    for row in shift["rows"]:
        result, mixed, alone = row["generated_vs_hand"], row["added"], row["alone"]
        cells = [
            f"{_se(result[kind]['generated'], result[kind]['generated_se'])} / {_se(result[kind]['hand'], result[kind]['hand_se'])}"
            f" / {_se(mixed[kind]['hand_mixed'], mixed[kind]['hand_mixed_se'])} / {_alone(alone[kind])}"
            for kind in kinds
        ]
        lines.append(
            f"| {row['head']} | {','.join(map(str, row['depths']))} | {row['alpha']:g} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
