"""check-decoder's greedy mode when the speculative and plain outputs have different lengths.

One output a strict prefix of the other is where an end-of-generation token inside an accepted
span shows: the plain decode stops at the EOG, the speculative one emits the rest of its span (or
the reverse). Building the "differ at step" message used to index past the shorter output
(IndexError); these tests pin the verdict for each way two outputs can part at an ending. No model:
a stub engine returns fixed outputs, a stub target gives fixed logits, so every verdict is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from verispec.spec.decoder.check import GreedyVerdict, check_greedy
from verispec.spec.decoder.first_tokens import F32

EOG = 2
V = 10


@dataclass(frozen=True)
class FixedOutputs:
    """A GreedyEngine whose plain and speculative outputs are given."""

    plain: tuple[int, ...]
    speculative: tuple[int, ...]

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        return list(self.speculative if speculative else self.plain)


@dataclass
class FixedRow:
    """A Logits source: every prefix gets ``row``; batch-shape noise ``noise``."""

    row: tuple[float, ...]
    noise: float = 0.01
    source: str = "a fixed row"

    def __call__(self, prefix: tuple[int, ...]) -> F32:
        return np.asarray(self.row, dtype=np.float32)

    def batch_shape_noise(self, prefix: tuple[int, ...], prompt_length: int | None = None) -> float:
        return self.noise


def row_with(**logits: float) -> tuple[float, ...]:
    """A row of zeros with the named ids set (``t7=1.0`` sets id 7)."""
    row = [0.0] * V
    for name, value in logits.items():
        row[int(name[1:])] = value
    return tuple(row)


PROMPT = (1, 3)
FLAT = FixedRow(row_with(t5=3.0, t7=1.0))


def judge(
    plain: Sequence[int], speculative: Sequence[int], max_tokens: int = 8, target: FixedRow = FLAT
) -> GreedyVerdict:
    engine = FixedOutputs(tuple(plain), tuple(speculative))
    return check_greedy(engine, target, PROMPT, max_tokens, frozenset({EOG}))


def test_speculative_runs_past_an_eog_inside_its_span() -> None:
    """Plain stops at the EOG; the speculative decoder emitted its whole accepted span past it."""
    verdict = judge([5, EOG], [5, EOG, 7, 8], max_tokens=4)  # each output well formed on its own
    assert verdict.divergence == 2 and not verdict.passed
    assert "past the end-of-generation id 2" in verdict.detail()
    assert "(ended)" in verdict.detail()  # plain has no token at step 2: no IndexError


def test_plain_runs_past_an_eog_the_speculative_decoder_honours() -> None:
    verdict = judge([5, EOG, 7], [5, EOG], max_tokens=3)
    assert verdict.divergence == 2 and not verdict.passed
    assert "speculative (ended)" in verdict.detail()


def test_the_longer_output_exceeds_max_tokens() -> None:
    """An accepted span crossing max_tokens emitted whole: more ids than asked is a malformed answer."""
    verdict = judge([5, 7, 5], [5, 7, 5, 7, 5], max_tokens=3)
    assert not verdict.passed and "answered 5 greedy tokens, asked for 3" in verdict.detail()


def test_an_unreported_eog_is_judged_as_a_near_tie() -> None:
    """The shorter output stopped before max_tokens without reporting an EOG: it ended on one it does
    not report, so the step is EOG against the longer output's token, a near-tie exactly when their
    logits are within twice the batch-shape noise (0.01 here)."""
    close = FixedRow(row_with(t7=1.0, t2=0.995))
    tie = judge([5], [5, 7], max_tokens=2, target=close)
    assert tie.passed and tie.near_tie and tie.margin == pytest.approx(0.005, abs=1e-6)  # float32 row
    far = FixedRow(row_with(t7=1.0, t2=-3.0))
    bug = judge([5], [5, 7], max_tokens=2, target=far)
    assert not bug.passed and bug.margin == pytest.approx(4.0) and "BUG" in bug.detail()


def test_an_early_stop_with_no_eog_known_is_a_bug() -> None:
    engine = FixedOutputs((5,), (5, 7))
    verdict = check_greedy(engine, FLAT, PROMPT, 8)
    assert not verdict.passed and "not at an end-of-generation id" in verdict.detail()


def test_a_differing_token_before_the_ending_keeps_the_margin_rule() -> None:
    """Lengths differ but a token differs first: the ordinary top-1 margin verdict (3.0 - 1.0 = 2.0)."""
    verdict = judge([5, EOG], [7, 5, EOG])
    assert verdict.divergence == 0 and verdict.margin == pytest.approx(2.0) and not verdict.passed
    assert "plain 5 vs speculative 7" in verdict.detail()
