"""The batch form of the depth test (spec/decoder/depth/batch.py) and its reference engine.

- The fast engine's lockstep decode (``EngineDecoder.generate_batch``: each request its own params,
  seed and generator, at most 8 live, the rest joining mid-decode) PASSES, and its requests really
  join mid-decode.
- Every batch mutant of spec/decoder/depth/batch_mutants.py (one request's params for all, one
  stream for all, unseeded rows argmax, an unseeded request on a seeded request's stream, greedy
  rows broken in a mixed batch, one request's rows for another) is REJECTED, with the lane or the
  cross-request test that names it.
- The cross-request martingale is exact: its moment generating function is the uniform's, its
  mean stays at 1 on independent PITs (its false alarms below alpha), and it rejects coupled ones.
- The op: a request's wire form round-trips and refuses inexact fields; an answer is read by the
  one reader of generations (one per request, exact integer ids in [0, V)), through the JSON-lines
  program too.

Cheap designs on the tiny synthetic llama (TV 0.3 on every position, 12 tokens), seconds each; the
full design runs only as a measurement (docs/checking-decoders.md).
"""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.synthetic import write_synthetic
from verispec.decoder.ours import EngineDecoder
from verispec.reference.errors import ExternalError, UsageError
from verispec.reference.sampling import SamplingParams
from verispec.spec.decoder.depth.batch import (
    CROSS_LAMBDAS,
    CROSS_SHARE,
    BatchRequest,
    CrossSums,
    check_batch,
    checked_batch,
    default_lanes,
    log_sinhc,
    request_from_json,
    request_json,
)
from verispec.spec.decoder.depth.batch_mutants import BATCH_MUTANTS, batch_mutant
from verispec.spec.decoder.depth.generation import DepthCase
from verispec.spec.decoder.laws import build

ALPHA = 1e-3
DESIGN = dict(alpha=ALPHA, tv=0.3, fraction=1.0, cross_rho=0.35)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> EngineDecoder:
    path = tmp_path_factory.mktemp("batch") / "tinyllama-q.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    return EngineDecoder(path, "int8")  # the auto (token-tree) draft, check-decoder's default


@pytest.fixture(scope="module")
def chain_engine(engine: EngineDecoder) -> EngineDecoder:
    """The same engine with the n-gram chain draft: what check-decoder builds the batch mutants on."""
    chain = copy.copy(engine)
    chain.draft_kind = "ngram"
    return chain


def lanes_of(engine: EngineDecoder, greedy: bool = True) -> list[Any]:
    tokenizer = engine.tokenizer
    ids = tuple(tokenizer.encode("the model the model", add_bos=tokenizer.add_bos, parse_special=True))
    profile = build("verispec", {"top_k": 12, "repeat_penalty": 1.0}, tokenizer.eog_ids)
    eog = frozenset(tokenizer.eog_ids)
    case = DepthCase(ids, profile.legacy, 12, eog, 0, None, int(engine.model.config.n_vocab))
    return default_lanes(case, profile, greedy)


def test_our_lockstep_batch_passes_with_requests_joining_mid_decode(engine: EngineDecoder) -> None:
    lanes = lanes_of(engine)
    verdict = check_batch(engine, engine.forced_rows, lanes, **DESIGN)  # type: ignore[arg-type]
    assert verdict.state == "passed", verdict.where
    assert verdict.requests_per_call > engine.batch_slots and verdict.joined > 0  # requests joined mid-decode
    assert [lane.deterministic for lane in verdict.lanes] == [False, False, False, True]
    assert all(lane.verdict.generations > 0 for lane in verdict.lanes)
    assert verdict.power >= 0.99 and verdict.cross_rho <= DESIGN["cross_rho"]


def test_the_same_seeds_give_the_same_verdict(engine: EngineDecoder) -> None:
    """Deterministic seeds: the run's requests are fixed by the run seed, so two runs agree."""
    lanes = lanes_of(engine, greedy=False)
    design = {**DESIGN, "cross_rho": 1.0}
    engine.unseeded = np.random.default_rng(0x5EED)  # the unseeded requests' stream, as at construction
    first = check_batch(engine, engine.forced_rows, lanes, **design)  # type: ignore[arg-type]
    engine.unseeded = np.random.default_rng(0x5EED)
    second = check_batch(engine, engine.forced_rows, lanes, **design)  # type: ignore[arg-type]
    assert first.detail.split("; cross")[0] == second.detail.split("; cross")[0]
    assert first.tokens == second.tokens and first.cross_z == second.cross_z


