"""Reported cycles that cannot be the generation's (a cycle accepting more than it drafted, cycles
that stop short of the ids or run past them) fail the case as a malformed answer, named, instead
of being dropped with their cycle-event bins. A correct decoder's own cycles keep passing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.depth import FULL_SUPPORT, PRODUCT_ALPHA, Loop, case, model  # noqa: F401 - model: the tiny model fixture
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import Generation, check_depth, cycles_error, reference_rows


@pytest.mark.parametrize(
    "cycles, why",
    [
        (((1, 3),), "cycle 0 reports 3 accepted of 1 drafted"),
        (((2, -1),), "cycle 0 reports -1 accepted"),
        (((0, 0),), "emit 1 tokens, which do not end with its 3 tokens"),
        (((2, 2), (1, 0)), "emit 4 tokens, which do not end with its 3 tokens"),
    ],
)
def test_inconsistent_cycles_are_named(cycles: tuple[tuple[int, int], ...], why: str) -> None:
    assert why in cycles_error(Generation((5, 6, 7), cycles))


def test_consistent_cycles_are_accepted() -> None:
    assert cycles_error(Generation((5, 6, 7), ((2, 1), (2, 2)))) == ""  # the last cycle cut after one token
    assert cycles_error(Generation((5, 6, 7), None)) == ""


@dataclass
class LyingCycles:
    """A correct decoder whose every generation reports one cycle that accepts 9 of 1 drafted."""

    inner: Loop

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[dict[str, Any]]:
        return [
            dict(g, cycles=[[1, 9]]) for g in self.inner.generate(prompt_ids, params, max_tokens, n, seed, min_tokens)
        ]


def test_a_decoder_reporting_impossible_cycles_fails(model: Model) -> None:  # noqa: F811
    verdict = check_depth(
        LyingCycles(Loop(model)),
        reference_rows(model),
        case(FULL_SUPPORT),
        alpha=PRODUCT_ALPHA,
        pilot=4,
        max_generations=8,
    )
    assert verdict.state == "failed" and "cycle 0 reports 9 accepted of 1 drafted" in verdict.where
