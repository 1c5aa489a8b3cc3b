"""The reference's answers: op + input -> expected output, the one place that maps an op to the
reference code (what the vectors record as ``expected`` and what ``spec.external`` serves)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from verispec.reference.certificate import halfrange_admits, margin_admits, supnorm_admits
from verispec.reference.conformal import conformal_index
from verispec.reference.errors import CalibrationError, VerispecError
from verispec.reference.quants import dequantize
from verispec.reference.sampling import target_distribution
from verispec.reference.speculative import verify_greedy, verify_sampled
from verispec.spec.pipeline import ReferencePipeline
from verispec.spec.vectors.gen_large import expand
from verispec.spec.vectors.wire import Json, f32_bits, params_from_json, rows_json, rows_request_from_json, verdict_json

REFERENCE_PIPELINE = ReferencePipeline()


def _answer_sampled(inp: Mapping[str, Any]) -> Json:
    v = verify_sampled(inp["p"], inp["q"], inp["drafts"], inp["uniforms"])
    return verdict_json(v.accepted, v.token, v.kind)


def _answer_sampled_large(inp: Mapping[str, Any]) -> Json:
    return _answer_sampled(expand(inp))


def _answer_greedy(inp: Mapping[str, Any]) -> Json:
    v = verify_greedy(inp["p"], inp["drafts"])
    return verdict_json(v.accepted, v.token, v.kind)


def _answer_rows(inp: Mapping[str, Any]) -> Json:
    request = rows_request_from_json(inp)
    p, q = REFERENCE_PIPELINE.rows(request)
    return {
        "p": rows_json(p),
        "q": rows_json(q),
        "mode": REFERENCE_PIPELINE.mode(request.target_params, request.draft_params),
    }


def _answer_target_law(inp: Mapping[str, Any]) -> Json:
    probs = target_distribution(
        np.asarray(inp["logits"], dtype=np.float64), [int(t) for t in inp["history"]], params_from_json(inp["params"])
    )
    return {"probs": [float(v) for v in probs]}


_DTYPES: dict[str, type[np.floating[Any]]] = {"float32": np.float32, "float64": np.float64}


def _answer_gate(inp: Mapping[str, Any]) -> Json:
    gate = inp["gate"]
    if gate == "margin":
        return {"admit": margin_admits(float(inp["margin"]), float(inp["threshold"]))}
    dtype = _DTYPES[inp["dtype"]]
    slack = None if inp["slack"] is None else float(inp["slack"])
    admits = {"supnorm": supnorm_admits, "halfrange": halfrange_admits}[gate]
    return {"admit": admits(float(inp["margin"]), float(inp["quantile"]), slack, dtype)}


def _answer_conformal_index(inp: Mapping[str, Any]) -> Json:
    level = inp["q"]
    if not isinstance(level, str):  # the wire carries levels as exact decimal/fraction strings
        raise CalibrationError(f'conformal level must be a string like "0.9" or "2/3", got {level!r}')
    return {"index": conformal_index(int(inp["n"]), level)}


def _answer_dequantize(inp: Mapping[str, Any]) -> Json:
    raw = np.frombuffer(bytes.fromhex(inp["raw_hex"]), dtype=np.uint8)
    values = dequantize(raw, int(inp["ggml_type"]), int(inp["n_elements"]))
    return {"bits": f32_bits(values)}


ANSWERS: dict[str, Callable[[Mapping[str, Any]], Json]] = {
    "sampled": _answer_sampled,
    "sampled_large": _answer_sampled_large,
    "greedy": _answer_greedy,
    "rows": _answer_rows,
    "target_law": _answer_target_law,
    "gate": _answer_gate,
    "conformal_index": _answer_conformal_index,
    "dequantize": _answer_dequantize,
}


def reference_answer(op: str, inp: Mapping[str, Any]) -> Json:
    """The reference's output for one case: the expected dict, or ``{"error": True}`` when the
    reference rejects the input with a typed verispec error (invalid-input cases)."""
    try:
        return ANSWERS[op](inp)
    except VerispecError:
        return {"error": True}
