"""The depth mode's answers from a hostile or careless engine (tests/support/hostile_engines.py).

On the tiny synthetic llama of tests/test_check_decoder_depth_cli.py (322 ids, one layer, 8-token
generations), through the command: an id of the wrong JSON type, one outside the vocabulary or
beyond any machine integer is the engine's failure, exit 1 with a FAIL line and the JSON report,
whether this process decodes the blocks or two worker processes do (every answer goes through one
reader, spec/answers.py ``generation``). The reader itself is tested item by item below.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.synthetic import Variant, write_synthetic
from verispec import cli
from verispec.reference.errors import ExternalError
from verispec.spec import answers
from verispec.spec.decoder.depth.blocks import as_mapping, checked_block

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("untrusted-depth") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def run(tiny_model: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    status = cli.main(
        [
            "check-decoder",
            "--model",
            str(tiny_model),
            "--prompt",
            "the model",
            "--depth",
            "8",
            "--top-k",
            "0",
            "--json",
            "--budget",
            "60",
            *extra,
        ]
    )  # a run coercing ids ends, inconclusive
    return status, json.loads(capsys.readouterr().out)


# A design fixed by --tv, the budget only a stop far past the failure: a budget-led design (--budget
# alone) is sized from the pilot's timing, so on a loaded machine it can end inconclusive before the
# blocks that hold the spoiled answers (and workers would change its numbers).
FIXED_DESIGN = ("--tv", "0.1", "--budget", "300")

# The engines below that spoil only the depth test's own blocks (``*_late``, the stream reusers) are
# caught there, after the first-m test has PASSED their clean first tokens: the first-m test (1,000
# generations of 3 tokens, some 70% of such a run) decides nothing about them. So all but one engine
# of each test run with ``--no-first-m``: the same blocks (the first-m test draws on its own seed),
# read by the same reader, fail at the same position with the same message. The depth test's alpha
# is then the prompt's whole alpha, a lower level for the same evidence (1/alpha 2.0e4, not 2.2e4),
# so a failure can only come as early: a spoiled id fails the block it is in, and the repeats were
# measured to fail at the same generation (evidence e^10.1 .. e^13.2; the stale-blocks engine, whose
# answers depend on its call count, keeps the default mode). One engine of each test
# (:data:`DEFAULT_MODE`) keeps the default mode, the first-m test then the depth test, with one
# worker and with two; the engines that spoil every generation (``float_ids`` ..) are caught by the
# first-m test's reader and all keep it.
DEFAULT_MODE = ("float_id_late", "vocab_id_late", "stale_blocks")


def depth_only(engine: str) -> tuple[str, ...]:
    """``--no-first-m`` for an engine that spoils only the depth test's blocks (above), none for the others."""
    return () if engine in DEFAULT_MODE or not engine.endswith(("_late", "_streams", "_ignored")) else ("--no-first-m",)


@pytest.fixture(scope="module")
def command_runs() -> dict[tuple[str, ...], tuple[int, dict[str, Any]]]:
    """Runs of the command by their arguments: two tests that assert on the same run share it."""
    return {}


def run_once(
    runs: dict[tuple[str, ...], tuple[int, dict[str, Any]]],
    tiny_model: Path,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
) -> tuple[int, dict[str, Any]]:
    """:func:`run`, once per argument list in this module (the command is deterministic with a fixed design)."""
    if extra not in runs:
        runs[extra] = run(tiny_model, capsys, *extra)
    return runs[extra]


# --- the reader, item by item ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, reason",
    [
        (5.5, "must be an integer, got 5.5"),
        (5.999, "must be an integer, got 5.999"),
        (5.0, "must be an integer, got 5.0"),
        ("5", "must be an integer, got '5'"),
        (True, "must be an integer, got True"),
        (None, "must be an integer, got None"),
        (np.float64(5.0), "must be an integer"),
        (322, "token 322 is outside [0, 322)"),
        (-1, "token -1 is outside [0, 322)"),
        (10**30, "token 1000000000000000000000000000000 is outside [0, 322)"),
    ],
)
def test_an_id_of_another_type_or_range_is_refused_not_converted(bad: Any, reason: str) -> None:
    for raw in ([3, bad, 4], {"ids": [3, bad, 4]}):
        with pytest.raises(ExternalError, match="position 1") as caught:
            answers.generation(raw, 322, "generation 0")
        assert reason in str(caught.value)


def test_a_huge_id_is_refused_without_a_vocabulary_too() -> None:
    """No vocabulary known: ids must still fit a machine integer (an index), so 10**30 is refused, no OverflowError."""
    with pytest.raises(ExternalError, match="outside"):
        answers.generation([10**30], None, "g")
    assert answers.generation([np.int64(7), 2**62], None, "g")[0] == (7, 2**62)


