"""The thresholds of one depth and of one prompt kind, and how records give them: prompt-level
risk control at alpha/K per depth (:func:`reference.conformal.prompt_risk_threshold`)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.reference.calibration.trajectories import Records
from verispec.reference.certificate import ResidualKind
from verispec.reference.conformal import prompt_risk_threshold


@dataclass(frozen=True)
class DepthCalibration:
    depth: int
    supnorm_quantile: float  # prompt-level risk control threshold of the sup-norm score at alpha/K
    halfrange_quantile: float  # ... of the half-range score (float32 values)
    margin_threshold: float  # prompt-level risk control threshold of the margin at alpha/K
    agreement: float  # calibration: fraction of steps whose exit top-1 == full argmax

    def quantile(self, kind: ResidualKind) -> float:
        return self.supnorm_quantile if kind == "supnorm" else self.halfrange_quantile


def refusing_depth(depth: int) -> DepthCalibration:
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


def depth_thresholds(records: Records, alpha: Fraction) -> tuple[DepthCalibration, ...]:
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
