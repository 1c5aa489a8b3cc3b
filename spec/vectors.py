"""Portable test vectors: JSON-lines cases with inputs and the reference's expected outputs.

Another implementation (a Rust decode loop, a TypeScript host, a vLLM fork) proves it agrees with
the spec by replaying these files, the way Ethereum clients replay the consensus-spec vectors.
``verispec vectors --out DIR`` writes them; ``verispec check`` replays them through an
implementation (``spec/check.py``). The format is :data:`FORMAT_MARKDOWN` (written next to the
files as FORMAT.md and kept in spec/VECTORS.md).

One case is one JSON object on one line:

    {"expected": {...}, "id": "sampled/0007", "input": {...}, "op": "sampled",
     "tags": ["zeros_in_q"], "tolerance": {}}

``expected`` is what the reference answers (:func:`reference_answer`, the one place that maps an op
to the reference code); ``tolerance`` lists the fields compared within an absolute tolerance (every
other field is compared exactly); :func:`compare` is the comparison rule.

Determinism: cases come from ``numpy.random.default_rng([seed, kind index])`` and are written with
sorted keys, compact separators and Python's float repr (shortest string that round-trips the
float64 exactly), so the same seed gives the same bytes on every machine.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from reference.certificate import halfrange_admits, margin_admits, supnorm_admits
from reference.conformal import conformal_index
from reference.errors import CalibrationError, VerispecError
from reference.quants import SUPPORTED_DEQUANT, block_layout, dequantize, type_name
from reference.sampling import SamplingParams, target_distribution
from reference.speculative import (
    PROTOCOL_VERSION,
    speculative_rows,
    verification_mode,
    verify_greedy,
    verify_sampled,
)

FORMAT_VERSION = 1
DEFAULT_SEED = 20_240_601
DEFAULT_COUNT = 64

Case = dict[str, Any]
Json = dict[str, Any]

# the vector kinds, in file order; a kind's index seeds its generator
KINDS: tuple[str, ...] = (
    "sampled",
    "greedy",
    "rows",
    "target_law",
    "gate",
    "conformal_index",
    "dequantize",
)

PROB_TOLERANCE = 1e-6  # |got - expected| per probability (zeros must match exactly)
U_MAX = float(np.nextafter(1.0, 0.0))  # 1 - 2^-53, the largest uniform in [0, 1)


class VectorError(VerispecError):
    """A vector directory is missing, corrupt (sha256 mismatch), or of another format version."""


# -----------------------------------------------------------------------------------------------
# wire encoding of values that JSON cannot hold


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


def _rows(value: npt.ArrayLike) -> list[list[float]]:
    return [[float(v) for v in row] for row in np.asarray(value, dtype=np.float64)]


def _verdict_json(accepted: int, token: int, kind: str) -> Json:
    return {"accepted": int(accepted), "token": int(token), "kind": kind}


# -----------------------------------------------------------------------------------------------
# the reference's answers: op + input -> expected output (also what `spec.external` serves)


def _answer_sampled(inp: Mapping[str, Any]) -> Json:
    v = verify_sampled(inp["p"], inp["q"], inp["drafts"], inp["uniforms"])
    return _verdict_json(v.accepted, v.token, v.kind)


def _answer_greedy(inp: Mapping[str, Any]) -> Json:
    v = verify_greedy(inp["p"], inp["drafts"])
    return _verdict_json(v.accepted, v.token, v.kind)


def _answer_rows(inp: Mapping[str, Any]) -> Json:
    tp, dp = params_from_json(inp["target_params"]), params_from_json(inp["draft_params"])
    p, q = speculative_rows(
        np.asarray(inp["target_logits"], dtype=np.float64),
        np.asarray(inp["draft_logits"], dtype=np.float64),
        [int(t) for t in inp["history"]],
        [int(t) for t in inp["drafts"]],
        tp,
        dp,
    )
    return {"p": _rows(p), "q": _rows(q), "mode": verification_mode(tp, dp)}


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


# -----------------------------------------------------------------------------------------------
# comparison


def compare(case: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """None if the response ``got`` agrees with ``case["expected"]``; else one line saying why.

    Rules: an expected ``{"error": true}`` needs a response with an ``"error"`` field; otherwise
    every expected field must be present. Fields named in ``case["tolerance"]`` (probability
    rows) must agree within that absolute tolerance per entry, with exactly the same zero entries
    and the same shape; every other field must be equal exactly: integers as integers (``2.0``
    is not a token id), booleans as booleans, strings and null as themselves, and a float by value
    (an integer-valued float may come back as a JSON integer, as JavaScript writes it).
    """
    expected: Mapping[str, Any] = case["expected"]
    if expected.get("error"):
        if "error" in got:
            return None
        return f"expected the input to be rejected with an error, got {_short(got)}"
    if "error" in got:
        return f"rejected a valid input: {str(got['error'])[:200]}"
    tolerance: Mapping[str, float] = case.get("tolerance", {})
    for field, want in expected.items():
        if field not in got:
            return f"response lacks field {field!r}"
        have = got[field]
        if field in tolerance:
            problem = _close(want, have, float(tolerance[field]))
            if problem:
                return f"{field}: {problem}"
        elif not _exactly_equal(want, have):
            return f"{field}: expected {_short(want)}, got {_short(have)}"
    return None


def _exactly_equal(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return type(want) is type(have) and want == have
    if isinstance(want, list):
        return (
            isinstance(have, list) and len(want) == len(have) and all(_exactly_equal(a, b) for a, b in zip(want, have))
        )
    if isinstance(want, int):
        return isinstance(have, int) and want == have
    if isinstance(want, float):
        return isinstance(have, (int, float)) and want == have
    return bool(want == have) and type(want) is type(have)


def _close(want: Any, have: Any, tol: float, where: str = "") -> str | None:
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return f"expected a list of {len(want)}{where}, got {_short(have)}"
        for i, (a, b) in enumerate(zip(want, have)):
            problem = _close(a, b, tol, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(have, bool) or not isinstance(have, (int, float)):
        return f"expected a number at {where or 'value'}, got {_short(have)}"
    if (want == 0) != (have == 0):
        return f"zero pattern differs at {where}: expected {want!r}, got {have!r}"
    if not abs(float(want) - float(have)) <= tol:
        return f"at {where}: expected {want!r}, got {have!r} (tolerance {tol})"
    return None


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -----------------------------------------------------------------------------------------------
# generators: each returns (input, tags) pairs; the expected output is the reference's answer

Item = tuple[Json, list[str]]


def _normalize(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def _random_row(rng: np.random.Generator, vocab: int, zeros: float = 0.0) -> npt.NDArray[np.float64]:
    """A random probability row [V] (float64, sums to 1 within a few ulps), with random zeros."""
    weights = rng.gamma(0.8, size=vocab)
    if zeros > 0:
        weights[rng.random(vocab) < zeros] = 0.0
    if not weights.any():
        weights[int(rng.integers(vocab))] = 1.0
    return _normalize(weights)


def _draw(rng: np.random.Generator, row: npt.NDArray[np.float64]) -> int:
    """A draft token from its law (never an id of zero mass)."""
    ids = np.flatnonzero(row > 0)
    return int(rng.choice(ids, p=row[ids] / row[ids].sum()))


def _one_hot(vocab: int, token: int) -> npt.NDArray[np.float64]:
    row = np.zeros(vocab, dtype=np.float64)
    row[token] = 1.0
    return row


def _sampled(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Json:
    return {"p": _rows(p), "q": _rows(q), "drafts": [int(x) for x in drafts], "uniforms": [float(u) for u in uniforms]}


def _random_sampled(rng: np.random.Generator, vocab: int, k: int, zeros: float) -> Json:
    """Random rows; each p_i is often a mix with q_i so that acceptances reach deep positions."""
    q = np.stack([_random_row(rng, vocab, zeros) for _ in range(k)])
    p = np.stack([_random_row(rng, vocab, zeros) for _ in range(k + 1)])
    for i in range(k):
        if rng.random() < 0.6:
            p[i] = _normalize(0.85 * q[i] + 0.15 * p[i])
    drafts = [_draw(rng, q[i]) for i in range(k)]
    return _sampled(p, q, drafts, rng.random(k + 1).tolist())


def sampled_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Sampled verification: ``count`` random cases plus the deliberate edge cases."""
    items: list[Item] = []
    for _ in range(count):
        vocab, k = int(rng.integers(2, 9)), int(rng.choice([1, 2, 3, 4, 5, 8]))
        items.append((_random_sampled(rng, vocab, k, float(rng.choice([0.0, 0.3]))), ["random"]))
    items += _sampled_edges(rng)
    items += _sampled_invalid()
    return items


