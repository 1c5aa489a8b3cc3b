"""The wire's values: numpy arrays and non-finite floats as JSON, one compact line per message."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """numpy arrays/scalars -> JSON-ready lists and numbers; non-finite floats -> strings."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and not bool(np.all(np.isfinite(value))):
            return [jsonable(v) for v in value]
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return f
    return value


def encode_line(obj: Mapping[str, Any]) -> bytes:
    """One request or response line (compact JSON, strict: no bare NaN)."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