EXPECTED_WHERE = {
    "one_params_for_all": "temperature x 0.6 and top-p 0.9",  # judged against its own law
    "one_stream_for_all": "repeated generations",
    "unseeded_rows_not_noised": "the case's law, unseeded",
    "unseeded_on_a_seeded_stream": "together: repeated generations",  # only the lanes together see it
    "greedy_rows_break_mixed_batch": "greedy",
    "rows_of_another_request": "target probability 0",
}


@pytest.mark.parametrize("name", sorted(BATCH_MUTANTS))
def test_each_batch_mutant_is_rejected(chain_engine: EngineDecoder, name: str) -> None:
    engine = chain_engine
    verdict = check_batch(batch_mutant(name, engine), engine.forced_rows, lanes_of(engine), **DESIGN)  # type: ignore[arg-type]
    assert verdict.state == "failed", verdict.detail
    assert EXPECTED_WHERE[name] in verdict.where, verdict.where


def test_a_lossless_draft_leak_passes(engine: EngineDecoder) -> None:
    """The control: every request drafts from ANOTHER request's history (a draft leaking across
    requests), each draft verified exactly, so the law is kept: no false alarm. Most cycles verify
    a foreign draft (checked on one call: more than half of the cycles drafted)."""
    control = batch_mutant("drafts_from_another_request", engine)
    lanes = lanes_of(engine)
    cycles = [
        c for g in control.generate_batch([lane.request(i) for i, lane in enumerate(lanes * 3)]) for c in g["cycles"]
    ]
    assert sum(1 for drafted, _ in cycles if drafted) > len(cycles) / 2
    verdict = check_batch(control, engine.forced_rows, lanes, **DESIGN)  # type: ignore[arg-type]
    assert verdict.state == "passed", verdict.where


def test_the_alpha_budget_is_one() -> None:
    """The lanes' shares and the cross-request shares add up to alpha (Bonferroni over the parts)."""
    lanes = 4
    shared_groups = 1
    lane_total = ALPHA * (1 - CROSS_SHARE) / lanes * lanes
    cross_total = ALPHA * CROSS_SHARE / 2 + ALPHA * CROSS_SHARE / 2 / shared_groups * shared_groups
    assert math.isclose(lane_total + cross_total, ALPHA, rel_tol=1e-12)


# -----------------------------------------------------------------------------------------------
# the cross-request martingale


def test_the_martingale_uses_the_uniforms_exact_moment_generating_function() -> None:
    """E[exp(c W)] for W uniform on [-1/2, 1/2] is sinh(c/2) / (c/2): checked against a midpoint
    integral of 200,000 cells (error ~ c^2 / 24 / n^2 relative, far below 1e-9 at |c| <= 40)."""
    cells = (np.arange(200_000) + 0.5) / 200_000 - 0.5
    for c in (1e-6, 0.3, 2.0, 12.0, 40.0):
        integral = float(np.mean(np.exp(c * cells)))
        assert math.isclose(float(log_sinhc(np.array([c / 2.0]))[0]), math.log(integral), rel_tol=1e-9, abs_tol=1e-12)


def test_independent_pits_rarely_reject_and_coupled_ones_do() -> None:
    """On i.i.d. uniform PITs (the null), 400 runs of 20 calls of 12 requests x 12 positions reject
    at alpha 0.05 at most 0.05 of the time plus 3 binomial sd (0.033: 400 runs); neighbours on one
    stream (each odd request's uniforms its predecessor's) are rejected in every run."""
    rng = np.random.default_rng(7)
    alpha, runs = 0.05, 400
    rejected = 0
    for _ in range(runs):
        cross = CrossSums()
        for _ in range(20):
            cross.add_call([rng.random(12) for _ in range(12)])
            if cross.rejects(alpha):
                rejected += 1
                break
    assert rejected / runs <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)
    for _ in range(20):
        cross = CrossSums()
        for _ in range(3):
            pits = []
            for _ in range(6):
                u = rng.random(12)
                pits += [u, np.clip(u + 0.02 * rng.standard_normal(12), 0.0, 0.999)]
            cross.add_call(pits)
        assert cross.rejects(1e-4) and cross.strongest() == 0  # the neighbours' form finds it


