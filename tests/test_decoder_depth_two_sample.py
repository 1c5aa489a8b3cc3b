"""Two-sample mode at depth (spec/decoder/depth/two_sample.py): speculation on vs plain, no law.

On the tiny synthetic GGUF of tests/test_decoder_depth.py (vocab 64, one layer, 32 wide) through
the mutant loop of spec/decoder/mutants.py (its plain generations: k = 0).

Alpha. The no-false-alarm tests (the three correct decoders of tests/test_decoder_depth.py must
PASS) share the ``decoder_depth_two_sample`` line of spec.statistics.ALPHA_BUDGET, a third each. The mutant tests run at
check-decoder's default alpha 1e-3 and the mode's default design (power 0.99 against TV 0.1 on
each feature's law): a mutant passing there is a miss of the design, not bad luck.

Cost. The pass tests must run every look, so it uses a weaker stated design (TV 0.5 on each
feature's law, 8 tokens); the mutants stop at their first rejecting look. The mode's full design
on 64 tokens is lab/measure/decoder_depth_two_sample.py (minutes; not part of the suite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tests.support.depth import CORRECT, EOG, PROMPT, WITH_PROCESSORS, Loop, case, model  # noqa: F401 - model: the tiny model fixture
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.law import DepthCase
from verispec.spec.decoder.depth.two_sample import (
    ENDED,
    arm_size,
    bins_of,
    check_two_sample_depth,
    features,
    look_alphas,
    looked_tests,
)
from verispec.spec.decoder.mutants import DEPTH_MUTANTS, MUTANT_BUGS, DecoderBugs
from verispec.spec.statistics import ALPHA_BUDGET, POWER, power_of

PASS_ALPHA = ALPHA_BUDGET["decoder_depth_two_sample"]
PRODUCT_ALPHA = 1e-3


def test_features_of_one_generation() -> None:
    """The token (or ENDED) and repeat flag at each drawn position, and the stopping bin."""
    the_case = DepthCase((7, 8), SamplingParams(repeat_last_n=2), 12, frozenset({EOG}))
    ids = [7, 3, 3, 9, EOG]  # stops at position 4 (bin [4, 8))
    f = features(ids, the_case, [0, 1, 2, 3, 9])
    assert f.tokens == (7, 3, 3, 9, ENDED)
    # 7 repeats the prompt's 7 (window 2); 3 at 1: new; 3 at 2: repeats; 9 at 3: new; position 9 ended
    assert f.repeats == (1, 0, 1, 0, ENDED)
    assert f.stop == 3
    assert features([5] * 12, the_case, [0, 1, 2, 4, 8]).stop == len(bins_of(12))  # reached max_tokens
    assert bins_of(12) == [(0, 1), (1, 2), (2, 4), (4, 8), (8, 12)]


def test_arm_size_is_the_smallest_powered_multiple() -> None:
    """N per arm reaches power 0.99 at N/2 one-sample draws, and N - 50 does not."""
    for df, level, tv in ((4, 1e-5, 0.1), (30, 1e-9, 0.4), (12, 1e-4, 0.2)):
        n = arm_size(df, level, tv)
        assert n % 50 == 0 and power_of(n // 2, df, level, tv) >= POWER
        assert n == 50 or power_of((n - 50) // 2, df, level, tv) < POWER


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_decoders_pass(name: str, model: Model) -> None:
    """The bug-free loop, a greedy draft (one-hot q) and sample-and-match verification: every
    look, alpha from the budget (a third each); a weaker stated design (TV 0.5 on each feature's
    law, 8 tokens, cells of pilot mass >= 0.05) for cost."""
    the_case = replace(case(WITH_PROCESSORS), max_tokens=8)
    engine = Loop(model, **CORRECT[name])  # type: ignore[arg-type]
    verdict = check_two_sample_depth(engine, the_case, alpha=PASS_ALPHA / 3, tv=0.5, pilot=100, min_mass=0.05)
    print(f"{name}: {verdict.state} {verdict.detail} N={verdict.n_per_arm}/arm power={verdict.power:.4f}")
    assert verdict.passed, f"{verdict.where}: {verdict.detail}"
    assert verdict.generations >= verdict.n_per_arm and verdict.power >= POWER


# the mutants a two-sample test can see (and where): penalties and min_tokens move the token and
# repeat laws and the stopping time, the EOS one emits past an EOG, the stream one repeats pairs,
# a rollback that keeps a rejected draft's K,V changes the token law
VISIBLE = {
    "penalty_one_token_a_cycle": DEPTH_MUTANTS,
    "min_tokens_counted_in_cycles": DEPTH_MUTANTS,
    "eos_in_span_at_max_tokens": DEPTH_MUTANTS,
    "requests_share_one_stream": DEPTH_MUTANTS,
    "rollback_off_by_one": MUTANT_BUGS,
}


@pytest.mark.parametrize("name", sorted(VISIBLE))
def test_mutants_a_two_sample_test_can_see_are_rejected(name: str, model: Model) -> None:
    """The mode's default design (TV 0.1 on each feature's law, alpha 1e-3), 12 tokens (8 for the
    EOS-at-max_tokens mutant, whose bug needs a span crossing the cap); min_tokens 6 and a
    penalty window of 32, so each bug has fired by position 12."""
    bugs: DecoderBugs = VISIBLE[name][name][1]
    the_case = replace(case(WITH_PROCESSORS), max_tokens=12)
    if name == "eos_in_span_at_max_tokens":
        the_case = replace(the_case, max_tokens=8, min_tokens=0)
    verdict = check_two_sample_depth(Loop(model, bugs), the_case, alpha=PRODUCT_ALPHA, pilot=50)
    print(f"{name}: {verdict.state} after {verdict.generations} generations per arm: {verdict.where}")
    assert verdict.state == "failed", f"{name} was not rejected: {verdict.detail}"
    assert verdict.where


class NoPlain:
    """A broken plain path: the pilot fails, and so does the case."""

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[Any]:
        return [[3] * max_tokens] * n

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[Any]:
        return [[3, 4]] * (n - 1)


def test_an_engine_answering_short_fails_the_case() -> None:
    verdict = check_two_sample_depth(
        NoPlain(), DepthCase(PROMPT, WITH_PROCESSORS, 8, frozenset({EOG})), alpha=PRODUCT_ALPHA
    )
    assert verdict.state == "failed" and "the pilot failed" in verdict.where and verdict.exit_status == 1


def test_a_budget_short_of_the_design_is_inconclusive(model: Model) -> None:
    """Exit status 3: the budget ends before N, nothing rejected (nothing is drawn past the pilot)."""
    the_case = replace(case(WITH_PROCESSORS), max_tokens=8)
    verdict = check_two_sample_depth(Loop(model), the_case, alpha=PRODUCT_ALPHA, pilot=20, budget_s=1e-9, block=10)
    assert verdict.state == "inconclusive" and verdict.exit_status == 3 and verdict.power < POWER


def test_look_alphas_spend_alpha() -> None:
    assert sum(look_alphas(1e-3)) == pytest.approx(1e-3, rel=1e-12)
    assert looked_tests(DepthCase(PROMPT, WITH_PROCESSORS, 64, frozenset())) == 2 * 7 + 2
    assert np.isclose(look_alphas(1e-3)[-1], 5e-4)
