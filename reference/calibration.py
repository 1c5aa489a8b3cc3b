"""Early-exit calibration: records along the full model's greedy trajectories, and the artifact.

Records. For each prompt the full model decodes greedily (every layer, as served without exits);
at each step (the last prompt position, then every generated token but the last) we keep the full
logits t [V] and the hidden states at the candidate depths. Then, per depth k, the exit logits
d = exit_logits(k, hidden) (batched over the prompt's steps) give, in float32:
``supnorm`` and ``halfrange`` residual scores (:func:`reference.certificate.residual_rows`), the
exit's top-1 ``margin`` and id (:func:`reference.certificate.top2_rows`), and the ``flip`` event
(exit top-1 != full argmax); each step remembers its prompt and the prompt's kind. Note: the serve
path evaluates the head on one row at a time, the calibration on a batch of rows; BLAS may round
the two differently in the last bits, so serve scores are exchangeable with calibration scores up
to that rounding.

Guarantee: the prompt is the exchangeable unit (:func:`reference.conformal.prompt_risk_threshold`).
Per depth and per prompt kind (Mondrian calibration: the kind is a deterministic function of the
prompt, :func:`reference.prompt_kind.prompt_kind`, or declared), every threshold is calibrated by
conformal risk control over that kind's prompts at alpha/K: the margin threshold on the loss "fraction of the
prompt's tokens admitted at this depth that flip", the residual quantiles on "fraction of the
prompt's tokens whose score exceeds Q" (a residual gate admits a flip only above Q). Each kind's
claim: PROMPT_CLAIM, "expected flip fraction of a new prompt ≤ α, valid when prompts (not tokens)
are exchangeable", for new prompts of that kind (the pooled calibration ``depths``: for a new
prompt exchangeable with the whole calibration mix). A kind with fewer than
:func:`reference.conformal.min_prompts` prompts gets +inf thresholds: it admits nothing, and
:attr:`Calibration.refusal` says so.

Artifact (:class:`Calibration`, JSON): model sha256, q, alpha = 1 - q, alpha/K, the claim, the
candidate depths, the pooled and per-kind thresholds, the default gate and residual kind, and the
lens if one was fit on prompts disjoint from the calibration prompts. The lens is written to
``X.lens.<sha256[:16]>.npz``, a name that changes with its content, BEFORE the JSON that names it
(with its sha256) replaces the old JSON: killed at any point, ``X.json`` is either the old
artifact with its old lens file or the new one with its new lens file (the pair is one atomic
unit); stale lens files are removed after. Loading checks the sha256, refuses NaN or malformed
thresholds, and an artifact for another model (all CalibrationError); every number must be one
calibration can produce (:func:`check_ranges`), the artifact and its lens must match the
seal over both files' contents, an HMAC where ``VERISPEC_CALIBRATION_KEY`` is set
(:mod:`reference.calibration_seal`, which says what an unkeyed seal cannot catch), and every
threshold must equal what the calibration scores the artifact carries give when recomputed
(:func:`check_recomputed`, :mod:`reference.calibration_records`). Served, the artifact must fit
the model: its layer count and lens width (:meth:`Calibration.check_fits`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.atomic import output_file, replace_file
from verispec.reference.calibration_records import records_from_json, records_json
from verispec.reference.calibration_seal import SEAL_FIELD, calibration_key, check_seal, seal
from verispec.reference.certificate import RESIDUAL_KINDS, ResidualKind, residual_rows, top2_rows
from verispec.reference.conformal import PROMPT_CLAIM, bonferroni, exact_level, min_prompts, prompt_risk_threshold
from verispec.reference.errors import CalibrationError, OutputError
from verispec.reference.exit_head import GATE_KINDS, GateKind, Lens, exit_logits, fit_lens
from verispec.reference.json_input import read_json_file, read_regular, shown
from verispec.reference.seams import TargetModel as Model

F32 = npt.NDArray[np.float32]
FORMAT = "verispec-early-exit-calibration/3"
ARTIFACT_BYTES = 64 * 1024 * 1024  # the JSON: thresholds per depth and kind, far below this
LENS_BYTES = 4 * 1024 * 1024 * 1024  # the lens: K x D x D float32 (K = 5, D = 4096: 335 MB)
POOLED = "*"  # the pseudo-kind of the pooled calibration (every prompt of the mix)


# --- trajectories and records -------------------------------------------------------------------


@dataclass(frozen=True)
class Trajectory:
    """One prompt's greedy decode by the full model: per step, the full logits and hidden states."""

    kind: str
    full_logits: F32  # [T, V]
    hidden: F32  # [K, T, D] at the candidate depths
    final: F32  # [T, D] at depth L (before the final norm)
    prompt_hidden: F32 | None = None  # [K, P-1, D] prompt positions but the last (lens data only)
    prompt_final: F32 | None = None  # [P-1, D]


