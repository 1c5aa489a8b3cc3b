"""`check-decoder --workers N`: the depth test's generations decoded by N engine processes.

On the tiny synthetic llama of tests/test_check_decoder_depth_cli.py (322 ids, one layer): our
decode loop served by verispec/decoder/worker.py gives, block for block, the tokens the same
loop gives in this process (each block's stream is fixed by its seed); a depth test cut after a
fixed number of generations reaches the same numbers with 1 and 2 workers; the command's verdict
is the same with 1 and 2 workers; a worker that dies mid-run fails the prompt with the reason
(exit 1) and leaves no process behind; one that cannot start is a usage error (exit 2).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import group_gone
from tests.support.synthetic import Variant, write_synthetic
from verispec import cli
from verispec.decoder.api import build_engine
from verispec.decoder.options import DecoderUnderTest
from verispec.decoder.worker import WorkerRecipe
from verispec.reference.errors import ExternalError, ProgramCannotStart
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer
from verispec.spec.decoder.check import CommandEngine
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows, verdict_json
from verispec.spec.decoder.depth.pool import GenerationPool

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)
PARAMS = SamplingParams(temperature=1.0, top_k=0, repeat_penalty=1.5)
NET = 120.0  # seconds: a bound on a hang, far above the cheap work below


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workers") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def pool_of(path: Path, workers: int, command: str | None = None) -> GenerationPool:
    command = command or WorkerRecipe(str(path), ours=True).command()
    eog = Tokenizer.from_file(path).eog_ids
    return GenerationPool([CommandEngine(command, NET, None, eog) for _ in range(workers)])


def case_of(path: Path, max_tokens: int = 8) -> DepthCase:
    tokenizer = Tokenizer.from_file(path)
    ids = tuple(tokenizer.encode("the model", add_bos=tokenizer.add_bos, parse_special=True))
    return DepthCase(ids, PARAMS, max_tokens, frozenset(tokenizer.eog_ids))


@pytest.fixture(scope="module")
def two_workers(tiny_model: Path) -> Iterator[GenerationPool]:
    pool = pool_of(tiny_model, 2)
    yield pool
    pool.close()


def test_a_block_decoded_by_a_worker_is_the_block_decoded_here(tiny_model: Path, two_workers: GenerationPool) -> None:
    here = build_engine(DecoderUnderTest(ours=True, model=tiny_model, timeout=NET))
    case = case_of(tiny_model)
    for seed in (7, 8):
        mine = here.generate(case.prompt_ids, PARAMS, case.max_tokens, 5, seed)
        theirs = two_workers.generate(case.prompt_ids, PARAMS, case.max_tokens, 5, seed)
        assert [list(g) for g in mine] == theirs


def test_the_depth_test_reaches_the_same_numbers_with_one_and_two_workers(
    tiny_model: Path, two_workers: GenerationPool
) -> None:
    """A pilot of 8, then 16 generations in blocks of 4: the same tokens, generations and
    statistics whether this process decodes them (``workers=1``) or two worker processes do
    (blocks in flight two at a time, the last one dropped)."""
    from verispec.reference.model import Model

    rows = reference_rows(Model.load(tiny_model))
    case = case_of(tiny_model)
    here = build_engine(DecoderUnderTest(ours=True, model=tiny_model, timeout=NET))
    one = verdict_json(check_depth(here, rows, case, alpha=1e-3, max_generations=16, block=4, pilot=8))
    two = verdict_json(check_depth(two_workers, rows, case, alpha=1e-3, max_generations=16, block=4, pilot=8))
    assert one["generations"] == 16 and one["state"] == "inconclusive"
    assert two == one


def run_cli(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    status = cli.main(
        [
            "check-decoder",
            "--model",
            str(path),
            "--prompt",
            "the model",
            "--depth",
            "8",
            "--top-k",
            "0",
            "--json",
            *extra,
        ]
    )
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.slow  # two runs of the command (~10 s each on a loaded 2-core machine)
def test_the_command_gives_the_same_verdict_with_one_and_two_workers(
    tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = run_cli(tiny_model, capsys, "--mutant", "requests_share_one_stream")
    two = run_cli(tiny_model, capsys, "--mutant", "requests_share_one_stream", "--workers", "2")
    assert one[0] == two[0] == 1
    first, second = one[1]["results"][0], two[1]["results"][0]  # type: ignore[index]
    assert "repeats an earlier one" in first["where"]
    assert {k: v for k, v in first.items() if k != "seconds"} == {k: v for k, v in second.items() if k != "seconds"}


DIES_AFTER_READY = (  # answers the start probe, then dies on the first block it is given
    f'{sys.executable} -c "import sys, json\n'
    "for line in sys.stdin:\n"
    "    request = json.loads(line)\n"
    "    if request['op'] != 'ready': sys.exit(3)\n"
    "    print(json.dumps({'id': request['id'], 'output': {}}), flush=True)\""
)


def test_a_worker_that_dies_fails_the_block_and_leaves_nothing(tiny_model: Path) -> None:
    pool = pool_of(tiny_model, 2, DIES_AFTER_READY)
    groups = [engine.wire.transport._proc.pid for engine in pool.engines]  # type: ignore[union-attr]
    case = case_of(tiny_model)
    try:
        with pytest.raises(ExternalError, match="exited"):
            pool.generate(case.prompt_ids, PARAMS, case.max_tokens, 3, 1)
        verdict = check_depth(pool, lambda s, p: None, case, alpha=1e-3)
        assert verdict.state == "failed" and "ExternalError" in verdict.detail + verdict.where
    finally:
        pool.close()
    assert all(group_gone(g) for g in groups)


def test_workers_through_the_command_exit_codes(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = run_cli(
        tiny_model, capsys, "--engine-cmd", DIES_AFTER_READY, "--workers", "2", "--target-law", "reference"
    )
    assert status == 1 and not report["results"][0]["passed"]  # type: ignore[index]
    with pytest.raises(ProgramCannotStart):
        pool_of(tiny_model, 2, "exit 5")
    assert cli.main(["check-decoder", "--model", str(tiny_model), "--engine-cmd", "exit 5", "--workers", "2"]) == 2
    assert cli.main(["check-decoder", "--model", str(tiny_model), "--ours", "--workers", "0"]) == 2
    assert cli.main(["check-decoder", "--model", str(tiny_model), "--ours", "--workers", "2", "--depth", "0"]) == 2


def test_two_sample_mode_at_depth_reaches_the_same_numbers_with_two_workers(
    tiny_model: Path, two_workers: GenerationPool
) -> None:
    """Both arms of a block decoded at once by the pool: the same generations as one after the other here."""
    from verispec.spec.decoder.depth.two_sample import check_two_sample_depth
    from verispec.spec.decoder.depth.two_sample import verdict_json as two_sample_json

    case = case_of(tiny_model)
    here = build_engine(DecoderUnderTest(ours=True, model=tiny_model, timeout=NET))
    settings = {"alpha": 1e-3, "pilot": 8, "n_per_arm": 8, "block": 4}
    one = two_sample_json(check_two_sample_depth(here, case, **settings))  # type: ignore[arg-type]
    two = two_sample_json(check_two_sample_depth(two_workers, case, **settings))  # type: ignore[arg-type]
    assert one["generations_per_arm"] == 8 and two == one
