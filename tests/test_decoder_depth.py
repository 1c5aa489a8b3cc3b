"""The depth test (spec/decoder/depth/law.py): every emitted token's law over whole generations.

On a tiny synthetic GGUF (vocab 64, one layer, 32 wide: tests/conftest.py's writer) through our
reference forward. What each test can detect is said in its docstring.

Alpha. The no-false-alarm tests (the three correct decoders must PASS) share the
``decoder_depth`` line of spec.statistics.ALPHA_BUDGET (1e-8, a quarter each; the fourth quarter is
tests/test_decoder_depth_ties.py's noisy-numerics engine). The mutant tests
run at check-decoder's default alpha 1e-3 with the product's design (power 0.99 against TV 0.05
on 10% of positions): a mutant passing there is a miss of the design, not bad luck.

Cost. A correct decoder must run to the final look, so the pass tests use a weaker stated design
(TV 0.1 on EVERY position: N / 400 of the product's); the full design's pass and its rejection
of exactly the design deviation are the measured run of lab/measure/decoder_depth.py. The
mutants stop at their first rejecting block or look (blocks of 20 generations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.support.depth import (
    CORRECT,
    EOG,
    FULL_SUPPORT,
    MAX_TOKENS,
    MIN_TOKENS,
    PASS_ALPHA,
    PRODUCT_ALPHA,
    PROMPT,
    WITH_PROCESSORS,
    Loop,
    case,
    model,  # noqa: F401 - the tiny model fixture
    run_mutant,
)
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams, target_distribution
from verispec.spec.decoder.depth.law import (
    Generation,
    check_depth,
    events_of,
    pilot_design,
    position_params,
    reference_rows,
    score,
    structure_error,
)
from verispec.spec.decoder.depth.power import beta_at_tv, simulate_power, support_sorted, tempered, tv_of
from verispec.spec.decoder.mutants import DEPTH_MUTANTS, DesignDeviation
from verispec.spec.decoder.prefix_rows import PathRows
from verispec.spec.statistics import POWER

# --- the per-token statistics, exactly -------------------------------------------------------------


def test_pit_interval_and_log_score_are_exact(model: Model) -> None:
    """For one generation, each token's PIT lies in its interval [F(x-1), F(x-1) + p(x)) of the
    descending-probability order, and its log-score term is log p(x) + H(p), recomputed here from
    THE target law on the same teacher-forced float32 rows (so the only difference is float64
    summation order over <= 64 terms: 1e-12 covers it with orders of magnitude to spare)."""
    the_case = case(FULL_SUPPORT)
    ids = [int(t) for t in Loop(model).generate(PROMPT, FULL_SUPPORT, MAX_TOKENS, 1, 3, MIN_TOKENS)[0]["ids"]]
    scored = score(reference_rows(model), the_case, ids, np.random.default_rng(0))
    assert not scored.broken
    rows = reference_rows(model)(PROMPT + tuple(ids), len(PROMPT))  # [T, V]
    for t, x in enumerate(ids):
        history = list(PROMPT) + ids[:t]
        p = target_distribution(rows[t], history, position_params(the_case, t))
        order = sorted(range(p.shape[0]), key=lambda i: (-p[i], i))
        before = math.fsum(p[i] for i in order[: order.index(x)])
        assert before - 1e-12 <= scored.pit[t] < before + p[x] + 1e-12  # float64 sums of <= 64 terms
        live = p[p > 0]
        assert scored.log_score[t] == pytest.approx(math.log(p[x]) - float(live @ np.log(live)), abs=1e-12)
        assert scored.eog_mass[t] == pytest.approx(p[EOG], abs=1e-15)
        if t < MIN_TOKENS:
            assert p[EOG] == 0.0


def test_structure_errors() -> None:
    """Deterministic failures: past max_tokens, tokens after an EOG, a stop without one."""
    the_case = case(FULL_SUPPORT)
    assert structure_error([3] * MAX_TOKENS, the_case) == ""
    assert structure_error([3, EOG], the_case) == ""
    assert "more than max_tokens" in structure_error([3] * (MAX_TOKENS + 1), the_case)
    assert "after the end-of-generation id 2 at position 1" in structure_error([3, EOG, 4], the_case)
    assert "without an end-of-generation id" in structure_error([3, 4], the_case)


def test_cycle_events_are_fixed_before_the_token() -> None:
    """(drafted, accepted) per cycle -> the previous cycle's outcome and the index in the cycle."""
    gen = Generation((5, 6, 7, 8, 9, 10), ((2, 2), (2, 0), (2, 1)))
    assert events_of(gen) == ["start/1st", "start/2nd", "start/3rd", "full/1st", "rejection/1st", "rejection/2nd"]
    assert events_of(Generation((5, 6), ((2, 3),))) is None  # accepted > drafted: not a bin
    assert events_of(Generation((5, 6, 7), ((0, 0),))) is None  # cycles shorter than the ids


