"""The artifact's numbers in JSON: thresholds with +-inf written as strings, counts, a NaN refused."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verispec.reference.calibration.thresholds import DepthCalibration
from verispec.reference.errors import CalibrationError


def depths_json(depths: Sequence[DepthCalibration]) -> list[dict[str, Any]]:
    return [
        {
            "depth": d.depth,
            "supnorm_quantile": json_number(d.supnorm_quantile),
            "halfrange_quantile": json_number(d.halfrange_quantile),
            "margin_threshold": json_number(d.margin_threshold),
            "agreement": d.agreement,
        }
        for d in depths
    ]


def depths_from_json(items: Any, path: Path) -> tuple[DepthCalibration, ...]:
    out = []
    for d in items:
        quantiles = (
            number_from_json(d["supnorm_quantile"], "supnorm_quantile", path),
            number_from_json(d["halfrange_quantile"], "halfrange_quantile", path),
        )
        if any(x < 0 for x in quantiles):
            raise CalibrationError(
                f"calibration {str(path)!r} has a negative residual quantile: residual scores are >= 0"
            )
        agreement = number_from_json(d["agreement"], "agreement", path)
        if not 0 <= agreement <= 1:
            raise ValueError(f"agreement {agreement!r}")
        out.append(
            DepthCalibration(
                count_from_json(d["depth"]),
                *quantiles,
                number_from_json(d["margin_threshold"], "margin_threshold", path),
                agreement,
            )
        )
    if not out:
        raise ValueError("no depths")
    return tuple(out)


def json_number(x: float) -> float | str:
    """JSON has no infinities: +-inf are written as the strings "inf" / "-inf"."""
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def number_from_json(x: object, name: str = "value", path: Path | None = None) -> float:
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


def count_from_json(x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"{x!r} is not a non-negative integer")
    return x
