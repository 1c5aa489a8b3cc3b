"""The gate at LLM scale: LLM-shaped and real rows, exact probes at full V with two
separate verdicts, stratified statistics with stated power, and the LLM-scale mutants."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.reference.speculative import PROB_TOLERANCE, verify_sampled, verify_sampled_batch
from verispec.spec import full_vocab, mutants, strata
from verispec.spec.llm_properties import gate_cases
from verispec.spec.llm_rows import TAIL, VOCABS, default_cases, llm_case, real_cases
from verispec.spec.properties import run_properties
from verispec.spec.statistics import ALPHA_BUDGET, POWER, PROPERTY_SEED, SUITE_ALPHA, power_of, required_sample_size

BY_NAME = {m.name: m for m in mutants.catalogue()}
SEED = PROPERTY_SEED  # the property runner's default seed


# -----------------------------------------------------------------------------------------------
# rows


def test_default_cases_cover_every_vocab_size_and_k_up_to_8() -> None:
    cases = default_cases()
    assert {c.vocab for c in cases} == set(VOCABS)
    assert max(c.k for c in cases) == 8
    for case in cases:
        assert np.all(case.p >= 0) and np.all(case.q >= 0)
        # rows are normalized by one division: |sum - 1| <= V ulps, far inside the contract's 1e-6
        assert np.all(np.abs(case.p.sum(axis=1) - 1) <= case.vocab * 2.0**-52 + 1e-15)
        assert np.all(np.abs(case.q.sum(axis=1) - 1) <= PROB_TOLERANCE)
        assert all(case.q[i, x] > 0 for i, x in enumerate(case.drafts))


def test_shapes_put_their_edge_in_the_row() -> None:
    seen = set()
    for vocab in (4099, 32000):
        for index in range(6):
            case = llm_case(7, vocab, 6, index, draft_kind="near")
            for i, x in enumerate(case.drafts):
                p, q = case.p[i], case.q[i]
                residual = np.maximum(p - q, 0)
                if q[x] == 2e-4:  # tail_draft
                    assert q[x] < TAIL and p[x] / q[x] > 1
                    seen.add("tail_draft")
                if x == vocab - 1:  # last_id
                    assert p[x] > q[x] > 0.05
                    seen.add("last_id")
                if residual.sum() > 0 and residual[residual < TAIL].sum() > 0.5 * residual.sum():
                    seen.add("residual_tail")
                if np.count_nonzero(p != q) <= 2:
                    seen.add("mostly_equal")
                top2 = np.sort(p)[-2:]
                if top2[0] == top2[1] > 0:
                    seen.add("argmax_tie")
    assert seen >= {"tail_draft", "last_id", "residual_tail", "mostly_equal", "argmax_tie"}


def test_real_rows_load_without_the_models() -> None:
    cases = real_cases()
    assert {c.vocab for c in cases} == {49152, 262144}
    for case in cases:
        assert "real" in case.tags
        assert np.all(np.abs(case.p.sum(axis=1) - 1) <= PROB_TOLERANCE)
        assert all(case.q[i, x] > 0 for i, x in enumerate(case.drafts))


# -----------------------------------------------------------------------------------------------
# exact probes at full V: two verdicts


def test_reference_passes_both_full_vocab_verdicts() -> None:
    verdicts = full_vocab.judge(verify_sampled_batch, gate_cases(SEED), SEED)
    assert verdicts.protocol == [] and verdicts.law == [] and verdicts.errors == []
    assert verdicts.not_judged == []  # the reference's draw is monotone in u: every path judged
    assert verdicts.cases == len(gate_cases(SEED)) and verdicts.probes > 10_000


def test_protocol_points_are_in_their_cells() -> None:
    """The probe uniforms hit the protocol's cells: low, middle, high of each probed token."""
    case = llm_case(3, 4099, 2, 0)
    paths = full_vocab.paths_of(case)
    probes = full_vocab.case_probes(case, paths, 1)
    _, token = full_vocab.protocol_verdicts(paths, probes)
    for j in range(case.k + 1):
        c = paths.cumsum[j]
        tokens = np.flatnonzero(paths.weights[j] > 0)[:50]
        u = full_vocab.draw_points(c, tokens)
        got = np.searchsorted(c, u * c[-1], side="right")
        assert set(got.tolist()) <= set(tokens.tolist())
    assert token.shape[0] == probes.shape[0]


# lossless but off the protocol: must fail the protocol verdict and NEVER the law verdict
PROTOCOL_ONLY = (
    "reversed_scan_large_vocab",
    "total_by_pairwise_sum",
    "acceptance_by_division",
    "searchsorted_side_left",
)
# change the law at LLM scale (and pass every toy-V property except where noted in spec.mutants)
LAW_CHANGING = (
    "q_tail_underflow",
    "float16_probabilities",
    "residual_below_eps_dropped",
    "residual_truncated_to_top_1024",
    "uniform_buffer_of_four",
    "last_id_never_drawn",
    "float32_cumsum_in_draw",
)
CHEAP = ("reversed_scan_large_vocab", "q_tail_underflow")


def _full_vocab(name: str) -> dict[str, bool]:
    m = BY_NAME[name]
    results = run_properties(m.verifier, m.batch, m.pipeline, only=["full_vocab_protocol", "full_vocab_law"])
    return {r.name: r.passed for r in results}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in CHEAP else pytest.mark.slow) for n in PROTOCOL_ONLY])