def greedy_trajectory(
    model: Model,
    prompt_ids: Sequence[int],
    n_steps: int,
    depths: Sequence[int],
    *,
    kind: str = "",
    stop_ids: frozenset[int] = frozenset(),
    on_step: Callable[[], None] | None = None,
) -> Trajectory:
    """Decode ``n_steps`` greedy steps with every layer (stopping after an id in ``stop_ids``).

    Step i's record is the prediction of token i from the prompt and tokens < i.
    """
    if n_steps < 1:
        raise CalibrationError(f"a trajectory needs at least 1 step, got {n_steps}")
    cache = model.new_cache(len(prompt_ids) + n_steps)
    result = model.forward(list(prompt_ids), cache, return_hidden=True)
    assert result.hidden is not None
    prompt_rows = np.asarray(result.hidden[list(depths) + [model.config.n_layer], :-1], dtype=np.float32)
    logits, hidden = [result.logits[-1]], [_at(result.hidden, depths, -1)]
    for _ in range(n_steps - 1):
        if on_step is not None:
            on_step()
        token = int(np.argmax(logits[-1]))
        if token in stop_ids:
            break
        result = model.forward([token], cache, return_hidden=True)
        logits.append(result.logits[-1])
        hidden.append(_at(result.hidden, depths, -1))
    if on_step is not None:
        on_step()
    stacked = np.stack(hidden, axis=1)  # [K+1, T, D]
    return Trajectory(kind, np.stack(logits), stacked[:-1], stacked[-1], prompt_rows[:-1], prompt_rows[-1])


def _at(hidden: F32 | None, depths: Sequence[int], row: int) -> F32:
    """Hidden states ``[K+1, D]`` at the depths and at depth L, of one row of a forward."""
    assert hidden is not None
    return np.asarray(hidden[list(depths) + [hidden.shape[0] - 1], row], dtype=np.float32)


@dataclass
class Records:
    """Per candidate depth and calibration step: residual scores, margins, flips (float32)."""

    depths: tuple[int, ...]
    supnorm: F32  # [K, n]
    halfrange: F32  # [K, n]
    margins: F32  # [K, n]
    flips: npt.NDArray[np.bool_]  # [K, n]
    kinds: list[str] = field(default_factory=list)  # [n] prompt kind of each step
    prompt: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [n] prompt index

    @property
    def n(self) -> int:
        return int(self.margins.shape[1])

    @property
    def n_prompts(self) -> int:
        return int(np.unique(self.prompt).size)

    def select(self, kind: str) -> "Records":
        """The steps of the prompts of one kind (prompt indices renumbered 0..m-1 in order)."""
        mask = np.asarray([k == kind for k in self.kinds], dtype=np.bool_)
        _, prompt = np.unique(self.prompt[mask], return_inverse=True)
        return Records(
            self.depths,
            self.supnorm[:, mask],
            self.halfrange[:, mask],
            self.margins[:, mask],
            self.flips[:, mask],
            [kind] * int(mask.sum()),
            np.asarray(prompt, dtype=np.int64).reshape(-1),
        )

    def scores(self, kind: ResidualKind) -> F32:
        return self.supnorm if kind == "supnorm" else self.halfrange


def score(model: Model, trajectories: Sequence[Trajectory], depths: Sequence[int], lens: Lens | None) -> Records:
    """Exit-head scores of every step of ``trajectories`` at ``depths`` (see the module docstring)."""
    k = len(depths)
    parts: dict[str, list[F32]] = {"supnorm": [], "halfrange": [], "margins": []}
    flips: list[npt.NDArray[np.bool_]] = []
    kinds: list[str] = []
    prompt: list[int] = []
    for number, traj in enumerate(trajectories):
        full_ids = np.asarray(np.argmax(traj.full_logits, axis=-1), dtype=np.int64)  # [T]
        rows: dict[str, list[F32]] = {"supnorm": [], "halfrange": [], "margins": []}
        flip_rows = []
        for i, depth in enumerate(depths):
            d = exit_logits(model, depth, traj.hidden[i], lens)  # [T, V]
            ids, margins = top2_rows(d)
            rows["supnorm"].append(np.asarray(residual_rows("supnorm", d, traj.full_logits), dtype=np.float32))
            rows["halfrange"].append(np.asarray(residual_rows("halfrange", d, traj.full_logits), dtype=np.float32))
            rows["margins"].append(np.asarray(margins, dtype=np.float32))
            flip_rows.append(ids != full_ids)
        for name in parts:
            parts[name].append(np.stack(rows[name]))  # [K, T]
        flips.append(np.stack(flip_rows))
        kinds.extend([traj.kind] * traj.full_logits.shape[0])
        prompt.extend([number] * traj.full_logits.shape[0])
    if not flips:
        raise CalibrationError("no calibration steps: the calibration split has no prompts")
    return Records(
        tuple(depths),
        np.concatenate(parts["supnorm"], axis=1).reshape(k, -1),
        np.concatenate(parts["halfrange"], axis=1).reshape(k, -1),
        np.concatenate(parts["margins"], axis=1).reshape(k, -1),
        np.concatenate(flips, axis=1).reshape(k, -1),
        kinds,
        np.asarray(prompt, dtype=np.int64),
    )


