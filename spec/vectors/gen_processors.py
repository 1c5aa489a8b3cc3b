"""Generators of the logits-level cases: the target law (logits + history + processor settings ->
probabilities) and the rows of a speculative step (target and draft logits -> p, q, mode).

The support (which ids survive top-k/top-p/min-p) must not hinge on rounding, so random cases are
kept only if it is stable under 1e-6 perturbations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import VerispecError
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.spec.pipeline import RowsRequest
from verispec.spec.vectors.draws import Item, draw
from verispec.spec.vectors.wire import Json, params_to_json, rows_request_to_json


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
        drafts.append(draw(rng, target_distribution(d_logits[i], context, dp)))
    if not _stable_support(t_logits[k], history + drafts, tp):
        return None
    request = RowsRequest(
        target_logits=t_logits,
        draft_logits=d_logits,
        history=tuple(history),
        drafts=tuple(drafts),
        target_params=tp,
        draft_params=dp,
    )
    return rows_request_to_json(request)


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