def _sampled_edges(rng: np.random.Generator) -> list[Item]:
    items: list[Item] = []

    def add(tags: list[str], p: npt.ArrayLike, q: npt.ArrayLike, drafts: list[int], uniforms: list[float]) -> None:
        items.append((_sampled(p, q, drafts, uniforms), tags))

    for k in (1, 8):  # the shortest and the longest draft
        for _ in range(3):
            items.append((_random_sampled(rng, int(rng.integers(2, 9)), k, 0.2), [f"k{k}"]))
    for k in (1, 3, 8):  # p == q: every draft accepted, bonus from p_k
        q = np.stack([_random_row(rng, 6, 0.3) for _ in range(k)])
        p = np.concatenate([q, _random_row(rng, 6)[None]])
        add(["p_equals_q", f"k{k}"], p, q, [_draw(rng, r) for r in q], rng.random(k + 1).tolist())
    for _ in range(3):  # zeros in q where p has mass: the residual lives there
        q = np.stack([_random_row(rng, 6) for _ in range(3)])
        q[:, :3] = 0.0
        q = q / q.sum(axis=1, keepdims=True)
        p = np.stack([_random_row(rng, 6) for _ in range(4)])
        add(["zeros_in_q"], p, q, [_draw(rng, r) for r in q], [0.97, 0.99, 0.995, float(rng.random())])

    # one-hot rows: a greedy draft (q one-hot), a point-mass target, both
    e = _one_hot
    p_random = np.stack([_random_row(rng, 5) for _ in range(3)])
    add(["one_hot_q"], p_random, np.stack([e(5, 2), e(5, 4)]), [2, 4], [0.3, 0.6, 0.8])
    add(["one_hot_p", "last_vocab_id"], np.stack([e(5, 4), e(5, 0)]), _random_row(rng, 5)[None], [1], [0.0, 0.5])
    both = ["one_hot_p", "one_hot_q", "p_equals_q", "last_vocab_id"]
    add(both, np.stack([e(4, 1), e(4, 3)]), e(4, 1)[None], [1], [U_MAX, U_MAX])

    # ties: uniform rows, a residual with tied entries, disjoint supports
    tie = [0.25, 0.25, 0.25, 0.25]
    add(["ties", "zeros_in_q"], [tie, tie], [[0.5, 0.5, 0.0, 0.0]], [1], [0.75, 0.5])
    add(["ties", "disjoint_supports"], [[0.0, 0.5, 0.0, 0.5], tie], [[0.5, 0.0, 0.5, 0.0]], [0], [0.1, 0.5])

    # the last vocab id: repair and bonus mass only there, the top uniform, trailing zeros
    eighth = [0.125] * 8
    add(["last_vocab_id", "bonus"], [eighth, list(e(8, 7))], [eighth], [7], [0.5, U_MAX])
    add(["last_vocab_id", "repair"], [[0.0, 0.25, 0.25, 0.5], tie], [[0.5, 0.5, 0.0, 0.0]], [0], [0.5, U_MAX])
    halves = [0.5, 0.5, 0.0, 0.0]
    add(["trailing_zeros", "u_max"], [halves, halves], [halves], [1], [0.5, U_MAX])

    # protocol boundaries (dyadic, so every float64 step is exact): the strict < of the test;
    # 0.5 * 0.5 == 0.25 rejects, one ulp below 0.5 accepts
    bound_p, bound_q = [[0.25, 0.5, 0.25], [0.5, 0.25, 0.25]], [[0.5, 0.25, 0.25]]
    add(["accept_boundary"], bound_p, bound_q, [0], [0.5, 0.5])
    add(["accept_boundary"], bound_p, bound_q, [0], [float(np.nextafter(0.5, 0.0)), 0.5])
    # the final draw exactly on a running-sum boundary: u * total == cumsum[t] picks t + 1
    cdf = [0.25, 0.25, 0.5]
    add(["cdf_boundary", "bonus"], [cdf, cdf], [cdf], [2], [0.5, 0.5])
    add(["cdf_boundary", "bonus"], [cdf, cdf], [cdf], [2], [0.5, 0.25])
    add(["cdf_boundary", "repair"], [[0.125, 0.375, 0.5], [1.0, 0.0, 0.0]], [[0.625, 0.125, 0.25]], [0], [0.5, 0.5])
    # u = 0: every draft of positive target mass accepted, the draw is the first positive id
    u0_p = [[0.0, 0.5, 0.5], [0.0, 0.0, 1.0], [0.0, 0.5, 0.5]]
    add(["u_zero", "bonus"], u0_p, [[0.0, 0.5, 0.5], [0.5, 0.0, 0.5]], [1, 2], [0.0, 0.0, 0.0])
    # p(x) = 0 at the draft: rejected whatever u
    add(["p_zero_at_draft", "u_zero"], [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], [[0.5, 0.25, 0.25]], [0], [0.0, 0.3])
    # a rejection with no positive residual: p <= q everywhere, p summing to 1 - 2^-30
    add(["zero_residual"], [[0.5, 0.5 - 2.0**-30], [0.5, 0.5]], [[0.5, 0.5]], [1], [0.9999999999, 0.75])
    # a subnormal residual total (u * total rounds up to total): the last id with positive weight
    sub_p = [[0.5, float(np.nextafter(0.5, 0.0)), 5e-324], [0.25, 0.25, 0.5]]
    add(["subnormal_residual", "last_vocab_id"], sub_p, [[0.5, 0.5, 0.0]], [1], [U_MAX, U_MAX])
    add(["subnormal_residual"], sub_p, [[0.5, 0.5, 0.0]], [1], [U_MAX, 0.3])

    # k = 8: all accepted, and rejected at the very last draft
    q8 = np.stack([_random_row(rng, 4) for _ in range(8)])
    p8 = np.concatenate([q8, e(4, 3)[None]])
    drafts8 = [_draw(rng, r) for r in q8]
    add(["k8", "p_equals_q", "bonus"], p8, q8, drafts8, [0.5] * 8 + [0.9])
    p8_last = p8.copy()
    p8_last[7] = e(4, (drafts8[7] + 1) % 4)
    add(["k8", "one_hot_p", "repair_at_last"], p8_last, q8, drafts8, [0.5] * 9)
    return items