def lens_from(trajectories: Sequence[Trajectory], depths: Sequence[int], ridge: float) -> Lens:
    """Fit the tuned lens on the hidden states of ``trajectories`` (the lens split only): every
    decode step and every prompt position."""
    hidden = np.concatenate(
        [t.hidden for t in trajectories] + [t.prompt_hidden for t in trajectories if t.prompt_hidden is not None],
        axis=1,
    )  # [K, N, D]
    final = np.concatenate(
        [t.final for t in trajectories] + [t.prompt_final for t in trajectories if t.prompt_final is not None],
        axis=0,
    )  # [N, D]
    return fit_lens(depths, hidden, final, ridge)


# --- the whole calibration ------------------------------------------------------------------------

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
) -> tuple[Calibration, Records]:
    """Greedy trajectories of the full model on ``prompts``; the lens (if ``use_lens``) is fit on
    ``lens_prompts`` (or, if None, on every other prompt of each kind, the rest calibrating);
    scores and the artifact on the calibration prompts. ``kind_rule`` records how the prompts'
    kinds were assigned ("rule": :func:`reference.prompt_kind.prompt_kind`; "declared");
    ``weights`` the weights mode ``model`` runs (recorded: the artifact serves that mode's numerics)."""
    if weights not in CALIBRATED_WEIGHTS:
        raise CalibrationError(f"weights mode {weights!r} is not one of {', '.join(CALIBRATED_WEIGHTS)}")
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
    return replace(cal, weights=weights), records


# --- the artifact -------------------------------------------------------------------------------

CALIBRATED_WEIGHTS = ("f32", "quantized", "int8")  # the engine's weights modes (engine/weights.py)


def numerics(weights: str) -> str:
    """The function a weights mode computes: ``exact`` (float32: f32, quantized) or ``int8``."""
    return "int8" if weights == "int8" else "exact"


@dataclass(frozen=True)
class DepthCalibration:
    depth: int
    supnorm_quantile: float  # prompt-level risk control threshold of the sup-norm score at alpha/K
    halfrange_quantile: float  # ... of the half-range score (float32 values)
    margin_threshold: float  # prompt-level risk control threshold of the margin at alpha/K
    agreement: float  # calibration: fraction of steps whose exit top-1 == full argmax

    def quantile(self, kind: ResidualKind) -> float:
        return self.supnorm_quantile if kind == "supnorm" else self.halfrange_quantile


def _refusing(depth: int) -> DepthCalibration:
    """A depth that admits nothing under any gate (every threshold +inf)."""
    inf = float("inf")
    return DepthCalibration(depth, inf, inf, inf, 0.0)


@dataclass(frozen=True)
class KindCalibration:
    """One prompt kind's calibration (Mondrian): its own prompts, thresholds and guarantee."""

    kind: str
    n_prompts: int
    n: int  # calibration steps (tokens) of this kind
    min_prompts: int  # prompts needed for any admission at alpha/K
    depths: tuple[DepthCalibration, ...]

    @property
    def admits(self) -> bool:
        return self.n_prompts >= self.min_prompts


