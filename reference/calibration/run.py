"""The whole calibration: candidate depths, the lens and calibration splits, trajectories, records and
the artifact, in one call (:func:`calibrate`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction

from verispec.reference.calibration.artifact import (
    CALIBRATED_HEAD_KERNELS,
    CALIBRATED_LAYER_KERNELS,
    CALIBRATED_WEIGHTS,
    Calibration,
    build,
)
from verispec.reference.calibration.trajectories import Records, Trajectory, greedy_trajectory, lens_from, score
from verispec.reference.certificate import ResidualKind
from verispec.reference.conformal import exact_level
from verispec.reference.errors import CalibrationError
from verispec.reference.exit_head import GateKind
from verispec.reference.seams import TargetModel as Model

Prompt = tuple[str, list[int]]  # (kind, token ids)


def default_depths(n_layer: int) -> tuple[int, ...]:
    """Five candidate depths at 4/15 .. 12/15 of the model (SmolLM2's 30 layers: 8, 12, 16, 20, 24)."""
    return tuple(sorted({max(1, min(n_layer - 1, round(n_layer * f / 15))) for f in (4, 6, 8, 10, 12)}))


def split_for_lens(prompts: Sequence[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(lens split, calibration split): alternate prompts within each kind (disjoint by prompt)."""
    seen: dict[str, int] = {}
    lens_split: list[Prompt] = []
    cal_split: list[Prompt] = []
    for kind, ids in prompts:
        i = seen.get(kind, 0)
        seen[kind] = i + 1
        (lens_split if i % 2 == 0 else cal_split).append((kind, ids))
    return lens_split, cal_split


def check_depths(depths: Sequence[int], n_layer: int) -> tuple[int, ...]:
    """Sorted unique candidate depths, each in 1..n_layer-1 (CalibrationError otherwise)."""
    out = tuple(sorted(set(int(d) for d in depths)))
    if not out or any(not 1 <= d < n_layer for d in out):
        raise CalibrationError(f"candidate layers {list(depths)} must be non-empty and in 1..{n_layer - 1}")
    return out


def calibrate(
    model: Model,
    prompts: Sequence[Prompt],
    *,
    model_sha256: str,
    model_name: str,
    depths: Sequence[int] | None = None,
    q: Fraction | str | float = "0.9",
    n_steps: int = 48,
    use_lens: bool = True,
    lens_prompts: Sequence[Prompt] | None = None,
    ridge: float = 1e-2,
    gate: GateKind = "margin",
    residual: ResidualKind = "halfrange",
    kind_rule: str = "rule",
    stop_ids: frozenset[int] = frozenset(),
    on_step: Callable[[], None] | None = None,
    weights: str = "f32",
    head_kernel: str | None = None,
    layer_kernel: str | None = None,
) -> tuple[Calibration, Records]:
    """Greedy trajectories of the full model on ``prompts``; the lens (if ``use_lens``) is fit on
    ``lens_prompts`` (or, if None, on every other prompt of each kind, the rest calibrating);
    scores and the artifact on the calibration prompts. ``kind_rule`` records how the prompts'
    kinds were assigned ("rule": :func:`reference.prompt_kind.prompt_kind`; "declared");
    ``weights`` the weights mode ``model`` runs and, int8, ``head_kernel`` its head's kernel and
    ``layer_kernel`` its layers' (None: ``mlas``); all recorded: the artifact serves those numerics."""
    if weights not in CALIBRATED_WEIGHTS:
        raise CalibrationError(f"weights mode {weights!r} is not one of {', '.join(CALIBRATED_WEIGHTS)}")
    if weights == "int8":
        head_kernel = head_kernel or "mlas"
        if head_kernel not in CALIBRATED_HEAD_KERNELS:
            raise CalibrationError(f"head kernel {head_kernel!r} is not one of {', '.join(CALIBRATED_HEAD_KERNELS)}")
        layer_kernel = layer_kernel or "mlas"
        if layer_kernel not in CALIBRATED_LAYER_KERNELS:
            raise CalibrationError(f"layer kernel {layer_kernel!r} is not one of {', '.join(CALIBRATED_LAYER_KERNELS)}")
    elif head_kernel is not None:
        raise CalibrationError(f"head kernels are the int8 mode's (weights mode {weights!r} has none)")
    elif layer_kernel is not None:
        raise CalibrationError(f"layer kernels are the int8 mode's (weights mode {weights!r} has none)")
    level = exact_level(q)
    ks = check_depths(default_depths(model.config.n_layer) if depths is None else depths, model.config.n_layer)
    if not use_lens:
        lens_split, cal_split = [], list(prompts)
    elif lens_prompts is not None:
        lens_split, cal_split = list(lens_prompts), list(prompts)
    else:
        lens_split, cal_split = split_for_lens(prompts)
    if use_lens and (not lens_split or not cal_split):
        raise CalibrationError(
            f"a lens needs at least 2 prompts of one kind (one per split), got {len(prompts)} prompts"
        )

    def run(split: Sequence[Prompt]) -> list[Trajectory]:
        return [
            greedy_trajectory(model, ids, n_steps, ks, kind=kind, stop_ids=stop_ids, on_step=on_step)
            for kind, ids in split
        ]

    lens = None
    n_lens = 0
    if use_lens:
        lens_trajectories = run(lens_split)
        n_lens = sum(t.full_logits.shape[0] for t in lens_trajectories)
        lens = lens_from(lens_trajectories, ks, ridge)
        del lens_trajectories
    records = score(model, run(cal_split), ks, lens)
    cal = build(
        records,
        q=level,
        model_sha256=model_sha256,
        model_name=model_name,
        n_layer=model.config.n_layer,
        gate=gate,
        residual=residual,
        lens=lens,
        n_lens=n_lens,
        ridge=ridge if use_lens else 0.0,
        kind_rule=kind_rule,
    )
    return replace(cal, weights=weights, head_kernel=head_kernel, layer_kernel=layer_kernel), records