def _sampled_invalid() -> list[Item]:
    """Inputs that break the contract: an implementation must answer with an error."""
    p = [[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]]
    q = [[0.25, 0.75, 0.0]]
    bad: list[tuple[str, Json]] = [
        ("draft_with_zero_q", _sampled(p, q, [2], [0.5, 0.5])),
        ("draft_id_equals_vocab", _sampled(p, q, [3], [0.5, 0.5])),
        ("negative_draft_id", _sampled(p, q, [-1], [0.5, 0.5])),
        ("p_row_sums_to_0.9", _sampled([[0.45, 0.45, 0.0], [0.25, 0.25, 0.5]], q, [1], [0.5, 0.5])),
        ("negative_q_entry", _sampled(p, [[-0.25, 1.25, 0.0]], [1], [0.5, 0.5])),
        ("uniform_equals_1", _sampled(p, q, [1], [1.0, 0.5])),
        ("negative_uniform", _sampled(p, q, [1], [0.5, -0.25])),
        ("k_uniforms_not_k_plus_1", _sampled(p, q, [1], [0.5])),
        ("k_rows_of_p_not_k_plus_1", _sampled(p[:1], q, [1], [0.5, 0.5])),
        ("vocab_sizes_disagree", _sampled(p, [[0.25, 0.75, 0.0, 0.0]], [1], [0.5, 0.5])),
        ("k_equals_0", {"p": p[:1], "q": [], "drafts": [], "uniforms": [0.5]}),
    ]
    return [(inp, ["invalid", label]) for label, inp in bad]