@dataclass(frozen=True)
class Calibration:
    """A calibration artifact: everything the serve-time gates need, for one model file.

    ``depths`` are the thresholds in force: the pooled calibration, or one kind's after
    :meth:`for_kind` (then ``kind`` names it). ``kinds`` holds every kind's calibration.
    """

    model_sha256: str
    model_name: str
    n_layer: int
    q: Fraction
    gate: GateKind
    residual: ResidualKind
    n: int
    n_lens: int
    depths: tuple[DepthCalibration, ...]
    lens: Lens | None = None
    ridge: float = 0.0
    prompts: dict[str, int] = field(default_factory=dict)  # prompt kind -> calibration steps
    n_prompts: int = 0
    kinds: dict[str, KindCalibration] = field(default_factory=dict)
    kind: str | None = None  # the kind whose thresholds are in ``depths`` (None: pooled)
    kind_rule: str = "rule"  # how calibration prompts got their kind: "rule" or "declared"
    records: Records | None = field(
        default=None, compare=False, repr=False
    )  # the scores every threshold is computed from
    weights: str = "f32"  # the weights mode whose numerics were calibrated (see check_weights)

    @property
    def q_layer(self) -> Fraction:
        """The per-depth level 1 - alpha/K (the per-depth risk is alpha/K)."""
        return bonferroni(self.q, len(self.depths))

    @property
    def alpha(self) -> Fraction:
        return 1 - self.q

    @property
    def alpha_per_depth(self) -> Fraction:
        return self.alpha / len(self.depths)

    @property
    def claim(self) -> str:
        return PROMPT_CLAIM

    @property
    def min_prompts(self) -> int:
        return min_prompts(self.alpha, len(self.depths))

    @property
    def candidate_depths(self) -> tuple[int, ...]:
        return tuple(d.depth for d in self.depths)

    def at(self, depth: int) -> DepthCalibration:
        for d in self.depths:
            if d.depth == depth:
                return d
        raise CalibrationError(f"depth {depth} is not calibrated (depths: {list(self.candidate_depths)})")

    def for_kind(self, kind: str) -> "Calibration":
        """The artifact with ``kind``'s thresholds in force; an uncalibrated kind admits nothing."""
        if kind in self.kinds:
            kc = self.kinds[kind]
            return replace(self, depths=kc.depths, n=kc.n, n_prompts=kc.n_prompts, kind=kind)
        refusing = tuple(_refusing(d.depth) for d in self.depths)
        return replace(self, depths=refusing, n=0, n_prompts=0, kind=kind)

    @property
    def refusal(self) -> str | None:
        """Why the thresholds in force admit nothing, or None if they can admit."""
        needed = self.min_prompts
        alpha = f"alpha = {self.alpha} over K = {len(self.depths)} depths needs at least {needed}"
        if self.kind is not None and self.kind not in self.kinds:
            known = ", ".join(sorted(self.kinds)) or "none"
            return (
                f"prompt kind {self.kind!r} was not calibrated (calibrated kinds: {known}): early exit admits nothing"
            )
        if self.n_prompts < needed:
            which = "the calibration" if self.kind is None else f"prompt kind {self.kind!r}"
            return f"{which} has {self.n_prompts} calibration prompts; {alpha}: early exit admits nothing"
        return None

    def check_model(self, sha256: str, where: str = "the model") -> None:
        """CalibrationError unless this artifact was made for the model file with ``sha256``."""
        if sha256 != self.model_sha256:
            raise CalibrationError(
                f"calibration is for model {self.model_name} (sha256 {self.model_sha256[:16]}...), "
                f"not for {where} (sha256 {sha256[:16]}...)"
            )

    def check_fits(self, n_layer: int, n_embd: int, where: str = "the model") -> None:
        """CalibrationError, before the model runs, unless this artifact fits a model of
        ``n_layer`` layers and hidden size ``n_embd``: the same layer count (every candidate
        depth is then a layer of it) and a lens, if any, of width ``n_embd`` (a lens of another
        width would load and fail mid-decode, inside the first exit head)."""
        if n_layer != self.n_layer:
            raise CalibrationError(f"calibration is for a {self.n_layer}-layer model, {where} has {n_layer} layers")
        if self.lens is not None and int(self.lens.weight.shape[-1]) != n_embd:
            raise CalibrationError(
                f"calibration's lens is {int(self.lens.weight.shape[-1])} wide, but {where} has hidden size {n_embd}: "
                "it was fit for another model"
            )

    def check_weights(self, weights: str) -> None:
        """CalibrationError unless this artifact was calibrated on the numerics of ``weights``.

        The thresholds certify flips of the exit heads against the full model as computed by the
        mode they were measured on: the exact modes (``f32``, ``quantized``: the same float32
        function) or the int8 mode (its own function). An artifact without the field was written
        when calibration ran only on the float32 mode by default: it reads as ``f32``."""
        if numerics(weights) != numerics(self.weights):
            raise CalibrationError(
                f"calibration was made on the {self.weights} weights mode ({numerics(self.weights)} numerics), "
                f"this run uses {weights} ({numerics(weights)} numerics): its certificate holds for the numerics "
                f"it was measured on; run with --weights {self.weights}, or calibrate again with --weights {weights}"
            )

    # -- JSON --

    def to_json(self, lens_file: str | None, lens_sha256: str | None) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model_sha256": self.model_sha256,
            "model_name": self.model_name,
            "n_layer": self.n_layer,
            "q": str(self.q),
            "alpha": str(self.alpha),
            "alpha_per_depth": str(self.alpha_per_depth),
            "claim": self.claim,
            "unit": "prompt",
            "kind_rule": self.kind_rule,
            "weights": self.weights,
            "gate": self.gate,
            "residual": self.residual,
            "n": self.n,
            "n_prompts": self.n_prompts,
            "min_prompts": self.min_prompts,
            "n_lens": self.n_lens,
            "layers": [d.depth for d in self.depths],
            "depths": _depths_json(self.depths),
            "kinds": {
                kc.kind: {
                    "n_prompts": kc.n_prompts,
                    "n": kc.n,
                    "min_prompts": kc.min_prompts,
                    "admits": kc.admits,
                    "depths": _depths_json(kc.depths),
                }
                for kc in self.kinds.values()
            },
            "lens": None if lens_file is None else {"file": lens_file, "sha256": lens_sha256, "ridge": self.ridge},
            "prompts": self.prompts,
            "records": None
            if self.records is None
            else records_json(
                {"supnorm": self.records.supnorm, "halfrange": self.records.halfrange, "margins": self.records.margins},
                self.records.flips,
                self.records.prompt,
                self.records.kinds,
            ),
        }

    def save(self, path: str | Path) -> None:
        """Write the artifact as one atomic unit (see the module docstring): the lens under a
        content-derived name first, then the JSON that names it, then remove stale lens files."""
        path = Path(path)
        check_output_path(path)
        lens_file = lens_sha = None
        if self.lens is not None:
            data = _npz_bytes(self.lens)
            lens_sha = hashlib.sha256(data).hexdigest()
            lens_path = path.parent / f"{path.stem}.lens.{lens_sha[:16]}.npz"
            _atomic_write(lens_path, data)
            lens_file = lens_path.name
        body = self.to_json(lens_file, lens_sha)
        body[SEAL_FIELD] = seal(body, self.lens, calibration_key())  # over the contents of both files
        text = json.dumps(body, indent=2) + "\n"
        _atomic_write(path, text.encode())
        for stale in path.parent.glob(f"{path.stem}.lens.*.npz"):
            if stale.name != lens_file:
                stale.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path, model_sha256: str | None = None) -> "Calibration":
        """Read an artifact; with ``model_sha256``, CalibrationError if it is for another model."""
        path = Path(path)
        raw = read_json_file(path, "calibration", max_bytes=ARTIFACT_BYTES, error=CalibrationError, allow_nan=True)
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else None
            hint = {
                FORMAT[:-1] + "1": " (an older, token-level calibration: run verispec calibrate again)",
                FORMAT[:-1]
                + "2": " (an older calibration without its scores, whose thresholds cannot be rechecked: run verispec calibrate again)",
            }.get(str(found), "")
            raise CalibrationError(f"{str(path)!r} is not a {FORMAT} artifact{hint}")
        try:
            cal = cls._from_json(raw, path)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CalibrationError(f"calibration {str(path)!r} is malformed: {str(exc)[:200]!r}") from None
        where = f"calibration {str(path)!r}"
        check_ranges(cal, raw, where)
        check_seal(raw, cal.lens, where)
        check_recomputed(cal, where)
        if model_sha256 is not None:
            cal.check_model(model_sha256)
        return cal

    @classmethod
    def _from_json(cls, raw: dict[str, Any], path: Path) -> "Calibration":
        gate, residual = raw["gate"], raw["residual"]
        if gate not in GATE_KINDS or residual not in RESIDUAL_KINDS:
            raise ValueError(f"gate {gate!r} / residual {residual!r}")
        depths = _depths_from_json(raw["depths"], path)
        layers = tuple(d.depth for d in depths)
        kinds = {}
        for name, entry in dict(raw["kinds"]).items():
            kind_depths = _depths_from_json(entry["depths"], path)
            if tuple(d.depth for d in kind_depths) != layers:
                raise ValueError(f"kind {name!r} has depths {[d.depth for d in kind_depths]}, not {list(layers)}")
            kinds[str(name)] = KindCalibration(
                str(name),
                _count(entry["n_prompts"]),
                _count(entry["n"]),
                _count(entry["min_prompts"]),
                kind_depths,
            )
        lens = None
        ridge = 0.0
        if raw.get("lens"):
            lens_path = path.parent / Path(str(raw["lens"]["file"])).name
            data = read_regular(lens_path, "the lens", max_bytes=LENS_BYTES, error=CalibrationError)
            if hashlib.sha256(data).hexdigest() != raw["lens"]["sha256"]:
                raise CalibrationError(f"lens {str(lens_path)!r} does not match the sha256 in {str(path)!r}")
            lens = _lens_from_npz(lens_path, data)
            ridge = float(raw["lens"]["ridge"])
            if lens.depths != layers:
                raise ValueError(f"lens depths {lens.depths}")
        kind = raw.get("kind_rule", "rule")
        stored = records_from_json(raw.get("records"), len(layers), f"calibration {str(path)!r}")
        records = Records(
            layers,
            stored.scores["supnorm"],
            stored.scores["halfrange"],
            stored.scores["margins"],
            stored.flips,
            stored.kinds,
            stored.prompt,
        )
        weights = raw.get("weights", "f32")
        if weights not in CALIBRATED_WEIGHTS:
            raise ValueError(f"weights {weights!r}")
        return cls(
            model_sha256=str(raw["model_sha256"]),
            model_name=str(raw["model_name"]),
            n_layer=_count(raw["n_layer"]),
            q=exact_level(str(raw["q"])),
            gate=gate,
            residual=residual,
            n=_count(raw["n"]),
            n_lens=_count(raw["n_lens"]),
            depths=depths,
            lens=lens,
            ridge=ridge,
            prompts={str(k): _count(v) for k, v in raw.get("prompts", {}).items()},
            n_prompts=_count(raw["n_prompts"]),
            kinds=kinds,
            kind_rule=str(kind),
            records=records,
            weights=str(weights),
        )


