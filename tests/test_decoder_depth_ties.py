"""Cut-edge near-ties under ``--target-law engine-logits`` (spec/decoder/depth/ties.py).

A fake engine of known numerics noise: its logits after a prefix are fixed random numbers plus
sigma times a random sign per token, the signs depending on HOW the row was computed (one pass,
plain-fed, or the generation's own shape), like llama.cpp's batch-shape dependence. So the
engine's measured batch-shape noise is 2 sigma, the generation's row differs from the target row
by at most 2 sigma per logit, and a token inside the generation's top-k that is outside the
target row's is at most 4 sigma = twice the noise below the target's cut: a near-tie. A top-k
off by one draws the (k+1)-th token, typically further below the cut: a failure.

Alpha. The noisy correct engine must pass: it takes a quarter of the ``decoder_depth`` line of
spec.statistics.ALPHA_BUDGET (shared with the three correct decoders of tests/test_decoder_depth.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.check import EngineLogits
from verispec.spec.decoder.depth.law import DepthCase, case_law, check_depth
from verispec.spec.decoder.depth.ties import PlainFedRows, cut_edge_margin
from verispec.spec.decoder.laws import default as default_law
from verispec.spec.statistics import ALPHA_BUDGET

VOCAB = 32
EOG = 2
SIGMA = 0.01
PARAMS = SamplingParams(temperature=1.0, top_k=8)
CASE = DepthCase((1, 5, 9), PARAMS, max_tokens=12, eog=frozenset({EOG}))
PASS_ALPHA = ALPHA_BUDGET["decoder_depth"] / 4


def true_logits(prefix: Sequence[int]) -> Any:
    logits = np.random.default_rng([11, *prefix]).normal(0.0, 1.0, VOCAB)
    logits[EOG] -= 2.0  # generations run most of their length
    return logits


def shape_noise(prefix: Sequence[int], shape: int) -> Any:
    """sigma times a random sign per token, fixed by the prefix and the batch shape."""
    return SIGMA * np.random.default_rng([shape, *prefix]).choice([-1.0, 1.0], VOCAB)


ONE_PASS, PLAIN_FED, GENERATION = 1, 2, 3


@dataclass
class NoisyEngine:
    """Samples each token from the case's law of its OWN row (yet another batch shape);
    ``extra_k``: a top-k off by that much."""

    extra_k: int = 0

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        law = case_law(replace(CASE, params=replace(params, top_k=params.top_k + self.extra_k)))
        out = []
        for i in range(n):
            rng = np.random.default_rng([seed, i])
            ids: list[int] = []
            while len(ids) < max_tokens and (not ids or ids[-1] != EOG):
                prefix = [*prompt_ids, *ids]
                p = np.asarray(law(true_logits(prefix) + shape_noise(prefix, GENERATION), tuple(prompt_ids), ids))
                ids.append(int(rng.choice(VOCAB, p=p / p.sum())))
            out.append(ids)
        return out

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
        shape = ONE_PASS if split_at is None else PLAIN_FED
        return [float(v) for v in true_logits(prefix_ids) + shape_noise(prefix_ids, shape)]


def test_the_margin_is_the_logit_gap_to_the_cut() -> None:
    """top-k 2 of logits (3, 2, 1.5, 1): token 2 needs 0.5 more, token 3 needs 1.0 (bisection to
    limit / 2^40: 1e-9 is loose); beyond the limit, or banned, there is no near-tie."""
    law = default_law.profile(
        default_law.Params(SamplingParams(temperature=1.0, top_k=2, logit_bias={1: 0.0}), frozenset(), 0)
    )
    logits = np.array([3.0, 2.0, 1.5, 1.0])
    assert cut_edge_margin(law, logits, (), [], 2, 2.0) == pytest.approx(0.5, abs=1e-9)
    assert cut_edge_margin(law, logits, (), [], 3, 2.0) == pytest.approx(1.0, abs=1e-9)
    assert cut_edge_margin(law, logits, (), [], 3, 0.9) is None
    banned = default_law.profile(
        default_law.Params(SamplingParams(temperature=1.0, top_k=2, logit_bias={3: -math.inf}), frozenset(), 0)
    )
    assert cut_edge_margin(banned, logits, (), [], 3, 100.0) is None


def test_plain_fed_rows_ask_for_the_prompt_then_one_token_at_a_time() -> None:
    calls: list[tuple[int, int | None]] = []

    class Spy(NoisyEngine):
        def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
            calls.append((len(prefix_ids), split_at))
            return super().logits(prefix_ids, split_at)

    rows = PlainFedRows(EngineLogits(Spy()))((1, 5, 9, 4, 6, 7), 3)
    assert rows.shape == (3, VOCAB)
    assert calls == [(3, None), (4, 3), (5, 3)]


def test_a_correct_engine_of_noisy_numerics_passes_with_near_ties_reported() -> None:
    """Against its own plain-fed rows with the near-tie rule: passes every look (a small stated
    design: power 0.99 against TV 0.3 on every position), reporting its near-ties, each with a
    margin within twice the measured noise (2 sigma). Without the rule (the same rows, no noise
    to measure) the same engine fails outright on an impossible token: the false alarm this removes."""
    engine = NoisyEngine()
    verdict = check_depth(
        engine, PlainFedRows(EngineLogits(engine)), CASE, alpha=PASS_ALPHA, tv=0.3, fraction=1.0, pilot=8
    )
    print(verdict.state, verdict.detail)
    assert verdict.passed, f"{verdict.where}: {verdict.detail}"
    assert len(verdict.looks) == 7
    assert verdict.near_ties and "numerics near-ties at a cut edge" in verdict.detail
    for _, tie in verdict.near_ties:  # rows travel as float32: |logit| < 8 rounds by <= 4.8e-7, a difference by <= 1e-6
        assert tie.noise == pytest.approx(2 * SIGMA, abs=1e-6) and 0.0 < tie.margin <= 2 * tie.noise
    plain_fed = PlainFedRows(EngineLogits(engine))
    strict = check_depth(engine, lambda seq, n: plain_fed(seq, n), CASE, alpha=1e-3, tv=0.3, fraction=1.0, pilot=8)
    assert strict.state == "failed" and "target probability 0" in strict.where


def test_a_top_k_off_by_one_fails_beyond_the_noise() -> None:
    """top-k 9 where the law says 8, on the same noisy numerics: its 9th token is mostly further
    than twice the noise below the cut, so it fails outright, naming the noise."""
    engine = NoisyEngine(extra_k=1)
    verdict = check_depth(engine, PlainFedRows(EngineLogits(engine)), CASE, alpha=1e-3, tv=0.3, fraction=1.0, pilot=8)
    print(verdict.state, verdict.where)
    assert verdict.state == "failed"
    assert "target probability 0, beyond twice the engine's own batch-shape noise" in verdict.where