def test_the_cross_sums_are_their_definition() -> None:
    """The vectorized sums equal the definition request by request (module docstring: C_r the
    previous alive request's w, or the sum of all earlier ones; NaN positions skipped); float sums
    in another order: equal to 1e-12."""
    rng = np.random.default_rng(1)
    pits = [rng.random(int(rng.integers(1, 9))) for _ in range(7)]
    pits[2][0] = math.nan
    cross = CrossSums()
    cross.add_call(pits)
    terms, drift, variance, pairs = np.zeros((2, CROSS_LAMBDAS.shape[0])), np.zeros(2), np.zeros(2), np.zeros(2)
    for t in range(max(len(p) for p in pits)):
        running, previous, alive = 0.0, 0.0, 0
        for p in pits:
            if t >= len(p) or math.isnan(float(p[t])):
                continue
            w = float(p[t]) - 0.5
            if alive:
                for form, (c, n) in enumerate(((previous, 1), (running, alive))):
                    terms[form] += CROSS_LAMBDAS * c * w - log_sinhc(CROSS_LAMBDAS * c / 2.0)
                    drift[form] += c * w
                    variance[form] += c * c / 12.0
                    pairs[form] += n
            running, previous, alive = running + w, w, alive + 1
    assert np.allclose(cross.log_terms, terms, rtol=1e-12, atol=1e-12)
    assert np.allclose(cross.drift, drift, atol=1e-12) and np.allclose(cross.variance, variance, atol=1e-12)
    assert (cross.pairs == pairs).all()


def test_the_lambda_grid_has_both_signs() -> None:
    assert (CROSS_LAMBDAS > 0).any() and (CROSS_LAMBDAS < 0).any()


# -----------------------------------------------------------------------------------------------
# the op and its answers


REQUEST = BatchRequest((1, 2, 3), SamplingParams(temperature=0.7, top_k=5), 12, 99, 0, None)


def test_a_request_round_trips_on_the_wire() -> None:
    wire = json.loads(json.dumps(request_json(REQUEST)))
    assert request_from_json(wire) == REQUEST
    unseeded = request_json(BatchRequest((1,), SamplingParams(), 4, None))
    assert unseeded["seed"] is None and request_from_json(unseeded).seed is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("seed", 5.0),
        ("seed", "5"),
        ("seed", True),
        ("seed", -1),
        ("seed", 2**63),
        ("max_tokens", 12.0),
        ("max_tokens", 0),
        ("min_tokens", -1),
        ("prompt_ids", [1, 2.0]),
        ("prompt_ids", []),
        ("prompt_ids", [-1]),
        ("params", [1]),
    ],
)
def test_a_request_field_of_another_type_is_refused(field: str, value: Any) -> None:
    wire = {**request_json(REQUEST), field: value}
    with pytest.raises(UsageError, match=field):
        request_from_json(wire)


def test_a_request_without_a_seed_field_is_refused() -> None:
    wire = request_json(REQUEST)
    del wire["seed"]
    with pytest.raises(UsageError, match="seed"):
        request_from_json(wire)


@pytest.mark.parametrize(
    "answer, message",
    [
        ([[1, 2]], "returned 1 generations, asked for 2"),
        ([[1, 2], [1, 2.0]], "integer"),
        ([[1, 2], [1, True]], "integer"),
        ([[1, 2], [1, "2"]], "integer"),
        ([[1, 2], [1, 50]], "outside"),
        ({"generations": "no"}, "asked for a list of 2"),
    ],
)
def test_an_answer_is_read_by_the_one_reader(answer: Any, message: str) -> None:
    with pytest.raises(ExternalError, match=message):
        checked_batch(answer, [REQUEST, REQUEST], vocab=50)


ECHO_PROGRAM = r"""
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    requests = request["input"]["requests"]
    answer = []
    for r in requests:  # the exact types the op promises, echoed back as the generation
        assert type(r["max_tokens"]) is int and (r["seed"] is None or type(r["seed"]) is int)
        answer.append([len(r["prompt_ids"]), r["max_tokens"], 0 if r["seed"] is None else 1])
    print(json.dumps({"id": request["id"], "output": {"generations": answer}}), flush=True)
"""