def build(
    records: Records,
    *,
    q: Fraction | str | float,
    model_sha256: str,
    model_name: str,
    n_layer: int,
    gate: GateKind = "margin",
    residual: ResidualKind = "halfrange",
    lens: Lens | None = None,
    n_lens: int = 0,
    ridge: float = 0.0,
    kind_rule: str = "rule",
) -> Calibration:
    """The artifact from calibration records: prompt-level thresholds at alpha/K per depth, pooled
    over every prompt and per prompt kind (see the module docstring)."""
    level = exact_level(q)
    kinds = {}
    for kind in sorted(set(records.kinds)):
        part = records.select(kind)
        kinds[kind] = KindCalibration(
            kind,
            part.n_prompts,
            part.n,
            min_prompts(1 - level, len(records.depths)),
            _depth_thresholds(part, 1 - level),
        )
    prompts: dict[str, int] = {}
    for kind in records.kinds:
        prompts[kind] = prompts.get(kind, 0) + 1
    return Calibration(
        model_sha256,
        model_name,
        n_layer,
        level,
        gate,
        residual,
        records.n,
        n_lens,
        _depth_thresholds(records, 1 - level),
        lens,
        ridge,
        prompts,
        records.n_prompts,
        kinds,
        None,
        kind_rule,
        records,
    )


