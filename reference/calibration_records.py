"""The calibration scores an artifact carries, so that its thresholds can be RECOMPUTED on load.

Every threshold of a calibration is a function of its records (per depth and step: the two
residual scores, the margin and the flip; per step: its prompt and the prompt's kind) and of q
(:func:`reference.calibration.build`). An artifact that carries only thresholds can be forged
by anyone who can recompute an unkeyed seal: a quantile of 0 or a margin threshold of -inf is a
value calibration CAN produce (from scores that are 0, or from few enough flips), so no range
check can refuse it. An artifact that carries its records is checked by recomputing: the
loader runs the same exact computation (integers and Fractions, :mod:`reference.conformal`) on
the stored scores and refuses the artifact unless every threshold, count and agreement comes
out equal. A forged threshold then needs forged scores, which is what an unsigned calibration
can still be fooled by (scores that were never measured, or a lens swapped together with a
re-sealed digest: the scores cannot be re-measured without running the model); a key
(``VERISPEC_CALIBRATION_KEY``, :mod:`reference.calibration_seal`) closes both.

The arrays are stored as base64 of their little-endian bytes, each with its dtype and shape
(one line each: a 5,000-step, 5-depth calibration adds about 400 kB). Decoding checks every
dtype, shape and length against the declared step count and depths, and every value against
what calibration can produce: scores and margins finite and >= 0, flips 0 or 1, kind indices
naming a listed kind (CalibrationError, one line, naming the field).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CalibrationError
from verispec.reference.json_input import shown

SCORE_FIELDS = ("supnorm", "halfrange", "margins")
_F32, _I32, _U8 = np.dtype("<f4"), np.dtype("<i4"), np.dtype("|u1")


@dataclass(frozen=True)
class StoredRecords:
    """The decoded records: scores [K, n] float32, flips [K, n] bool, prompt [n] int64, kinds [n]."""

    scores: dict[str, npt.NDArray[np.float32]]
    flips: npt.NDArray[np.bool_]
    prompt: npt.NDArray[np.int64]
    kinds: list[str]


def _encode(array: npt.NDArray[Any], dtype: np.dtype[Any]) -> dict[str, Any]:
    data = np.ascontiguousarray(array, dtype=dtype)
    return {"dtype": dtype.str, "shape": list(data.shape), "base64": base64.b64encode(data.tobytes()).decode("ascii")}


def records_json(
    scores: Mapping[str, npt.NDArray[np.float32]],
    flips: npt.NDArray[np.bool_],
    prompt: npt.NDArray[np.int64],
    kinds: Sequence[str],
) -> dict[str, Any]:
    """The records as a JSON object (see the module docstring)."""
    names = sorted(set(kinds))
    index = {name: i for i, name in enumerate(names)}
    out: dict[str, Any] = {"n": int(prompt.shape[0]), "kind_names": names}
    out["kind"] = _encode(np.asarray([index[k] for k in kinds], dtype=np.int64), _I32)
    out["prompt"] = _encode(prompt, _I32)
    for name in SCORE_FIELDS:
        out[name] = _encode(scores[name], _F32)
    out["flips"] = _encode(flips, _U8)
    return out


def _decode(
    raw: Mapping[str, Any], name: str, dtype: np.dtype[Any], shape: tuple[int, ...], where: str
) -> npt.NDArray[Any]:
    entry = raw.get(name)
    if not isinstance(entry, dict) or entry.get("dtype") != dtype.str or entry.get("shape") != list(shape):
        raise CalibrationError(
            f"{where}: records field {name!r} must be {dtype.str} of shape {list(shape)}, got {shown(entry)}"
        )
    text = entry.get("base64")
    try:
        data = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        data = None
    expected = int(np.prod(shape)) * dtype.itemsize
    if data is None or len(data) != expected:
        raise CalibrationError(f"{where}: records field {name!r} is not base64 of {expected} bytes")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def records_from_json(raw: Any, n_depths: int, where: str) -> StoredRecords:
    """Decode and check the records of an artifact with ``n_depths`` candidate depths."""
    if not isinstance(raw, dict):
        raise CalibrationError(
            f"{where} carries no calibration records (written by an older verispec): calibrate again"
        )
    n = raw.get("n")
    names = raw.get("kind_names")
    if type(n) is not int or n < 1:
        raise CalibrationError(f"{where}: records 'n' must be a positive step count, got {shown(n)}")
    if (
        not isinstance(names, list)
        or not all(isinstance(k, str) for k in names)
        or len(set(names)) != len(names)
        or not names
    ):
        raise CalibrationError(f"{where}: records 'kind_names' must be distinct strings, got {shown(names)}")
    kind = _decode(raw, "kind", _I32, (n,), where)
    if int(kind.min()) < 0 or int(kind.max()) >= len(names):
        raise CalibrationError(f"{where}: records 'kind' names a kind outside its {len(names)} kind_names")
    prompt = _decode(raw, "prompt", _I32, (n,), where).astype(np.int64)
    scores = {name: _decode(raw, name, _F32, (n_depths, n), where) for name in SCORE_FIELDS}
    for name, values in scores.items():
        if not (bool(np.all(np.isfinite(values))) and bool(np.all(values >= 0))):
            raise CalibrationError(f"{where}: records {name!r} hold a value that is not a score (finite, >= 0)")
    flips = _decode(raw, "flips", _U8, (n_depths, n), where)
    if int(flips.max()) > 1:
        raise CalibrationError(f"{where}: records 'flips' hold a value other than 0 and 1")
    kinds = [names[i] for i in kind.tolist()]
    return StoredRecords({k: np.array(v) for k, v in scores.items()}, flips.astype(np.bool_), prompt, kinds)