def test_the_json_lines_op_carries_each_request_and_is_read_by_the_one_reader(tmp_path: Path) -> None:
    from verispec.spec.decoder.check import CommandEngine

    program = tmp_path / "echo.py"
    program.write_text(ECHO_PROGRAM)
    engine = CommandEngine(f"{sys.executable} {program}", timeout=30.0, vocab=100)
    try:
        requests = [REQUEST, BatchRequest((4,), SamplingParams(), 7, None)]
        generations = checked_batch(engine.generate_batch(requests), requests, vocab=100)
        assert [g.ids for g in generations] == [(3, 12, 1), (1, 7, 0)]
    finally:
        engine.close()


def test_our_engine_served_on_the_wire_passes_through_the_op(engine: EngineDecoder, tmp_path: Path) -> None:
    """The same engine as a program (``python -m verispec.decoder.worker``: the op's requests read by
    ``request_from_json``, each generation sent as the wire carries it) through CommandEngine: the
    batch test passes end to end over JSON lines."""
    from verispec.decoder.recipe import WorkerRecipe
    from verispec.spec.decoder.check import CommandEngine

    model = tmp_path / "tinyllama-q.gguf"
    write_synthetic(model, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    recipe = WorkerRecipe(str(model), ours=True, weights="int8")
    command = CommandEngine(recipe.command(), timeout=120.0, vocab=int(engine.model.config.n_vocab))
    command.batch_slots = 8  # type: ignore[attr-defined]  # the served engine's, declared on the checker's side
    try:
        verdict = check_batch(command, engine.forced_rows, lanes_of(engine), **DESIGN)  # type: ignore[arg-type]
    finally:
        command.close()
    assert verdict.state == "passed", verdict.where


UNSUPPORTED_PROGRAM = r"""
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["id"], "unsupported": request["op"]}), flush=True)
"""


def test_a_program_without_the_op_is_a_usage_error(engine: EngineDecoder, tmp_path: Path) -> None:
    """generate_batch is optional on the wire: a program answering ``unsupported`` stops the batch
    test with a usage error (exit 2), never a verdict on the engine."""
    from verispec.spec.decoder.check import CommandEngine

    program = tmp_path / "unsupported.py"
    program.write_text(UNSUPPORTED_PROGRAM)
    command = CommandEngine(f"{sys.executable} {program}", timeout=30.0, vocab=int(engine.model.config.n_vocab))
    try:
        with pytest.raises(UsageError, match="generate_batch"):
            check_batch(command, engine.forced_rows, lanes_of(engine), **DESIGN)  # type: ignore[arg-type]
    finally:
        command.close()


def test_the_cli_runs_the_batch_form(engine: EngineDecoder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``check-decoder --batch`` on our lockstep engine: exit 0, the batch verdict in the JSON.
    Through the command's ``main`` in this process (its flags, its engine build, its report): the
    process boundary of ``verispec check-decoder`` (entry point, exit status) is
    tests/test_installed_wheel.py's, and this command's ``--workers`` runs spawn real processes in
    tests/test_decoder_depth_untrusted.py."""
    from verispec import cli

    model = tmp_path / "tinyllama-q.gguf"
    write_synthetic(model, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    command = ["check-decoder", "--ours", "--weights", "int8", "--batch"]
    command += ["--model", str(model), "--prompt", "the model the model", "--depth", "12", "--tv", "0.3"]
    command += ["--fraction", "1", "--top-k", "12", "--repeat-penalty", "1", "--json", "--progress-every", "0"]
    status = cli.main(command)
    captured = capsys.readouterr()
    assert status == 0, captured.err[-2000:]
    result = json.loads(captured.out)["results"][0]
    assert result["mode"] == "batch" and result["state"] == "passed"
    assert len(result["lanes"]) == 4 and result["joined_mid_decode"] > 0


def test_batch_is_a_depth_mode() -> None:
    from verispec.decoder.api import check_decoder
    from verispec.reference.errors import VerispecError

    with pytest.raises(VerispecError, match="batch"):
        check_decoder(ours=True, weights="int8", batch=True, greedy=True, model="nonexistent.gguf")
