"""check-decoder counts no malformed answer: an engine's samples, greedy ids and logits are
validated before the law or the comparison sees them, and a malformed one FAILS the case with
its reason (never a pass: NumPy would index a negative id from the end, ``5.0`` would convert).

No model: the target law comes from a fixed logits table over V = 8 (every prefix the same row),
and the engines are small fakes (Python objects, and a stub program for the wire).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.check import CommandEngine, LawCase, check_greedy, check_law
from verispec.spec.external import ExternalError

V = 8
ROW = np.linspace(0.0, 1.4, V).astype(np.float32)  # a softmax with every id likely enough to be a cell
PARAMS = SamplingParams(temperature=1.0)
CASE = LawCase((1, 2), PARAMS, m=2)


class FixedLogits:
    source = "a fixed table"

    def __call__(self, prefix: tuple[int, ...]) -> Any:
        return ROW

    def batch_shape_noise(self, prefix: tuple[int, ...], prompt_length: int | None = None) -> float:
        return 0.0


class Answering:
    """An engine that samples correctly, then applies ``spoil`` to its answer."""

    def __init__(self, spoil: Any = None) -> None:
        self.spoil = spoil

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        p = np.exp(ROW - ROW.max())
        p /= p.sum()
        samples = [[int(t) for t in rng.choice(V, size=m, p=p)] for _ in range(n)]
        return self.spoil(samples) if self.spoil else samples

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> Any:
        ids = [V - 1] * max_tokens
        return self.spoil(ids) if self.spoil and speculative else ids


def set_item(sample: int, position: int, value: Any) -> Any:
    def spoil(samples: list[list[Any]]) -> list[list[Any]]:
        samples[sample % len(samples)][position] = value
        return samples

    return spoil


def test_the_correct_engine_passes() -> None:
    verdict = check_law(Answering(), FixedLogits(), CASE, alpha=1e-3, tv=0.2)
    assert verdict.passed, verdict.detail


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (set_item(12, 1, -3), "token -3 at sample 12, position 1"),
        (set_item(40, 0, V), f"token {V} at sample 40"),
        (set_item(3, 1, 5.0), "5.0 at sample 3"),
        (set_item(3, 1, "5"), "'5' at sample 3"),
        (set_item(3, 1, None), "None at sample 3"),
        (set_item(3, 1, True), "True at sample 3"),
        (set_item(3, 1, 10**400), "integer of"),
        (lambda s: s[:-1], "samples, asked for"),
        (lambda s: [*s[:-1], [0, 1, 2]], "3 tokens at sample"),
        (lambda s: [*s[:-1], []], "0 tokens at sample"),
    ],
)
def test_a_malformed_sample_fails_the_case_with_its_reason(spoil: Any, reason: str) -> None:
    verdict = check_law(Answering(spoil), FixedLogits(), CASE, alpha=1e-3, tv=0.2)
    assert not verdict.passed
    assert "malformed answer" in verdict.detail and reason in verdict.detail, verdict.detail
    assert len(verdict.detail) < 600


@pytest.mark.parametrize(
    ("spoil", "eog", "reason"),
    [
        # 2 of 16 tokens, no EOG: the plain output continues them, so it is judged as an unreported
        # EOG against plain's token at step 2 (spec/decoder/check.py::check_greedy): a BUG here
        (lambda ids: ids[:2], {0}, "plain 7 vs speculative (ended)"),
        (lambda ids: [*ids, 1], {0}, "answered 17 greedy tokens"),
        (lambda ids: [10**9, -5, 7] + ids[3:], {0}, "outside [0, 8)"),
        (lambda ids: None, {0}, "no list of ids"),
        (lambda ids: [], None, "answered 0 greedy tokens"),
    ],
)
def test_a_malformed_greedy_output_fails(spoil: Any, eog: Any, reason: str) -> None:
    verdict = check_greedy(Answering(spoil), FixedLogits(), (1, 2), 16, eog)
    assert not verdict.passed and reason in verdict.detail(), verdict.detail()


def test_a_greedy_output_may_stop_early_at_an_end_of_generation_id() -> None:
    verdict = check_greedy(Answering(lambda ids: [*ids[:3], 0]), FixedLogits(), (1, 2), 16, {0})
    assert verdict.divergence is not None and verdict.malformed is None  # counted (and it differs)


STUB = r"""
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    req = json.loads(line)
    op, inp = req["op"], req["input"]
    if op == "greedy":
        out = {} if mode == "no-ids" else {"ids": [1, 2]}
    elif op == "logits":
        out = {"logits": [0.5] * (7 if mode == "short-row" else 8)}
    else:
        out = {"samples": [[1, -3]] * inp["n"]}
    print(json.dumps({"id": req["id"], "output": out}), flush=True)
"""


@pytest.mark.parametrize(
    ("mode", "call", "reason"),
    [
        ("no-ids", lambda e: e.greedy([1], 16, True), "lacks its ids"),
        ("two-ids", lambda e: e.greedy([1], 16, True), "2 greedy tokens, asked for 16"),
        ("short-row", lambda e: e.logits([1]), "shape (7,), expected [8]"),
        ("negative", lambda e: e.sample([1], PARAMS, 2, 5, 0), "token -3 at sample 0, position 1"),
    ],
)
def test_the_wire_engine_refuses_malformed_answers(tmp_path: Path, mode: str, call: Any, reason: str) -> None:
    stub = tmp_path / "engine.py"
    stub.write_text(STUB)
    engine = CommandEngine(f"{sys.executable} {stub} {mode}", timeout=30, vocab=V, eog={0})
    try:
        with pytest.raises(ExternalError, match=reason.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            call(engine)
    finally:
        engine.close()