def test_lossless_but_not_portable_is_never_law_bias(name: str) -> None:
    assert _full_vocab(name) == {"full_vocab_protocol": False, "full_vocab_law": True}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in CHEAP else pytest.mark.slow) for n in LAW_CHANGING])
def test_law_changing_mutants_fail_the_law_verdict(name: str) -> None:
    assert _full_vocab(name)["full_vocab_law"] is False


# -----------------------------------------------------------------------------------------------
# stratified statistics


STRATA_TESTS = ("stat_strata_tail_v4099", "stat_strata_deep_k8", "stat_strata_tail_v262144")


@pytest.mark.parametrize("name", STRATA_TESTS)
def test_strata_design_power_and_budget(name: str) -> None:
    p, q = strata.rows_for(name)
    law = strata.cell_law(p, q)
    assert abs(law.sum() - 1) < 1e-12 and np.all(law >= 0)
    assert law[4 :: len(strata.STRATA)].sum() == 0  # "outside" cells are impossible
    alpha = ALPHA_BUDGET[name]
    tv = strata.design_tv(name)
    n = required_sample_size(strata.design_df(p, q), alpha, tv)
    assert power_of(n, strata.design_df(p, q), alpha, tv) >= POWER
    assert sum(ALPHA_BUDGET.values()) <= SUITE_ALPHA


@pytest.mark.slow
def test_reference_passes_the_strata_tests() -> None:
    results = run_properties(verify_sampled, verify_sampled_batch, only=list(STRATA_TESTS))
    assert all(r.passed for r in results), [r.detail for r in results]
    assert all(r.power >= POWER for r in results)


# mutant -> the strata test that must catch it, by moving mass between strata
STRATA_KILLS = {
    "q_tail_underflow": "stat_strata_tail_v4099",
    "residual_below_eps_dropped": "stat_strata_tail_v4099",
    "residual_truncated_to_top_1024": "stat_strata_tail_v4099",
    "last_id_never_drawn": "stat_strata_tail_v4099",
    "uniform_buffer_of_four": "stat_strata_deep_k8",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STRATA_KILLS))
def test_strata_tests_kill_the_mass_moving_mutants(name: str) -> None:
    m = BY_NAME[name]
    [result] = run_properties(m.verifier, m.batch, m.pipeline, only=[STRATA_KILLS[name]])
    assert not result.passed, result.detail


# at V = 262,144 (designed against TV 0.1): the tail and residual classes, which move >= 0.27
STRATA_KILLS_V262144 = ("q_tail_underflow", "residual_below_eps_dropped")


@pytest.mark.slow
@pytest.mark.parametrize("name", STRATA_KILLS_V262144)
def test_gemma_sized_strata_test_kills_the_tail_and_residual_mutants(name: str) -> None:
    m = BY_NAME[name]
    [result] = run_properties(m.verifier, m.batch, m.pipeline, only=["stat_strata_tail_v262144"])
    assert not result.passed, result.detail


def test_gemma_sized_rows_keep_the_targeted_edges() -> None:
    """V = 262,144: q's tail drafts are < 1e-3 with p/q = 1/2 (accepted half the time), every
    residual entry but the last id's is < 1e-3, and the last id carries mass in the residual."""
    p, q = strata.rows_for("stat_strata_tail_v262144")
    assert p.shape == (3, 262_144) and q.shape == (2, 262_144)
    for i in range(2):
        tail = (q[i] > 0) & (q[i] < 1e-3) & (p[i] < q[i])  # (a head id may also be < 1e-3, with p = q)
        assert tail.sum() == 1000 and np.allclose(p[i, tail] / q[i, tail], 0.5)
        residual = np.maximum(p[i] - q[i], 0.0)
        assert residual[-1] > 0.09 and residual[:-1].max() < 1e-3
        assert (residual[:-1] > 0).sum() == 262_144 - 1 - 1010


def test_a_mass_moving_mutant_moves_more_than_the_designed_deviation() -> None:
    """At a small N (cheap), the q-tail underflow mutant's cell frequencies are already off the
    exact law by TV >> STRATA_TV, while the reference's are within sampling noise."""
    p, q = strata.tail_rows()
    law = strata.cell_law(p, q)
    n = 4000
    for batch, far in ((verify_sampled_batch, False), (BY_NAME["q_tail_underflow"].batch, True)):
        counts = strata.observe(batch, p, q, n, np.random.default_rng(5))
        tv = strata.tv_between(counts / n, law)
        # sampling noise: E TV <= 0.5 sum sqrt(law (1 - law) / n) ~ 0.02 here; the mutant moves >= 0.1
        noise = 0.5 * float(np.sum(np.sqrt(law * (1 - law) / n)))
        assert (tv > 3 * strata.STRATA_TV) if far else (tv < 2 * noise), (tv, noise)


# -----------------------------------------------------------------------------------------------
# the catalogue


def test_catalogue_has_24_mutants_including_every_llm_scale_class() -> None:
    assert len(BY_NAME) >= 24
    assert set(PROTOCOL_ONLY) | set(LAW_CHANGING) <= set(BY_NAME)