def greedy_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Greedy verification: random logits rows (often tied: multiples of 1/4) and edge cases."""
    items: list[Item] = []
    for _ in range(count):
        vocab, k = int(rng.integers(2, 17)), int(rng.choice([1, 2, 3, 4, 5, 8]))
        p = np.round(rng.normal(0.0, 2.0, size=(k + 1, vocab)) * 4) / 4
        drafts = [int(np.argmax(p[i])) if rng.random() < 0.8 else int(rng.integers(vocab)) for i in range(k)]
        items.append(({"p": _rows(p), "drafts": drafts}, ["random"]))
    tied = [[1.0, 3.0, 3.0, 2.0], [0.5, 0.5, 0.5, 0.5]]
    items.append(({"p": tied, "drafts": [2]}, ["ties", "repair"]))  # the tie goes to id 1
    items.append(({"p": tied, "drafts": [1]}, ["ties", "bonus"]))  # all-equal row: id 0
    items.append(
        ({"p": [[0.0, 1.0, 2.0, 5.0], [-3.0, -2.0, -1.0, -0.5]], "drafts": [3]}, ["last_vocab_id", "negative_logits"])
    )
    items.append(({"p": [[0.1, 0.2, 0.7], [0.2, 0.3, 0.5]], "drafts": [0]}, ["k1", "repair", "last_vocab_id"]))
    p8 = np.round(rng.normal(0.0, 2.0, size=(9, 6)) * 4) / 4
    best = [int(np.argmax(r)) for r in p8]
    items.append(({"p": _rows(p8), "drafts": best[:8]}, ["k8", "bonus"]))
    items.append(({"p": _rows(p8), "drafts": best[:7] + [(best[7] + 1) % 6]}, ["k8", "repair_at_last"]))
    items.append(({"p": [[2.0, 2.0], [1.0, 2.0]], "drafts": [1]}, ["ties", "repair"]))
    items.append(({"p": [[0.5, 0.5, 0.0], [0.1, 0.2, 0.7]], "drafts": [3]}, ["invalid", "draft_id_equals_vocab"]))
    items.append(({"p": [[0.5, 0.5, 0.0]], "drafts": [0]}, ["invalid", "k_rows_of_p_not_k_plus_1"]))
    return items


# --- logits-level cases: processors. The support (which ids survive top-k/top-p/min-p) must not
# hinge on rounding, so random cases are kept only if it is stable under 1e-6 perturbations.


def _random_params(rng: np.random.Generator, vocab: int, *, allow_greedy: bool = True) -> SamplingParams:
    temperatures = [0.5, 0.7, 1.0, 1.0, 1.5, float(np.float32(rng.uniform(0.3, 2.0)))] + ([0.0] if allow_greedy else [])
    bias: dict[int, float] = {}
    for _ in range(int(rng.integers(0, 3))):
        bias[int(rng.integers(vocab))] = -math.inf if rng.random() < 0.3 else float(np.float32(rng.normal(0.0, 2.0)))
    return SamplingParams(
        temperature=float(rng.choice(temperatures)),
        top_k=int(rng.choice([0, 0, 1, 2, 3, 5, vocab - 1, vocab + 2])),
        top_p=float(rng.choice([1.0, 1.0, 0.95, 0.9, 0.5, float(np.float32(rng.uniform(0.2, 1.0)))])),
        min_p=float(rng.choice([0.0, 0.0, 0.05, 0.1, float(np.float32(rng.uniform(0.0, 0.3)))])),
        repeat_penalty=float(rng.choice([1.0, 1.0, 1.1, 1.3, 0.8])),
        repeat_last_n=int(rng.choice([64, 0, -1, 3])),
        logit_bias=bias or None,
    )


def _support(logits: npt.NDArray[np.float64], history: Sequence[int], params: SamplingParams) -> tuple[int, ...]:
    return tuple(int(i) for i in np.flatnonzero(target_distribution(logits, history, params) > 0))


def _stable_support(logits: npt.NDArray[np.float64], history: Sequence[int], params: SamplingParams) -> bool:
    """The support does not change when the logits are scaled or the cut-offs moved by 1e-6."""
    try:
        base = _support(logits, history, params)
    except VerispecError:
        return False
    eps = 1e-6
    variants = [
        (logits * (1 + eps), params),
        (logits * (1 - eps), params),
        (logits, _replace(params, top_p=min(1.0, params.top_p * (1 + eps)) if params.top_p < 1 else 1.0)),
        (logits, _replace(params, top_p=params.top_p * (1 - eps) if params.top_p < 1 else 1.0)),
        (logits, _replace(params, min_p=min(1.0, params.min_p * (1 + eps)))),
        (logits, _replace(params, min_p=params.min_p * (1 - eps))),
    ]
    return all(_support(lg, history, pr) == base for lg, pr in variants)


def _replace(params: SamplingParams, **changes: Any) -> SamplingParams:
    from dataclasses import replace

    return replace(params, **changes)


def _random_logits(rng: np.random.Generator, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """float32-representable logits; half the time on a 1/4 grid (ties)."""
    values = rng.normal(0.0, 2.5, size=shape)
    if rng.random() < 0.5:
        values = np.round(values * 4) / 4
    return np.asarray(values.astype(np.float32), dtype=np.float64)


def _target_law(logits: npt.ArrayLike, history: Sequence[int], params: SamplingParams) -> Json:
    return {
        "logits": [float(v) for v in np.asarray(logits, dtype=np.float64)],
        "history": [int(t) for t in history],
        "params": params_to_json(params),
    }


def target_law_items(rng: np.random.Generator, count: int) -> list[Item]:
    """The target law: logits + history + processor settings -> probabilities."""
    items: list[Item] = []
    while len(items) < count:
        vocab = int(rng.integers(2, 33))
        logits = _random_logits(rng, (vocab,))
        history = rng.integers(0, vocab, size=int(rng.integers(0, 12))).tolist()
        params = _random_params(rng, vocab)
        if _stable_support(logits, history, params):
            items.append((_target_law(logits, history, params), ["random"]))
    P = SamplingParams
    edges: list[tuple[list[float], list[int], SamplingParams, list[str]]] = [
        ([1.0, 3.0, 3.0, 2.0, 3.0], [], P(temperature=0.0), ["greedy", "ties"]),
        ([1.0, 2.0, 2.0, 2.0, 0.0], [], P(top_k=2), ["top_k", "ties"]),
        ([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0], [], P(top_k=1), ["top_k", "last_vocab_id"]),
        (
            [0.5, -1.0, 2.0, 2.0, -3.0],
            [2, 2, 1],
            P(repeat_penalty=1.5, repeat_last_n=-1),
            ["repeat_penalty", "negative_logits"],
        ),
        (
            [0.5, -1.0, 2.0, 2.0, -3.0],
            [2, 1, 0, 3],
            P(repeat_penalty=1.5, repeat_last_n=2),
            ["repeat_penalty", "window"],
        ),
        ([1.0, 2.0, 3.0, 4.0], [], P(logit_bias={3: -math.inf, 0: 2.5}), ["logit_bias", "ban"]),
        ([1.0, 2.0, 3.0, 4.0], [], P(temperature=0.0, logit_bias={3: -math.inf}), ["greedy", "ban"]),
        ([0.0, 1.0, 2.0, 3.0, 4.0], [], P(top_p=0.5, temperature=0.7), ["top_p"]),
        ([0.0, 1.0, 2.0, 3.0, 4.0], [], P(min_p=0.2, temperature=2.0), ["min_p"]),
        ([0.0, 1.0, 2.0, 3.0, 4.0], [], P(top_p=0.01), ["top_p", "one_hot", "last_vocab_id"]),
        ([3.0, 3.0, 3.0], [], P(), ["ties", "uniform"]),
        (
            [-2.0, 5.0, 1.0, 5.0, 0.5, -1.0],
            [1],
            P(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05, repeat_penalty=1.2),
            ["all_processors"],
        ),
    ]
    for logits_list, history, params, tags in edges:
        items.append((_target_law(logits_list, history, params), ["edge"] + tags))
    return items


def _rows_case(
    rng: np.random.Generator, vocab: int, k: int, tp: SamplingParams, dp: SamplingParams, history: list[int]
) -> Json | None:
    """A speculative step from logits; drafts drawn from the draft's processed law, row by row."""
    t_logits = _random_logits(rng, (k + 1, vocab))
    noise = rng.normal(0.0, 1.0, size=(k, vocab))
    d_logits = np.asarray((t_logits[:k] + noise).astype(np.float32), dtype=np.float64)  # [k, V]
    drafts: list[int] = []
    for i in range(k):
        context = history + drafts
        if not (_stable_support(d_logits[i], context, dp) and _stable_support(t_logits[i], context, tp)):
            return None
        drafts.append(_draw(rng, target_distribution(d_logits[i], context, dp)))
    if not _stable_support(t_logits[k], history + drafts, tp):
        return None
    return {
        "target_logits": _rows(t_logits),
        "draft_logits": _rows(d_logits),
        "history": history,
        "drafts": drafts,
        "target_params": params_to_json(tp),
        "draft_params": params_to_json(dp),
    }


