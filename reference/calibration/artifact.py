"""The artifact (:class:`Calibration`): what it holds, how records build it, its JSON, and every check
made when it is loaded (ranges, seal, thresholds recomputed from the scores it carries)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from verispec.reference.calibration.files import atomic_write, check_output_path, lens_from_npz, npz_bytes
from verispec.reference.calibration.json_fields import count_from_json, depths_from_json, depths_json
from verispec.reference.calibration.thresholds import (
    DepthCalibration,
    KindCalibration,
    depth_thresholds,
    refusing_depth,
)
from verispec.reference.calibration.trajectories import Records
from verispec.reference.calibration_records import records_from_json, records_json
from verispec.reference.calibration_seal import SEAL_FIELD, calibration_key, check_seal, seal
from verispec.reference.certificate import RESIDUAL_KINDS, ResidualKind
from verispec.reference.conformal import PROMPT_CLAIM, bonferroni, exact_level, min_prompts
from verispec.reference.errors import CalibrationError
from verispec.reference.exit_head import GATE_KINDS, GateKind, Lens
from verispec.reference.json_input import read_json_file, read_regular, shown

FORMAT = "verispec-early-exit-calibration/3"
ARTIFACT_BYTES = 64 * 1024 * 1024  # the JSON: thresholds per depth and kind, far below this
LENS_BYTES = 4 * 1024 * 1024 * 1024  # the lens: K x D x D float32 (K = 5, D = 4096: 335 MB)
POOLED = "*"  # the pseudo-kind of the pooled calibration (every prompt of the mix)

CALIBRATED_WEIGHTS = ("f32", "quantized", "int8")  # the engine's weights modes (engine/weights.py)
# The int8 mode's head kernels (engine/weights.py HEAD_KERNELS): two functions, two numerics.
CALIBRATED_HEAD_KERNELS = ("mlas", "tile")
HEAD_KERNEL_ENV = "VERISPEC_INT8_HEAD_KERNEL"
# The int8 mode's layer kernels (engine/weights.py LAYER_KERNELS): likewise two int8 laws.
CALIBRATED_LAYER_KERNELS = ("mlas", "tile")
LAYER_KERNEL_ENV = "VERISPEC_INT8_LAYER_KERNEL"


def numerics(weights: str, head_kernel: str | None = None, layer_kernel: str | None = None) -> str:
    """The function a weights mode computes: ``exact`` (float32: f32, quantized) or, for the int8
    mode, ``int8[/HEAD][/LAYERS-layers]``: ``int8`` on the ``mlas`` head and ``mlas`` layers (also
    when a kernel is None), ``int8/tile`` on the tile head, ``int8/tile-layers`` on the tile layer
    kernel, ``int8/tile/tile-layers`` on both (each kernel is its own int8 law)."""
    if weights != "int8":
        return "exact"
    head = "" if head_kernel in (None, "mlas") else f"/{head_kernel}"
    layers = "" if layer_kernel in (None, "mlas") else f"/{layer_kernel}-layers"
    return f"int8{head}{layers}"


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
    head_kernel: str | None = None  # int8: the head kernel whose numerics were calibrated; None otherwise
    layer_kernel: str | None = None  # int8: the layer kernel whose numerics were calibrated; None otherwise

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
        refusing = tuple(refusing_depth(d.depth) for d in self.depths)
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

    def check_weights(self, weights: str, head_kernel: str | None = None, layer_kernel: str | None = None) -> None:
        """CalibrationError unless this artifact was calibrated on the numerics of ``weights`` with
        the int8 head kernel ``head_kernel`` and layer kernel ``layer_kernel`` (None: the artifact's
        own, as a run that loads with it).

        The thresholds certify flips of the exit heads against the full model as computed by the
        mode they were measured on: the exact modes (``f32``, ``quantized``: the same float32
        function) or the int8 mode on one head kernel and one layer kernel (``mlas`` or ``tile``
        each: four functions). An artifact without the weights field was written when calibration
        ran only on the float32 mode by default: it reads as ``f32``; an int8 one without a head
        kernel or a layer kernel, as ``mlas`` for it."""
        run_head = head_kernel if head_kernel is not None else self.head_kernel
        run_layers = layer_kernel if layer_kernel is not None else self.layer_kernel
        mine = numerics(self.weights, self.head_kernel, self.layer_kernel)
        theirs = numerics(weights, run_head, run_layers)
        if mine == theirs:
            return
        if numerics(weights) == numerics(self.weights):  # both int8: a kernel differs
            made: list[str] = []
            runs: list[str] = []
            fixes: list[str] = []
            for calibrated, run, part, verb, env in (
                (self.head_kernel, run_head, "head", "is", HEAD_KERNEL_ENV),
                (self.layer_kernel, run_layers, "layers", "are", LAYER_KERNEL_ENV),
            ):
                if (calibrated or "mlas") != (run or "mlas"):
                    made.append(f"{calibrated or 'mlas'} {part}")
                    runs.append(f"{part} {verb} {run or 'mlas'}")
                    fixes.append(f"{env}={calibrated or 'mlas'}")
            raise CalibrationError(
                f"calibration was made on the int8 mode's {' and '.join(made)} ({mine} numerics), this run's "
                f"{' and '.join(runs)} ({theirs} numerics): its certificate holds for the numerics it was "
                f"measured on; run with {' '.join(fixes)}, or calibrate again"
            )
        raise CalibrationError(
            f"calibration was made on the {self.weights} weights mode ({mine} numerics), "
            f"this run uses {weights} ({theirs} numerics): its certificate holds for the numerics "
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
            **({} if self.head_kernel is None else {"head_kernel": self.head_kernel}),
            **({} if self.layer_kernel is None else {"layer_kernel": self.layer_kernel}),
            "gate": self.gate,
            "residual": self.residual,
            "n": self.n,
            "n_prompts": self.n_prompts,
            "min_prompts": self.min_prompts,
            "n_lens": self.n_lens,
            "layers": [d.depth for d in self.depths],
            "depths": depths_json(self.depths),
            "kinds": {
                kc.kind: {
                    "n_prompts": kc.n_prompts,
                    "n": kc.n,
                    "min_prompts": kc.min_prompts,
                    "admits": kc.admits,
                    "depths": depths_json(kc.depths),
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
        """Write the artifact as one atomic unit (see the package docstring, :mod:`reference.calibration`): the lens under a
        content-derived name first, then the JSON that names it, then remove stale lens files."""
        path = Path(path)
        check_output_path(path)
        lens_file = lens_sha = None
        if self.lens is not None:
            data = npz_bytes(self.lens)
            lens_sha = hashlib.sha256(data).hexdigest()
            lens_path = path.parent / f"{path.stem}.lens.{lens_sha[:16]}.npz"
            atomic_write(lens_path, data)
            lens_file = lens_path.name
        body = self.to_json(lens_file, lens_sha)
        body[SEAL_FIELD] = seal(body, self.lens, calibration_key())  # over the contents of both files
        text = json.dumps(body, indent=2) + "\n"
        atomic_write(path, text.encode())
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
        depths = depths_from_json(raw["depths"], path)
        layers = tuple(d.depth for d in depths)
        kinds = {}
        for name, entry in dict(raw["kinds"]).items():
            kind_depths = depths_from_json(entry["depths"], path)
            if tuple(d.depth for d in kind_depths) != layers:
                raise ValueError(f"kind {name!r} has depths {[d.depth for d in kind_depths]}, not {list(layers)}")
            kinds[str(name)] = KindCalibration(
                str(name),
                count_from_json(entry["n_prompts"]),
                count_from_json(entry["n"]),
                count_from_json(entry["min_prompts"]),
                kind_depths,
            )
        lens = None
        ridge = 0.0
        if raw.get("lens"):
            lens_path = path.parent / Path(str(raw["lens"]["file"])).name
            data = read_regular(lens_path, "the lens", max_bytes=LENS_BYTES, error=CalibrationError)
            if hashlib.sha256(data).hexdigest() != raw["lens"]["sha256"]:
                raise CalibrationError(f"lens {str(lens_path)!r} does not match the sha256 in {str(path)!r}")
            lens = lens_from_npz(lens_path, data)
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
        head_kernel = raw.get("head_kernel", "mlas" if weights == "int8" else None)
        if not (head_kernel in CALIBRATED_HEAD_KERNELS if weights == "int8" else head_kernel is None):
            raise ValueError(f"head_kernel {head_kernel!r} for weights {weights!r}")
        layer_kernel = raw.get("layer_kernel", "mlas" if weights == "int8" else None)
        if not (layer_kernel in CALIBRATED_LAYER_KERNELS if weights == "int8" else layer_kernel is None):
            raise ValueError(f"layer_kernel {layer_kernel!r} for weights {weights!r}")
        return cls(
            model_sha256=str(raw["model_sha256"]),
            model_name=str(raw["model_name"]),
            n_layer=count_from_json(raw["n_layer"]),
            q=exact_level(str(raw["q"])),
            gate=gate,
            residual=residual,
            n=count_from_json(raw["n"]),
            n_lens=count_from_json(raw["n_lens"]),
            depths=depths,
            lens=lens,
            ridge=ridge,
            prompts={str(k): count_from_json(v) for k, v in raw.get("prompts", {}).items()},
            n_prompts=count_from_json(raw["n_prompts"]),
            kinds=kinds,
            kind_rule=str(kind),
            records=records,
            weights=str(weights),
            head_kernel=head_kernel,
            layer_kernel=layer_kernel,
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
    over every prompt and per prompt kind (see the package docstring, :mod:`reference.calibration`)."""
    level = exact_level(q)
    kinds = {}
    for kind in sorted(set(records.kinds)):
        part = records.select(kind)
        kinds[kind] = KindCalibration(
            kind,
            part.n_prompts,
            part.n,
            min_prompts(1 - level, len(records.depths)),
            depth_thresholds(part, 1 - level),
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
        depth_thresholds(records, 1 - level),
        lens,
        ridge,
        prompts,
        records.n_prompts,
        kinds,
        None,
        kind_rule,
        records,
    )


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
    # which mode (and int8 head and layer kernels) made the scores is a claim the seal binds, not a score
    rebuilt = replace(rebuilt, weights=cal.weights, head_kernel=cal.head_kernel, layer_kernel=cal.layer_kernel)
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