# --- the power design ------------------------------------------------------------------------------


def test_tempering_reaches_the_design_tv() -> None:
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    for sharpen in (True, False):
        q = tempered(p, beta_at_tv(p, 0.05, sharpen))
        assert tv_of(p, q) == pytest.approx(0.05, abs=1e-9)
        assert (q[0] > p[0]) == sharpen  # sharpening moves mass to the head


def test_the_design_reaches_power_099_by_simulation(model: Model) -> None:
    """The design's N (normal approximation, spec/decoder/depth/power.py) against TV 0.05 on 10%
    of positions, checked by simulating the two overall z-tests on the pilot's own rows: 200
    replications each way at N, fixed seeds. The assertion allows 3 binomial standard errors
    below 0.99 (0.97): a design whose real power is 0.93 or less fails it (P < 0.01). And at N / 4 the power
    is far lower: N is not padded by a large factor."""
    engine = Loop(model)
    plan, _ = pilot_design(engine, reference_rows(model), case(FULL_SUPPORT), PRODUCT_ALPHA, 0.05, 0.1, 7, 16)
    rows = _pilot_rows(engine, model)
    print(f"design: {plan.tokens} tokens for power {POWER} against TV 0.05 on 10% of positions")
    for sharpen in (True, False):
        at_n = simulate_power(rows, plan, plan.tokens, 200, seed=11 + sharpen, sharpen=sharpen)
        at_quarter = simulate_power(rows, plan, plan.tokens // 4, 50, seed=13 + sharpen, sharpen=sharpen)
        print(f"sharpen={sharpen}: simulated power {at_n:.4f} at N, {at_quarter:.3f} at N/4")
        assert at_n >= 0.97
        assert at_quarter < 0.8


def _pilot_rows(engine: Loop, model: Model) -> list[Any]:
    the_case = case(FULL_SUPPORT)
    rng = np.random.default_rng(5)
    rows: list[Any] = []
    for gen in engine.generate(PROMPT, FULL_SUPPORT, MAX_TOKENS, 16, 8, MIN_TOKENS):
        rows.extend(score(reference_rows(model), the_case, gen["ids"], rng, keep_rows=True).rows)
    return rows


# --- correct decoders pass --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_decoders_pass(name: str, model: Model) -> None:
    """Each runs every look and passes at alpha = 1e-8 / 4; its design: power 0.99 against TV
    0.1 on every position (a weaker stated design than the product's, for cost)."""
    engine = Loop(model, **CORRECT[name])  # type: ignore[arg-type]
    verdict = check_depth(
        engine, reference_rows(model), case(WITH_PROCESSORS), alpha=PASS_ALPHA, tv=0.1, fraction=1.0, pilot=16
    )
    print(f"{name}: {verdict.state} {verdict.detail} power={verdict.power:.4f}")
    assert verdict.passed, f"{verdict.where}: {verdict.detail}"
    assert verdict.power >= POWER and len(verdict.looks) == 7


# --- the bug classes are rejected -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEPTH_MUTANTS))
def test_every_depth_mutant_is_rejected_with_processors_on(name: str, model: Model) -> None:
    """The product's design (TV 0.05 on 10% of positions, alpha 1e-3); with top-k, min-p, a ban
    and a penalty window on, most mutants emit a token the target cannot (a deterministic catch),
    the stream-sharing one repeats a generation, the EOS one emits past an EOG."""
    verdict = run_mutant(model, name, WITH_PROCESSORS)
    print(f"{name}: {verdict.state} after {verdict.generations} generations: {verdict.where}")
    assert verdict.state == "failed", f"{name} ({DEPTH_MUTANTS[name][0]}) was not rejected: {verdict.detail}"
    assert verdict.design.power >= POWER


# (cache_position_per_cycle is rejected here too, at the first look: log-score z = -46 on 3,900
# tokens; left out of `make test` for its cost, ~25 s)
STATISTICAL = ("bonus_kv_dropped", "min_tokens_counted_in_cycles", "min_p_logit_bias_skipped_on_verified_rows")


@pytest.mark.parametrize("name", STATISTICAL)
def test_mutants_are_rejected_by_the_statistics_on_full_support(name: str, model: Model) -> None:
    """Every token possible (no top-k, no min-p, no ban): no structural catch is left, the law-at-
    depth statistics must reject, and the report says where (a position bin or a cycle event)."""
    verdict = run_mutant(model, name, FULL_SUPPORT)
    print(f"{name}: {verdict.state} after {verdict.tokens} tokens: {verdict.where}")
    assert verdict.state == "failed" and "z=" in verdict.where, verdict.detail
    assert "positions [" in verdict.where or "token of a cycle" in verdict.where


def test_the_design_deviation_is_rejected_on_every_position(model: Model) -> None:
    """DesignDeviation at TV 0.05 on EVERY position, against the matching design (fraction 1):
    the wiring from decoder to verdict sees exactly the deviation the design is built on (the 10%
    case at full N is the measured run)."""
    engine = Fresh(model, fraction=1.0)
    verdict = check_depth(
        engine, reference_rows(model), case(FULL_SUPPORT), alpha=PRODUCT_ALPHA, fraction=1.0, pilot=16
    )
    print(f"design deviation on every position: {verdict.state} {verdict.where}")
    assert verdict.state == "failed"


@dataclass
class Fresh:
    model: Model
    fraction: float

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        deviation = DesignDeviation(PathRows(self.model), fraction=self.fraction, eog=frozenset({EOG}))
        return deviation.generate(prompt_ids, params, max_tokens, n, seed, min_tokens)


def test_a_budget_short_of_the_design_is_inconclusive(model: Model) -> None:
    """Exit status 3: the budget ends before the design's tokens, nothing rejected."""
    verdict = check_depth(
        Loop(model),
        reference_rows(model),
        case(WITH_PROCESSORS),
        alpha=PRODUCT_ALPHA,
        max_generations=20,
        pilot=8,
        block=20,
    )
    assert verdict.state == "inconclusive" and verdict.exit_status == 3 and verdict.power < POWER


def test_support_sorted_drops_zeros() -> None:
    assert list(support_sorted(np.array([0.0, 0.3, 0.7]))) == [0.7, 0.3]


def test_reported_logprobs_are_checked_exactly(model: Model) -> None:
    """The bug-free loop reports each token's log p from its verifier rows (our reference forward
    at other batch shapes: within LOGPROB_TOL of the teacher-forced law), and passes that check;
    the llama.cpp #27972 mutant reports 0.0 when speculating and fails on its first generation."""
    from verispec.spec.decoder.depth.law import as_generation, logprob_error

    the_case = case(WITH_PROCESSORS)
    rng = np.random.default_rng(0)
    for raw in Loop(model, logprobs=True).generate(PROMPT, WITH_PROCESSORS, MAX_TOKENS, 5, 1, MIN_TOKENS):
        gen = as_generation(raw)
        assert (
            gen.logprobs is not None
            and logprob_error(gen, score(reference_rows(model), the_case, gen.ids, rng), 1e-3) == ""
        )
    verdict = run_mutant(model, "logprobs_zero_when_speculating", WITH_PROCESSORS)
    assert verdict.state == "failed" and "reported logprob 0" in verdict.where and verdict.generations <= 20


class Broken:
    """An engine that answers with something that is not a generation."""

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[Any]:
        return [{"tokens": [1, 2]}] * n


def test_an_engine_answering_garbage_fails_the_case(model: Model) -> None:
    verdict = check_depth(Broken(), reference_rows(model), case(FULL_SUPPORT), alpha=PRODUCT_ALPHA, pilot=4)
    assert verdict.state == "failed" and "the pilot failed" in verdict.where and verdict.power == 0.0