def rows_items(rng: np.random.Generator, count: int) -> list[Item]:
    """p and q of a speculative step from logits (the pipeline), and the verification mode."""
    items: list[Item] = []
    while len(items) < count:
        vocab, k = int(rng.integers(2, 9)), int(rng.choice([1, 2, 3, 4, 8]))
        tp = _random_params(rng, vocab)
        dp = tp if rng.random() < 0.4 else _random_params(rng, vocab)
        history = rng.integers(0, vocab, size=int(rng.integers(0, 6))).tolist()
        case = _rows_case(rng, vocab, k, tp, dp, history)
        if case is not None:
            items.append((case, ["random"]))
    P = SamplingParams
    edges: list[tuple[SamplingParams, SamplingParams, list[int], list[str]]] = [
        (P(temperature=0.8, top_k=2), P(temperature=0.8, top_k=2), [], ["top_k_on_both"]),
        (P(temperature=1.0, top_p=0.9), P(temperature=0.0), [], ["greedy_draft", "one_hot_q"]),
        (P(temperature=0.0), P(temperature=1.2), [], ["greedy_target"]),
        (
            P(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
            P(temperature=0.7, top_k=3, min_p=0.05, logit_bias={0: -1.5}),
            [],
            ["processed_target"],
        ),
        (P(repeat_penalty=3.0, repeat_last_n=-1), P(), [1], ["repeat_penalty_with_drafts"]),
        (P(temperature=0.9), P(temperature=0.9, top_k=2), [], ["draft_top_k_only"]),
    ]
    for tp, dp, history, tags in edges:
        for k in (1, 3, 8):
            case = None
            while case is None:
                case = _rows_case(rng, 5, k, tp, dp, history)
            items.append((case, ["edge", f"k{k}"] + tags))
    return items


def gate_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Early-exit gate decisions: (gate, margin, quantile, slack, dtype) -> admit."""
    items: list[Item] = []
    f32 = np.float32
    for _ in range(count):
        dtype_name = str(rng.choice(["float32", "float64"]))
        cast = f32 if dtype_name == "float32" else np.float64
        gate = str(rng.choice(["supnorm", "halfrange", "margin"]))
        quantile = float(cast(abs(rng.normal(0.0, 3.0))))
        margin = float(cast(2 * quantile + rng.normal(0.0, 0.01) * max(quantile, 1e-3)))
        margin = abs(margin)
        if gate == "margin":
            items.append(({"gate": "margin", "margin": margin, "threshold": quantile, "dtype": dtype_name}, ["random"]))
            continue
        slack = None if rng.random() < 0.5 else float(cast(abs(rng.normal(0.0, 1e-5))))
        items.append(
            ({"gate": gate, "margin": margin, "quantile": quantile, "slack": slack, "dtype": dtype_name}, ["random"])
        )
    # boundaries: 2 (Q + slack) == margin exactly must not admit (strict); one ulp above must
    for dtype_name, cast in (("float32", f32), ("float64", np.float64)):
        q = cast(1.5)
        exact_bound = float(cast(2) * (q + cast(0.25)))
        above = float(np.nextafter(cast(exact_bound), cast(np.inf)))
        for gate in ("supnorm", "halfrange"):
            items.append(
                (
                    {"gate": gate, "margin": exact_bound, "quantile": float(q), "slack": 0.25, "dtype": dtype_name},
                    ["edge", "strict_boundary"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": above, "quantile": float(q), "slack": 0.25, "dtype": dtype_name},
                    ["edge", "one_ulp_above"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": 3.0, "quantile": 1.5, "slack": None, "dtype": dtype_name},
                    ["edge", "default_slack_decides"],
                )
            )
            items.append(
                (
                    {"gate": gate, "margin": float(cast(1e-30)), "quantile": 0.0, "slack": None, "dtype": dtype_name},
                    ["edge", "zero_quantile"],
                )
            )
        items.append(
            ({"gate": "margin", "margin": 2.0, "threshold": 2.0, "dtype": dtype_name}, ["edge", "strict_boundary"])
        )
    items.append(
        (
            {
                "gate": "supnorm",
                "margin": float(np.finfo(f32).max),
                "quantile": float(f32(2e38)),
                "slack": None,
                "dtype": "float32",
            },
            ["edge", "overflow_refuses"],
        )
    )
    items.append(
        (
            {"gate": "supnorm", "margin": 1.0, "quantile": 0.1, "slack": 0.1, "dtype": "float32"},
            ["invalid", "not_a_float32_value"],
        )
    )
    items.append(
        (
            {"gate": "halfrange", "margin": 1.0, "quantile": -0.5, "slack": None, "dtype": "float64"},
            ["invalid", "negative_quantile"],
        )
    )
    return items


def conformal_items(rng: np.random.Generator, count: int) -> list[Item]:
    """The conformal order-statistic index ceil((n + 1) q), exactly; null when it exceeds n."""
    items: list[Item] = []
    levels = ["0.9", "0.95", "0.99", "0.999", "0.5", "0.8", "0.975"]
    for _ in range(count):
        n = int(rng.integers(1, 5000))
        q = str(rng.choice(levels)) if rng.random() < 0.6 else f"{int(rng.integers(1, 10**6)) / 10**6:.6f}".rstrip("0")
        items.append(({"n": n, "q": q}, ["random"]))
    edges = [
        (9, "0.9"),
        (99, "0.99"),
        (999, "0.999"),
        (19, "0.95"),
        (8, "0.9"),
        (98, "0.99"),
        (1, "0.5"),
        (1, "0.51"),
        (2, "0.6666666666666666"),
        (100, "0.99"),
        (10**6, "0.999999"),
        (2, "2/3"),
        (5, "5/6"),
        (5, "6/7"),
    ]
    for n, q in edges:
        items.append(({"n": n, "q": q}, ["edge", "exact_ceiling"]))
    for n, q, label in [
        (0, "0.9", "n_equals_0"),
        (10, "1", "q_equals_1"),
        (10, "0", "q_equals_0"),
        (10, "1.5", "q_above_1"),
    ]:
        items.append(({"n": n, "q": q}, ["invalid", label]))
    return items


# dequantization: random blocks (resampled until every value is finite: NaN payloads are not
# portable) and blocks with deliberate scales; the d field's byte offset per quantized type
_SCALE_OFFSET = {
    "Q4_0": 0,
    "Q4_1": 0,
    "Q5_0": 0,
    "Q5_1": 0,
    "Q8_0": 0,
    "Q2_K": 80,
    "Q3_K": 108,
    "Q4_K": 0,
    "Q5_K": 0,
    "Q6_K": 208,
}
_SPECIAL_HALVES = {
    "zero": 0x0000,
    "negative_zero": 0x8000,
    "smallest_subnormal": 0x0001,
    "largest_subnormal": 0x03FF,
    "max": 0x7BFF,
    "negative_max": 0xFBFF,
    "one": 0x3C00,
}


def _finite_block(rng: np.random.Generator, ggml_type: int, blocks: int) -> bytes:
    elements, nbytes = block_layout(ggml_type)
    out = bytearray()
    for _ in range(blocks):
        for _attempt in range(1000):
            raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
            if np.all(np.isfinite(dequantize(raw, ggml_type, elements))):
                out += raw.tobytes()
                break
        else:  # pragma: no cover - every supported type has finite blocks with high probability
            raise VectorError(f"no finite random block found for {type_name(ggml_type)}")
    return bytes(out)


def _dequant(ggml_type: int, raw: bytes) -> Json:
    elements, nbytes = block_layout(ggml_type)
    return {
        "ggml_type": int(ggml_type),
        "type_name": type_name(ggml_type),
        "n_elements": len(raw) // nbytes * elements,
        "raw_hex": raw.hex(),
    }


def dequantize_items(rng: np.random.Generator, count: int) -> list[Item]:
    """Raw blocks per quant type (hex) -> float32 values (as IEEE bit patterns), bit-exact."""
    types = sorted(SUPPORTED_DEQUANT)
    items: list[Item] = []
    for index in range(max(count, len(types))):
        ggml_type = types[index % len(types)]
        blocks = int(rng.integers(1, 3))
        if block_layout(ggml_type)[0] == 1:  # plain floats: 1..40 values
            blocks = int(rng.integers(1, 41))
        items.append((_dequant(ggml_type, _finite_block(rng, ggml_type, blocks)), ["random", type_name(ggml_type)]))
    for ggml_type in types:
        name = type_name(ggml_type)
        elements, nbytes = block_layout(ggml_type)
        if name in _SCALE_OFFSET:
            items.append((_dequant(ggml_type, bytes(nbytes)), ["all_zero_block", name]))
            for label, half in _SPECIAL_HALVES.items():
                raw = bytearray(_finite_block(rng, ggml_type, 1))
                raw[_SCALE_OFFSET[name] : _SCALE_OFFSET[name] + 2] = half.to_bytes(2, "little")
                if np.all(np.isfinite(dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), ggml_type, elements))):
                    items.append((_dequant(ggml_type, bytes(raw)), [f"scale_{label}", name]))
    specials_f32 = np.array(
        [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, 0.1],
        dtype=np.float32,
    )
    halves = np.array(list(_SPECIAL_HALVES.values()) + [0x7C00, 0xFC00, 0x3555], dtype=np.uint16)
    items.append((_dequant(0, specials_f32.tobytes()), ["special_values", "F32"]))
    items.append((_dequant(1, halves.astype("<u2").tobytes()), ["special_values", "F16", "infinity"]))
    bf16 = (specials_f32.view(np.uint32) >> np.uint32(16)).astype("<u2")
    items.append((_dequant(30, bf16.tobytes()), ["special_values", "BF16", "infinity"]))
    return items


GENERATORS: dict[str, Callable[[np.random.Generator, int], list[Item]]] = {
    "sampled": sampled_items,
    "greedy": greedy_items,
    "rows": rows_items,
    "target_law": target_law_items,
    "gate": gate_items,
    "conformal_index": conformal_items,
    "dequantize": dequantize_items,
}
TOLERANCES: dict[str, dict[str, float]] = {
    "rows": {"p": PROB_TOLERANCE, "q": PROB_TOLERANCE},
    "target_law": {"probs": PROB_TOLERANCE},
}


def build_cases(kind: str, count: int, seed: int) -> list[Case]:
    """The cases of one kind: ``count`` random ones plus the edge cases, with expected outputs."""
    if kind not in GENERATORS:
        raise VectorError(f"unknown vector kind {kind!r}; known: {', '.join(KINDS)}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    cases: list[Case] = []
    for index, (inp, tags) in enumerate(GENERATORS[kind](rng, count)):
        cases.append(
            {
                "id": f"{kind}/{index:04d}",
                "op": kind,
                "tags": tags,
                "input": inp,
                "expected": reference_answer(kind, inp),
                "tolerance": TOLERANCES.get(kind, {}),
            }
        )
    return cases


def encode_case(case: Mapping[str, Any]) -> str:
    """One JSON line: sorted keys, compact, float repr round-trips, strict JSON (no NaN)."""
    return json.dumps(case, sort_keys=True, separators=(",", ":"), allow_nan=False)


# -----------------------------------------------------------------------------------------------
# files


@dataclass(frozen=True)
class VectorSet:
    """Cases by kind (file order), with the seed and count they came from."""

    cases: dict[str, list[Case]]
    seed: int
    count: int
    source: str  # "generated" or the directory they were read from

    def all_cases(self) -> Iterable[Case]:
        for kind in KINDS:
            yield from self.cases.get(kind, [])


def build_vectors(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED, kinds: Sequence[str] = KINDS) -> VectorSet:
    """Every kind's cases, in memory."""
    if count < 0:
        raise VectorError(f"count must be >= 0, got {count}")
    return VectorSet({kind: build_cases(kind, count, seed) for kind in kinds}, seed, count, "generated")


def _file_bytes(cases: Sequence[Case]) -> bytes:
    return "".join(encode_case(case) + "\n" for case in cases).encode("utf-8")


def manifest_for(vectors: VectorSet, blobs: Mapping[str, bytes]) -> Json:
    """The manifest: versions, seed, count, and per file its kind, case count and sha256."""
    return {
        "format_version": FORMAT_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "generator": "verispec vectors",
        "seed": vectors.seed,
        "count": vectors.count,
        "files": [
            {
                "name": f"{kind}.jsonl",
                "kind": kind,
                "cases": len(vectors.cases[kind]),
                "sha256": hashlib.sha256(blobs[kind]).hexdigest(),
            }
            for kind in KINDS
            if kind in vectors.cases
        ],
    }


def write_vectors(out: Path, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> Json:
    """Write ``KIND.jsonl`` per kind, ``manifest.json`` and ``FORMAT.md`` into ``out``; return the
    manifest. Same (count, seed), same bytes."""
    vectors = build_vectors(count, seed)
    out.mkdir(parents=True, exist_ok=True)
    blobs = {kind: _file_bytes(cases) for kind, cases in vectors.cases.items()}
    for kind, blob in blobs.items():
        (out / f"{kind}.jsonl").write_bytes(blob)
    manifest = manifest_for(vectors, blobs)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "FORMAT.md").write_text(FORMAT_MARKDOWN, encoding="utf-8")
    return manifest


def read_vectors(directory: Path) -> VectorSet:
    """Read a directory written by :func:`write_vectors`, checking versions and every sha256."""
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VectorError(f"cannot read {manifest_path}: {exc}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise VectorError(
            f"{manifest_path}: format_version {manifest.get('format_version')!r}, this verispec reads {FORMAT_VERSION}"
        )
    if manifest.get("protocol_version") != PROTOCOL_VERSION:
        raise VectorError(
            f"{manifest_path}: protocol_version {manifest.get('protocol_version')!r}, this verispec speaks {PROTOCOL_VERSION}"
        )
    cases: dict[str, list[Case]] = {}
    for entry in manifest.get("files", []):
        path = directory / str(entry["name"])
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise VectorError(f"cannot read {path}: {exc}") from None
        digest = hashlib.sha256(blob).hexdigest()
        if digest != entry["sha256"]:
            raise VectorError(f"{path}: sha256 {digest} does not match the manifest's {entry['sha256']}")
        kind = str(entry["kind"])
        cases[kind] = [json.loads(line) for line in blob.decode("utf-8").splitlines() if line.strip()]
        if len(cases[kind]) != entry["cases"]:
            raise VectorError(f"{path}: {len(cases[kind])} cases, the manifest says {entry['cases']}")
    return VectorSet(cases, int(manifest["seed"]), int(manifest["count"]), str(directory))


FORMAT_MARKDOWN = """\
# verispec test vectors — format 1 (random-draw protocol 1)

Written by `verispec vectors --out DIR [--count N] [--seed S]`; the same count and seed give the
same bytes. Replay them in your own test harness, or let `verispec check` do it through your
program (see "Checking another implementation" in the verispec README).

## Files

| file | op | what |
|---|---|---|
| `sampled.jsonl` | `sampled` | speculative sampling verification: p, q, drafts, uniforms → verdict |
| `greedy.jsonl` | `greedy` | greedy verification: p (logits or probabilities), drafts → verdict |
| `rows.jsonl` | `rows` | one speculative step's rows from logits: p and q through the processors, and the verification mode |
| `target_law.jsonl` | `target_law` | the target law: logits + history + sampling params → probabilities |
| `gate.jsonl` | `gate` | early-exit gate decision: margin, quantile, slack (or threshold), dtype → admit |
| `conformal_index.jsonl` | `conformal_index` | conformal order-statistic index: n, q → ⌈(n+1)q⌉ or null |
| `dequantize.jsonl` | `dequantize` | raw GGUF block bytes of one ggml type → float32 values, bit-exact |
| `manifest.json` | | format and protocol versions, seed, count, per file: kind, number of cases, sha256 |

`--count N` is the number of random cases per kind; the deliberate edge cases come on top.

## One case per line

```json
{"expected": {...}, "id": "sampled/0007", "input": {...}, "op": "sampled", "tags": ["zeros_in_q"], "tolerance": {}}
```

- `id`: unique, `KIND/NNNN`. `op`: the operation (also the wire protocol's op name).
- `input`: the operation's inputs (below). `expected`: the reference's output, or
  `{"error": true}` when the input breaks the contract and must be rejected.
- `tags`: why the case exists (`random`, `edge`, `invalid`, `k1`, `k8`, `zeros_in_q`,
  `p_equals_q`, `one_hot_p`, `one_hot_q`, `ties`, `last_vocab_id`, `accept_boundary`,
  `cdf_boundary`, `u_zero`, `u_max`, `zero_residual`, `subnormal_residual`, ...).
- `tolerance`: `{field: absolute tolerance}` for the fields compared approximately; every field not
  listed is compared exactly.

## Encoding

- Lines are UTF-8 JSON with sorted keys and no spaces. Every float is written with the shortest
  decimal that round-trips the float64 exactly (Python's `repr`): parse it as an IEEE double and you
  have the exact value the reference used. No NaN or Infinity appears in the files.
- Uniforms are float64 in [0, 1); `0.9999999999999999` is 1 − 2⁻⁵³, the largest.
- Sampling params are an object with every field present:
  `{"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "logit_bias"}`;
  `logit_bias` is a list of `[token id, bias]` pairs, bias a number or the string `"-inf"` (a ban).
- Conformal levels `q` are strings holding an exact rational: a decimal (`"0.9"` is 9/10, not the
  double nearest to it) or a fraction (`"2/3"`).
- Dequantization: `raw_hex` is the raw block bytes as lowercase hex, exactly as stored in a GGUF
  file; the expected float32 values are given as `bits`: one 8-digit lowercase hex string of the
  IEEE-754 binary32 bit pattern per value (`"3f800000"` is 1.0, `"80000000"` is −0.0), so the
  comparison is bit-exact, signed zeros and infinities included. Blocks whose decoding would produce
  NaN (whose payload is not portable) are not included.

## Operations

Shapes: k drafts, vocabulary V.

**`sampled`** — input `p` [k+1][V], `q` [k][V], `drafts` [k], `uniforms` [k+1]; output
`{"accepted", "token", "kind"}` with kind `"repair"` or `"bonus"`. The random-draw protocol,
version 1 (all arithmetic in float64):

```
for i = 0 .. k-1:
    x = drafts[i]
    if uniforms[i] * q[i][x] < p[i][x]: continue             # accept (strict <)
    w = max(p[i] - q[i], 0) elementwise                      # the residual
    if no entry of w is > 0: w = p[i]
    return (accepted=i, token=draw(w, uniforms[k]), kind="repair")
return (accepted=k, token=draw(p[k], uniforms[k]), kind="bonus")

draw(w, u): c = running sum of w over ids 0, 1, .., V-1, left to right;
            the first id t with u * c[V-1] < c[t]; if there is none, the largest id with w > 0
```

Exactly k + 1 uniforms are consumed whatever the outcome. Contract (else `{"error": true}`): k ≥ 1;
p has k+1 rows and q has k rows of the same length V; entries finite and ≥ 0; every row sums to 1
within 1e-6; every draft id is in [0, V) with q[i][drafts[i]] > 0; k + 1 uniforms in [0, 1).

**`greedy`** — input `p` [k+1][V] (logits or probabilities), `drafts` [k]; accept while
drafts[i] is the argmax of p[i] (lowest id on ties); output as for `sampled`: the first mismatch
gives `kind="repair"` with the argmax as token, all accepted gives `kind="bonus"` with the argmax of
p[k]. No randomness.

**`rows`** — input `target_logits` [k+1][V], `draft_logits` [k][V], `history` (token ids before
the step), `drafts` [k], `target_params`, `draft_params`; output `p` [k+1][V] (row i is the target
law of target_logits[i] with history + drafts[:i]), `q` [k][V] (row i the DRAFT's own law of
draft_logits[i], with its own params and the same history: the exact law the draft sampled from, so
a greedy draft has one-hot rows), and `mode`: `"greedy"` when the target's temperature is 0, else
`"sampled"`. Tolerance: p and q within 1e-6 per entry, zero entries exact, mode exact.

**`target_law`** — input `logits` [V], `history`, `params`; output `probs` [V]. The processors run
in llama.cpp's order: logit bias; repeat penalty (each distinct id among the last `repeat_last_n`
history ids — 0 disables, −1 means all — gets l/r if l > 0 else l·r); top-k (k first ids in the
order logit descending, id ascending; 0 disables); top-p (over the survivors, softmax at temperature
1, the shortest prefix in that order with cumulative mass ≥ top_p; 1 disables); min-p (keep
l ≥ max + ln(min_p) over the survivors; 0 disables); temperature (l / T); softmax over the
survivors, 0 elsewhere. Temperature 0: one-hot at the argmax (lowest id on ties) of the biased,
penalized logits. Tolerance: each probability within 1e-6, and exactly the same zero entries (the
support is exact: random cases are kept only when the support does not change under 1e-6
perturbations of the logits and cut-offs).

**`gate`** — input `gate` (`"supnorm"`, `"halfrange"` or `"margin"`), `dtype` (`"float32"` or
`"float64"`), `margin`, and either `quantile` and `slack` (number, or null for the default
8 · spacing(quantile) in dtype) or, for the margin gate, `threshold`; output `admit` (boolean).
Supnorm/halfrange: admit iff fl(2 · fl(quantile + slack)) < margin, each operation rounded to dtype
(an overflow to infinity refuses); margin, quantile and slack must be values of dtype and quantile
≥ 0, else `{"error": true}`. Margin gate: admit iff margin > threshold. Exact.

**`conformal_index`** — input `n` (int ≥ 1), `q` (exact rational string in (0, 1)); output
`index` = ⌈(n+1)·q⌉ computed exactly, or null when it exceeds n (the layer never admits). Exact.

**`dequantize`** — input `ggml_type` (ggml's type id), `type_name`, `n_elements`, `raw_hex`;
output `bits` [n_elements]. Bit-exact with ggml's `dequantize_row_*`.

## Comparing

A response agrees with a case when: for `{"error": true}`, the implementation rejected the input;
otherwise every field of `expected` is present, the fields named in `tolerance` agree within it per
entry (same shape, same zero entries), and every other field is equal exactly: integers as JSON
integers (`2.0` is not a token id), booleans, strings and null as themselves, floats by value.
"""