def _depth_thresholds(records: Records, alpha: Fraction) -> tuple[DepthCalibration, ...]:
    """Per depth: the residual thresholds (loss: score above Q) and the margin threshold (loss:
    admitted and flipped), each by prompt-level risk control at alpha/K."""
    k = len(records.depths)
    every = np.ones(records.n, dtype=np.bool_)
    out = []
    for i, depth in enumerate(records.depths):
        out.append(
            DepthCalibration(
                depth,
                prompt_risk_threshold(records.supnorm[i], every, records.prompt, alpha, k),
                prompt_risk_threshold(records.halfrange[i], every, records.prompt, alpha, k),
                prompt_risk_threshold(records.margins[i], records.flips[i], records.prompt, alpha, k),
                float(np.mean(~records.flips[i])),
            )
        )
    return tuple(out)


def check_output_path(path: str | Path) -> None:
    """CalibrationError unless ``path`` can receive an artifact: its folder exists and is writable
    and ``path`` is not a folder. Checked before any work (and again when saving)."""
    path = Path(path)
    parent = path.parent
    if path.suffix != ".json":
        raise CalibrationError(f"--out {str(path)!r} must end in .json (the lens goes beside it)")
    if not parent.is_dir():
        raise CalibrationError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if path.is_dir():
        raise CalibrationError(f"cannot write {str(path)!r}: it is a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CalibrationError(f"cannot write {str(path)!r}: folder {str(parent)!r} is not writable")
    try:
        output_file(path)  # the one writer's rule: absent or a regular file, never a FIFO or device
    except OutputError as exc:
        raise CalibrationError(str(exc)) from None


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _depths_json(depths: Sequence[DepthCalibration]) -> list[dict[str, Any]]:
    return [
        {
            "depth": d.depth,
            "supnorm_quantile": _num(d.supnorm_quantile),
            "halfrange_quantile": _num(d.halfrange_quantile),
            "margin_threshold": _num(d.margin_threshold),
            "agreement": d.agreement,
        }
        for d in depths
    ]


def _depths_from_json(items: Any, path: Path) -> tuple[DepthCalibration, ...]:
    out = []
    for d in items:
        quantiles = (
            _float(d["supnorm_quantile"], "supnorm_quantile", path),
            _float(d["halfrange_quantile"], "halfrange_quantile", path),
        )
        if any(x < 0 for x in quantiles):
            raise CalibrationError(
                f"calibration {str(path)!r} has a negative residual quantile: residual scores are >= 0"
            )
        agreement = _float(d["agreement"], "agreement", path)
        if not 0 <= agreement <= 1:
            raise ValueError(f"agreement {agreement!r}")
        out.append(
            DepthCalibration(
                _count(d["depth"]), *quantiles, _float(d["margin_threshold"], "margin_threshold", path), agreement
            )
        )
    if not out:
        raise ValueError("no depths")
    return tuple(out)


def _num(x: float) -> float | str:
    """JSON has no infinities: +-inf are written as the strings "inf" / "-inf"."""
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def _float(x: object, name: str = "value", path: Path | None = None) -> float:
    """A threshold read from JSON: a number or "inf" / "-inf"; NaN (which Python's json accepts)
    is a CalibrationError: a NaN threshold would silently make a gate never (or always) admit."""
    if isinstance(x, str) and x in ("inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{name} {x!r} is not a number")
    if math.isnan(x):
        where = "" if path is None else f"calibration {str(path)!r}: "
        raise CalibrationError(f"{where}{name} is NaN (a corrupt or hand-edited artifact): calibrate again")
    return float(x)


def _count(x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{x!r} is not a non-negative integer")
    return x


def _atomic_write(path: Path, data: bytes) -> None:
    """``data`` becomes ``path`` whole or not at all (the project's one atomic writer)."""
    try:
        with replace_file(path) as fh:
            fh.write(data)
    except OutputError as exc:
        raise CalibrationError(str(exc)) from None


def _npz_bytes(lens: Lens) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, depths=np.asarray(lens.depths, dtype=np.int64), weight=lens.weight, bias=lens.bias)
    return buffer.getvalue()


def _lens_from_npz(path: Path, blob: bytes) -> Lens:
    """The lens in ``blob`` (the bytes of ``path``): depths [K], weight [K, D, D], bias [K, D],
    all finite; another shape would load and crash mid-run."""
    import io
    import zipfile

    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            depths = np.asarray(data["depths"])
            weight = np.asarray(data["weight"], dtype=np.float32)
            bias = np.asarray(data["bias"], dtype=np.float32)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationError(f"cannot read the lens {str(path)!r}: {str(exc)[:200]}") from None
    k = depths.shape[0] if depths.ndim == 1 else -1
    if (
        k < 1
        or weight.ndim != 3
        or weight.shape[0] != k
        or weight.shape[1] != weight.shape[2]
        or bias.shape != weight.shape[:2]
    ):
        raise CalibrationError(
            f"the lens {str(path)!r} has depths {list(depths.shape)}, weight {list(weight.shape)}, bias {list(bias.shape)}: "
            "expected [K], [K, D, D], [K, D]"
        )
    if not (np.all(np.isfinite(weight)) and np.all(np.isfinite(bias))):
        raise CalibrationError(f"the lens {str(path)!r} holds non-finite weights")
    return Lens(tuple(int(d) for d in depths), weight, bias)


def check_ranges(cal: Calibration, raw: Mapping[str, Any], where: str) -> None:
    """CalibrationError unless every number is one calibration can produce (see
    :func:`reference.conformal.prompt_risk_threshold`): q in (0, 1); the derived fields (alpha,
    alpha/K, min_prompts, layers, admits) equal to what q and the depths give; per-kind counts
    adding up to the pooled ones; depths strictly increasing in 1..n_layer-1; and per depth
    thresholds +inf exactly when there are too few prompts to admit, otherwise residual
    quantiles finite and >= 0 (a score value: scores are >= 0, and every token is an event, so
    the budget can never cover them all) and the margin threshold >= 0 or -inf (a margin value,
    or -inf when every flip fits in the budget); no lens map with an all-zero weight. Values in
    these ranges are then checked by recomputing them from the stored scores
    (:func:`check_recomputed`)."""
    if not 0 < cal.q < 1:
        raise CalibrationError(f"{where}: q = {cal.q} is outside (0, 1)")
    rebuilt = cal.to_json(None, None)
    for name in ("alpha", "alpha_per_depth", "min_prompts", "layers", "claim", "n_layer"):
        if raw.get(name) != rebuilt[name]:
            raise CalibrationError(
                f"{where}: {name} is {str(raw.get(name))[:60]!r}, but q and the depths give {rebuilt[name]!r}"
            )
    layers = [d.depth for d in cal.depths]
    if layers != sorted(set(layers)) or not all(1 <= d < cal.n_layer for d in layers):
        raise CalibrationError(f"{where}: depths {layers[:10]} are not increasing within 1..{cal.n_layer - 1}")
    if cal.n < cal.n_prompts or cal.n_lens < 0:
        raise CalibrationError(f"{where}: n = {cal.n} steps for {cal.n_prompts} prompts")
    if cal.kinds:
        if (
            sum(kc.n_prompts for kc in cal.kinds.values()) != cal.n_prompts
            or sum(kc.n for kc in cal.kinds.values()) != cal.n
        ):
            raise CalibrationError(
                f"{where}: the prompt kinds' n_prompts and n do not add up to the pooled {cal.n_prompts} and {cal.n}"
            )
    needed = cal.min_prompts
    for kc in cal.kinds.values():
        if kc.min_prompts != needed:
            raise CalibrationError(
                f"{where}: kind {kc.kind!r} min_prompts {kc.min_prompts}, q and the depths give {needed}"
            )
    if cal.lens is not None:
        for depth, weight in zip(cal.lens.depths, cal.lens.weight):
            if not bool(np.any(weight)):
                raise CalibrationError(
                    f"{where}: the lens map at depth {depth} ignores its input (weight all 0), which a ridge fit gives only "
                    "for hidden states exactly uncorrelated with the last layer's: a zeroed lens, not a calibrated one"
                )
    groups = [("pooled", cal.n_prompts, cal.depths)] + [(kc.kind, kc.n_prompts, kc.depths) for kc in cal.kinds.values()]
    for kind, n_prompts, depths in groups:
        for d in depths:
            _check_depth(d, n_prompts >= needed, f"{where}: {kind} depth {d.depth}")


def check_recomputed(cal: Calibration, where: str) -> None:
    """CalibrationError unless the artifact is exactly what :func:`build` makes from the records
    it carries at its q (:mod:`reference.calibration_records`): every threshold, agreement and
    count, pooled and per kind, recomputed from the stored scores and compared for equality (the
    thresholds are score values, so they survive the JSON round trip exactly)."""
    if cal.records is None:
        raise CalibrationError(f"{where} carries no calibration records: calibrate again")
    try:
        rebuilt = build(
            cal.records,
            q=cal.q,
            model_sha256=cal.model_sha256,
            model_name=cal.model_name,
            n_layer=cal.n_layer,
            gate=cal.gate,
            residual=cal.residual,
            lens=cal.lens,
            n_lens=cal.n_lens,
            ridge=cal.ridge,
            kind_rule=cal.kind_rule,
        )
    except CalibrationError as exc:  # e.g. prompt indices that skip a prompt
        raise CalibrationError(f"{where}: its calibration records are not a calibration ({str(exc)[:160]})") from None
    rebuilt = replace(rebuilt, weights=cal.weights)  # which mode made the scores is a claim the seal binds, not a score
    want, have = rebuilt.to_json(None, None), cal.to_json(None, None)
    want.pop("records")
    have.pop("records")
    found = _first_difference(want, have, "")
    if found is not None:
        name, recomputed, stored = found
        raise CalibrationError(
            f"{where}: {name} = {shown(stored, 60)} does not follow from the calibration scores it carries "
            f"(they give {shown(recomputed, 60)})"
        )


def _first_difference(a: Any, b: Any, at: str) -> tuple[str, Any, Any] | None:
    """The first place (``depths[0].margin_threshold``) where two JSON values differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for key in a:
            found = _first_difference(a[key], b[key], f"{at}.{key}" if at else str(key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{at}[{i}]")
            if found is not None:
                return found
        return None
    return None if a == b and type(a) is type(b) else (at, a, b)


def _check_depth(d: DepthCalibration, can_admit: bool, where: str) -> None:
    thresholds = (d.supnorm_quantile, d.halfrange_quantile, d.margin_threshold)
    if not can_admit:
        if any(t != math.inf for t in thresholds):
            raise CalibrationError(f"{where}: too few prompts to admit, so every threshold must be +inf")
        return
    for name, value in (("supnorm_quantile", d.supnorm_quantile), ("halfrange_quantile", d.halfrange_quantile)):
        if not (math.isfinite(value) and value >= 0):
            raise CalibrationError(f"{where}: {name} {value} is not a residual score (finite, >= 0)")
    if not (d.margin_threshold == -math.inf or (math.isfinite(d.margin_threshold) and d.margin_threshold >= 0)):
        raise CalibrationError(f"{where}: margin_threshold {d.margin_threshold} is not a margin (finite, >= 0) or -inf")