@pytest.mark.parametrize(
    "field, value, reason",
    [
        ("ids", 5, "ids must be a list"),
        ("cycles", [[2, 1.0]], r"cycles\[0\]\[1\] must be an integer"),
        ("cycles", [[2, "1"]], r"cycles\[0\]\[1\] must be an integer"),
        ("cycles", [[True, 1]], r"cycles\[0\]\[0\] must be an integer"),
        ("cycles", [[2, 1, 0]], r"must be \[drafted, accepted\]"),
        ("cycles", [[2, -1]], "outside"),
        ("cycles", 3, "cycles must be a list"),
        ("logprobs", [-0.5, "-0.5", -0.1], r"logprobs\[1\] must be a number"),
        ("logprobs", [-0.5, True, -0.1], r"logprobs\[1\] must be a number"),
        ("logprobs", [-0.5, 10**400, -0.1], "not a log-probability"),
    ],
)
def test_every_field_has_exactly_its_type(field: str, value: Any, reason: str) -> None:
    raw: dict[str, Any] = {"ids": [3, 4, 5], "cycles": [[2, 2]], "logprobs": [-0.5, -0.2, -0.1]}
    raw[field] = value
    with pytest.raises(ExternalError, match=reason):
        answers.generation(raw, 322, "generation 0")


def test_well_typed_answers_read_as_before() -> None:
    ids, cycles, logprobs = answers.generation(
        {"ids": [3, np.int64(4)], "cycles": [[2, 1]], "logprobs": [-1, -0.5]}, 322, "g"
    )
    assert (ids, cycles, logprobs) == ((3, 4), ((2, 1),), (-1.0, -0.5))
    assert [g.ids for g in checked_block([[1, 2], np.array([3, 4])], 2, 322)] == [(1, 2), (3, 4)]
    with pytest.raises(ExternalError, match="asked for a list of 2"):
        checked_block("12", 2, 322)


def test_a_worker_sends_what_its_engine_answered_unconverted() -> None:
    """The worker's wire form keeps each value's kind (NumPy scalars as Python's): the checker's
    reader then refuses a float id the worker would otherwise have truncated."""
    sent = as_mapping([np.int64(3), 4.5, "6", True])
    assert sent == [3, 4.5, "6", True] and [type(v) for v in sent] == [int, float, str, bool]
    assert as_mapping({"ids": (np.int64(3), np.float64(4.0))}) == {"ids": [3, 4.0]}
    assert type(as_mapping({"ids": (np.float64(4.0),)})["ids"][0]) is float  # type: ignore[call-overload]


# --- through the command: sequential and two workers -------------------------------------------------


def run_hostile(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], engine: str, workers: str
) -> tuple[int, dict[str, Any]]:
    """A fixed-design run of the hostile engine ``engine`` (tests/support/hostile_engines.py)."""
    return run(
        tiny_model,
        capsys,
        "--engine",
        f"tests.support.hostile_engines:{engine}",
        "--workers",
        workers,
        *FIXED_DESIGN,
        *depth_only(engine),
    )


