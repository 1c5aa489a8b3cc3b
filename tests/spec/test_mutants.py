"""The spec has teeth: every mutant is killed, the reference passes, and the statistical and
exact properties each kill the mutants that change the law on their own."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt
import pytest

from verispec.reference.sampling import inverse_cdf_draws
from verispec.spec import mutants
from verispec.spec.properties import PROPERTY_NAMES, STATISTICAL, run_properties

# Row-level mutants that change the law of the emitted tokens on ordinary rows (the others only
# break the protocol or an edge case: no bonus is lossless but slower and off-protocol, a padded
# tie needs a zero residual, `<=` differs on a set of uniforms of measure zero).
LAW_CHANGING = (
    "resample_from_target",
    "resample_from_draft",
    "bonus_from_wrong_row",
    "always_accept",
    "residual_not_renormalized",
    "ratio_inverted",
    "sampling_verified_greedily",
    "acceptance_uniform_reused_for_repair",
    "target_rows_off_by_one",
)
BY_NAME = {m.name: m for m in mutants.catalogue()}


def test_catalogue_is_large_and_named_after_bug_classes() -> None:
    catalogue = mutants.catalogue()
    assert len(catalogue) >= 12
    assert len(BY_NAME) == len(catalogue)
    assert all(m.bug_class for m in catalogue)
    for reference in (
        "transformers #47932",
        "transformers #32867",
        "transformers PR #28508",
        "vLLM #42744",
        "sglang #32922",
        "GHSA-8wr5-jm2h-8r4f",
    ):
        assert any(reference in m.bug_class for m in catalogue), reference


@pytest.fixture(scope="module")
def deterministic_catalogue() -> tuple[mutants.MutantReport, list[mutants.MutantReport]]:
    """The catalogue run on every deterministic property, fail-fast per mutant; its reference report
    is ``run_properties`` on the reference verifier over the same properties, without fail-fast
    (spec/mutants.py ``evaluate``): what the two tests below read, computed once."""
    return mutants.run_catalogue(fail_fast=True, only=[n for n in PROPERTY_NAMES if n not in STATISTICAL])


def test_every_mutant_is_killed(
    deterministic_catalogue: tuple[mutants.MutantReport, list[mutants.MutantReport]],
) -> None:
    reference, reports = deterministic_catalogue
    assert not reference.killed, reference.results
    survivors = [r.name for r in reports if not r.killed]
    assert survivors == []


@pytest.mark.parametrize("name", LAW_CHANGING)
def test_statistics_alone_kill_the_law_changing_mutants(name: str) -> None:
    mutant = BY_NAME[name]
    results = run_properties(mutant.verifier, mutant.batch, mutant.pipeline, only=sorted(STATISTICAL), fail_fast=True)
    assert not results[-1].passed, f"{name} survived every statistical test"


@pytest.mark.parametrize("name", LAW_CHANGING)
def test_exact_law_alone_kills_the_law_changing_mutants(name: str) -> None:
    mutant = BY_NAME[name]
    [result] = run_properties(mutant.verifier, mutant.batch, mutant.pipeline, only=["exact_lossless"])
    assert not result.passed


def test_reference_passes_every_deterministic_property(
    deterministic_catalogue: tuple[mutants.MutantReport, list[mutants.MutantReport]],
) -> None:
    """(The statistical ones run in spec/test_statistics.py.) The reference's report of the
    catalogue run: ``run_properties(verify_sampled, verify_sampled_batch, ReferencePipeline(),
    only=<every deterministic property>)``, every property run (no fail-fast)."""
    reference, _ = deterministic_catalogue
    results = reference.results
    assert [r.name for r in results] == [n for n in PROPERTY_NAMES if n not in STATISTICAL]  # every one ran
    assert [r.name for r in results if not r.passed] == []


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    status = mutants.main(
        [
            "--json",
            "--fail-fast",
            "--only",
            "contract",
            "range_and_mass",
            "protocol_boundaries",
            "pipeline_processors",
            "full_vocab_protocol",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["ok"] and report["killed"] == report["total"] == len(BY_NAME)
    by_name = {m["name"]: m for m in report["mutants"]}
    assert by_name["accept_on_equality"]["killed_by"] == ["protocol_boundaries"]
    assert by_name["draft_q_from_raw_logits"]["killed_by"] == ["pipeline_processors"]
    assert by_name["reversed_scan_large_vocab"]["killed_by"] == ["full_vocab_protocol"]  # fires only at V > 8


def test_cli_rejects_unknown_property(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutants.main(["--only", "no_such_property"]) == 2
    assert "unknown properties" in capsys.readouterr().err


def _rows(rng: np.random.Generator, count: int, vocab: int) -> npt.NDArray[np.float64]:
    """Probability rows with zeros among their entries, the last one one-hot."""
    rows = rng.dirichlet(np.full(vocab, 0.3), size=count)
    rows[rows < 1e-3] = 0.0
    rows[-1] = 0.0
    rows[-1, vocab - 1] = 1.0
    normalized: npt.NDArray[np.float64] = rows / rows.sum(axis=1, keepdims=True)
    return normalized


@pytest.mark.parametrize("vocab", [6, 300, 2048])
def test_shared_rows_give_every_mutant_the_tokens_of_per_item_rows(vocab: int) -> None:
    """The mutants work a shared row out once (spec/mutants.py ``_inverse_cdf_shared``,
    ``_repair_rows``): on the same p, q, drafts and uniforms every batch verifier of the catalogue
    returns, bit for bit, what it returns when each item carries its own copy of the rows (the
    row-by-row path), for V <= 8, V > 8 (the reversed scan) and V > 1024 (the top-1,024 cut)."""
    rng = np.random.default_rng(vocab)
    k, n = 3, 400
    p, q = _rows(rng, k + 1, vocab), _rows(rng, k, vocab)
    q[1] = p[1]  # an all-zero residual row: the padded tie and the fallback to p
    drafts = np.stack([inverse_cdf_draws(q[i], rng.random(n)) for i in range(k)], axis=1)  # drawn from q
    uniforms = rng.random((n, k + 1))
    per_item = (
        np.ascontiguousarray(np.broadcast_to(p, (n, k + 1, vocab))),
        np.ascontiguousarray(np.broadcast_to(q, (n, k, vocab))),
    )
    for mutant in [*mutants.catalogue()]:
        shared = mutant.batch(p, q, drafts, uniforms)
        own = mutant.batch(*per_item, drafts, uniforms)
        for got, want in zip(shared, own):
            assert np.array_equal(got, want), mutant.name


@pytest.mark.parametrize(
    "draw", ["protocol", "float32_cumsum", "reversed_large_vocab", "pairwise_total", "clamp_v_minus_2", "side_left"]
)
def test_a_shared_rows_draw_is_the_row_by_row_draw(draw: str) -> None:
    rng = np.random.default_rng(7)
    for vocab in (2, 9, 5000):
        subnormal = np.zeros(vocab)
        subnormal[vocab // 2] = 5e-324  # a subnormal total: the draws' overflow fallback
        for row in [*_rows(rng, 4, vocab), subnormal]:
            u = np.concatenate([rng.random(300), [0.0, np.nextafter(1.0, 0.0)]])
            shared = np.broadcast_to(row, (u.shape[0], vocab))
            assert np.array_equal(
                mutants.draw_rows(shared, u, draw),
                mutants.draw_rows(np.ascontiguousarray(shared), u, draw),
            ), (draw, vocab)
