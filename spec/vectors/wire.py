"""Wire encoding: the JSON form of sampling parameters, probability rows, float32 bits, verdicts,
a rows request, and of one case as one line. Shared by the vectors and by the external-verifier protocol
(:mod:`spec.external`), so both carry values the same way."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.sampling import SamplingParams
from verispec.spec.pipeline import RowsRequest

Case = dict[str, Any]
Json = dict[str, Any]


def encode_float(value: float) -> float | str:
    """A float for JSON: itself when finite, else the string "NaN", "Infinity" or "-Infinity"."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def f32_bits(values: npt.NDArray[np.float32]) -> list[str]:
    """float32 values as 8-hex-digit strings of their IEEE-754 bits ("3f800000" is 1.0)."""
    return [format(int(b), "08x") for b in np.asarray(values, dtype=np.float32).view(np.uint32)]


def params_to_json(params: SamplingParams) -> Json:
    """SamplingParams as a JSON object with every field present (logit_bias as [id, bias] pairs,
    a ban as the string "-inf")."""
    bias = sorted((params.logit_bias or {}).items())
    return {
        "temperature": float(params.temperature),
        "top_k": int(params.top_k),
        "top_p": float(params.top_p),
        "min_p": float(params.min_p),
        "repeat_penalty": float(params.repeat_penalty),
        "repeat_last_n": int(params.repeat_last_n),
        "logit_bias": [[int(t), "-inf" if b == -math.inf else float(b)] for t, b in bias],
    }


def params_from_json(obj: Mapping[str, Any]) -> SamplingParams:
    """Inverse of :func:`params_to_json`."""
    bias = {int(t): (-math.inf if b == "-inf" else float(b)) for t, b in obj.get("logit_bias", [])}
    return SamplingParams(
        temperature=float(obj["temperature"]),
        top_k=int(obj["top_k"]),
        top_p=float(obj["top_p"]),
        min_p=float(obj["min_p"]),
        repeat_penalty=float(obj["repeat_penalty"]),
        repeat_last_n=int(obj["repeat_last_n"]),
        logit_bias=bias or None,
    )


def floats_json(values: npt.ArrayLike) -> Any:
    """A float array of any shape as nested JSON lists (float64 values), non-finite entries as
    :func:`encode_float`'s strings (only contract-breaking inputs carry them)."""
    array = np.asarray(values, dtype=np.float64)
    if bool(np.all(np.isfinite(array))):
        return array.tolist()
    if array.ndim == 0:
        return encode_float(float(array))
    return [floats_json(v) for v in array]


def rows_request_to_json(request: RowsRequest) -> Json:
    """The ``rows`` input: target_logits, draft_logits, history, drafts, target_params, draft_params
    (in this order on the wire)."""
    return {
        "target_logits": floats_json(request.target_logits),
        "draft_logits": floats_json(request.draft_logits),
        "history": list(request.history),
        "drafts": list(request.drafts),
        "target_params": params_to_json(request.target_params),
        "draft_params": params_to_json(request.draft_params),
    }


def rows_request_from_json(inp: Mapping[str, Any]) -> RowsRequest:
    """Inverse of :func:`rows_request_to_json`."""
    return RowsRequest(
        target_logits=np.asarray(inp["target_logits"], dtype=np.float64),
        draft_logits=np.asarray(inp["draft_logits"], dtype=np.float64),
        history=tuple(int(t) for t in inp["history"]),
        drafts=tuple(int(t) for t in inp["drafts"]),
        target_params=params_from_json(inp["target_params"]),
        draft_params=params_from_json(inp["draft_params"]),
    )


def rows_json(value: npt.ArrayLike) -> list[list[float]]:
    return [[float(v) for v in row] for row in np.asarray(value, dtype=np.float64)]


def verdict_json(accepted: int, token: int, kind: str) -> Json:
    return {"accepted": int(accepted), "token": int(token), "kind": kind}


def encode_case(case: Mapping[str, Any]) -> str:
    """One JSON line: sorted keys, compact, float repr round-trips, strict JSON (no NaN)."""
    return json.dumps(case, sort_keys=True, separators=(",", ":"), allow_nan=False)