@pytest.mark.slow  # sixteen runs of the command, each a pilot or a few blocks of the tiny model
@pytest.mark.parametrize(
    "engine, reason",
    [
        ("float_ids", "must be an integer, got"),
        ("near_int_ids", "must be an integer, got"),
        ("string_ids", "must be an integer, got '"),
        ("bool_ids", "must be an integer, got True"),
        # the same in the test's blocks, after the pilot: with --workers 2 a worker decodes them
        ("float_id_late", ".5"),
        ("whole_float_id_late", ".0"),
        ("string_id_late", "must be an integer, got '"),
        ("bool_id_late", "must be an integer, got True"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_wrongly_typed_id_fails_the_engine_in_every_mode(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], engine: str, reason: str, workers: str
) -> None:
    status, report = run_hostile(tiny_model, capsys, engine, workers)
    result = report["results"][0]
    assert status == 1 and result["state"] == "failed" and reason in result["where"]
    assert "must be an integer, got" in result["where"]
    if engine.endswith("_late"):  # in a block of the depth test itself, at the spoiled position
        assert result["design_tokens"] > 0 and "position 6: a token id must be an integer" in result["where"]


@pytest.mark.parametrize(
    "engine, reason",
    [
        ("vocab_id_late", "token 322 is outside [0, 322)"),
        ("negative_id_late", "token -1 is outside [0, 322)"),
        ("huge_id_late", "token 1000000000000000000000000000000 is outside [0, 322)"),
    ],
)
@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_id_outside_the_vocabulary_after_the_pilot_is_the_engines_failure(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], engine: str, reason: str, workers: str
) -> None:
    """Exit 1 with the report (not a model/input error, exit 4, nor an OverflowError)."""
    status, report = run_hostile(tiny_model, capsys, engine, workers)
    result = report["results"][0]
    assert status == 1 and result["state"] == "failed" and reason in result["where"]
    assert result["design_tokens"] > 0  # after the pilot: the id came in a block of the test itself


# --- request independence: repeated generations ----------------------------------------------------


def test_the_repeat_evidence_is_a_martingale_of_mean_one() -> None:
    """E[M] = 1 exactly under the null: every repeat pattern of 6 generations with fixed repeat
    probabilities pi_j, weighted by its null probability (the martingale property the level rests
    on; pi_j here a fixed sequence, in a run the past fixes it)."""
    import itertools

    from verispec.spec.decoder.depth.law import RepeatSums

    pis = [0.0, 1e-9, 0.01, 0.3, 0.9, 1.0]
    mean = 0.0
    for pattern in itertools.product((False, True), repeat=len(pis)):
        if any(r and pi == 0.0 for r, pi in zip(pattern, pis)):
            continue
        sums, weight = RepeatSums(), 1.0
        for j, (repeated, pi) in enumerate(zip(pattern, pis)):
            sums.seen_mass = pi
            sums.add(repeated, j + 1)
            weight *= pi if repeated else 1.0 - pi
        mean += weight * math.exp(sums.log_evidence())
    assert mean == pytest.approx(1.0, abs=1e-9)  # float64 sums of 64 terms of size <= e^32


def test_a_near_deterministic_laws_repeats_do_not_reject() -> None:
    """pi_j = 1 (a one-hot law: every generation the same): M <= 1 however many repeats."""
    from verispec.spec.decoder.depth.law import RepeatSums

    sums = RepeatSums()
    for j in range(1000):
        sums.seen_mass = 1.0 if j else 0.0
        sums.add(j > 0, j + 1)
    assert sums.log_evidence() <= 0.0 and not sums.rejects(1e-3) and sums.near_deterministic()
    assert "near-deterministic" in sums.note()


def stream_run(engine: str, workers: str) -> tuple[str, ...]:
    """The command's arguments for a stream-reusing engine with ``workers`` workers."""
    return (
        "--engine",
        f"tests.support.hostile_engines:{engine}",
        "--workers",
        workers,
        *FIXED_DESIGN,
        *depth_only(engine),
    )


@pytest.mark.parametrize("engine", ["four_streams", "stale_blocks", "seed_ignored"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_reused_random_streams_fail_with_any_number_of_workers(
    tiny_model: Path,
    capsys: pytest.CaptureFixture[str],
    command_runs: dict[tuple[str, ...], tuple[int, dict[str, Any]]],
    engine: str,
    workers: str,
) -> None:
    """Four streams, a stale block answered again, a seed ignored: FAIL at the first block that
    repeats, named as repeated generations (exit 1), with one worker and with two."""
    status, report = run_once(command_runs, tiny_model, capsys, *stream_run(engine, workers))
    result = report["results"][0]
    assert status == 1 and result["state"] == "failed", result
    assert "repeated generations:" in result["where"] and result["generations"] <= 250
    assert "bin" not in result["where"]  # named as repeats, not as a position bin's deviation


@pytest.mark.slow  # four runs of the command
@pytest.mark.parametrize("engine", ["four_streams", "seed_ignored"])
def test_a_stream_reusing_engine_gets_the_same_verdict_for_any_number_of_workers(
    tiny_model: Path,
    capsys: pytest.CaptureFixture[str],
    command_runs: dict[tuple[str, ...], tuple[int, dict[str, Any]]],
    engine: str,
) -> None:
    """A design fixed by --tv (:data:`FIXED_DESIGN`): the same failure, at the same generation with the same evidence, with one worker and with two;
    and at the first block after the first repeat (the seed ignored: block 2 repeats block 1; four
    streams: generation 5 repeats generation 1). The runs are those of
    :func:`test_reused_random_streams_fail_with_any_number_of_workers` (the same arguments: run once
    per module), asserted here on across the number of workers."""
    verdicts = []
    for workers in ("1", "2"):
        status, report = run_once(command_runs, tiny_model, capsys, *stream_run(engine, workers))
        result = report["results"][0]
        verdicts.append((status, result["state"], result["where"], result["generations"], result["design_tokens"]))
    assert verdicts[0] == verdicts[1] and verdicts[0][0] == 1, verdicts
    where = verdicts[0][2]
    first = int(where.split("(generation ")[1].split()[0])
    assert where.startswith("repeated generations:")
    assert first == 5 if engine == "four_streams" else first == verdicts[0][3] // 2 + 1, where


def test_a_correct_decoder_at_a_sharp_law_repeats_legitimately(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temperature 0.05: most generations repeat (the law's own collision probability); the run
    does not fail, and the report says the repeats are the law's (its budget ends it: exit 3). An
    explicit --tv makes the budget a stop (without one the design would be budget-led); the first-m
    test is skipped so that its share of the seconds cannot leave none for the depth.

    The depth test's clock is this process's CPU time here, not the wall clock: on a loaded machine
    the pilot alone could outlast a few wall seconds, leaving no generation to repeat (nothing for
    the report to say). In 4 CPU seconds the pilot takes under 1 and the test ~700 generations of 8
    tokens, whatever the load (measured: 2 CPU s gave 350 generations, 344 of them repeats, 345
    expected; the note needs one repeat and an expected count >= half the generations); the budget
    still ends the run, through the same check of the clock. ~700 generations are more than the
    ~450 this test was written for (10 CPU s on an earlier, slower decode loop; 1,750 today)."""
    from verispec.spec.decoder.depth import law

    monkeypatch.setattr(law, "time", SimpleNamespace(monotonic=time.process_time))
    status, report = run(
        tiny_model, capsys, "--ours", "--temperature", "0.05", "--tv", "0.05", "--budget", "4", "--no-first-m"
    )
    result = report["results"][0]
    assert status == 3 and result["state"] == "inconclusive"
    assert "repeated generations" in result["detail"] and "repeats are its own" in result["detail"]


# --- a deterministic target law ----------------------------------------------------------------------


@pytest.mark.parametrize("flags", [("--temperature", "0"), ("--temperature", "1e-9"), ("--top-k", "1")])
def test_a_deterministic_law_passes_our_decoder_and_says_so(
    tiny_model: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, str]
) -> None:
    status, report = run(tiny_model, capsys, "--ours", *flags)
    result = report["results"][0]
    assert status == 0 and result["state"] == "passed" and "the target law is deterministic" in result["detail"]
    assert result["generations"] == 200


def test_a_deterministic_law_still_fails_an_impossible_token(
    tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The depth test's own deterministic path (--no-first-m); by default the first-m test, run
    first, already rejects the impossible tokens."""
    status, report = run(
        tiny_model, capsys, "--engine", "tests.support.hostile_engines:shifted_last", "--top-k", "1", "--no-first-m"
    )
    result = report["results"][0]
    assert status == 1 and "has target probability 0" in result["where"]
    status, report = run(tiny_model, capsys, "--engine", "tests.support.hostile_engines:shifted_last", "--top-k", "1")
    assert status == 1 and "impossible=" in report["results"][0]["where"]
    assert "the target law is deterministic" in result["detail"]


# --- unbounded designs ---------------------------------------------------------------------------


def test_a_design_beyond_the_bound_is_a_usage_error(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--temperature 1e9: rows all but uniform, a design of ~1e17 tokens; refused after the pilot
    (exit 2, the bound and the reason named), not run without end."""
    from verispec.spec.decoder.depth.law import MAX_DESIGN_TOKENS

    began = time.monotonic()
    status = cli.main(
        [
            "check-decoder",
            "--model",
            str(tiny_model),
            "--prompt",
            "the model",
            "--depth",
            "8",
            "--ours",
            "--temperature",
            "1e9",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and f"beyond the bound of {MAX_DESIGN_TOKENS:.0e} tokens" in err and "raise --tv" in err
    assert time.monotonic() - began < 120.0  # a pilot of the tiny model; without the bound it never ends


def test_a_scale_beyond_the_bound_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--scale 1e300 --budget 5: one block would be 1e290 draws (the budget is checked between
    blocks), so the scale is refused with its bound before anything is drawn."""
    from verispec.spec.check import MAX_SCALE

    began = time.monotonic()
    status = cli.main(
        [
            "check",
            "--verifier",
            "verispec.reference.speculative:verify_sampled",
            "--scale",
            "1e300",
            "--budget",
            "5",
            "--only",
            "stat_verdict_law_k1",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and f"scale must be at most {MAX_SCALE:g}" in err
    assert time.monotonic() - began < 60.0
    assert cli.main(["check", "--verifier", "verispec.reference.speculative:verify_sampled", "--scale", "1e300"]) == 2


def test_a_depth_beyond_the_models_context_is_a_usage_error(
    tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No decoder can generate past the context (256 here): our own decoder used to FAIL the case
    ("the pilot failed: ContextOverflow", exit 1). Refused before any prompt runs, naming the largest
    depth that fits."""
    status = cli.main(
        ["check-decoder", "--model", str(tiny_model), "--prompt", "the model", "--ours", "--depth", "1000000000"]
    )
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert "exceeds the model's context length 256: give a depth of at most 249" in captured.err
