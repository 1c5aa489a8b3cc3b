"""`check-decoder --ours --weights MODE`: the fast engine's own speculative decoder at depth.

- Its target law is the same engine's rows from ONE teacher-forced pass per generation; that
  these are the rows its decoding saw (bit for bit: the engine's k-row pass == its 1-row passes)
  is checked on a generation of the tiny synthetic llama (int8 mode; float matrices stay float32
  there) and, marked ``model``, of SmolLM2 (the real int8 kernels).
- Each generation's stream is fixed by (block seed, index): the same block twice is the same,
  another seed is another.
- Through the command: a budget that ends after the pilot is inconclusive (exit 3), with 1 and
  2 workers; usage errors for weights without ours, and for a mode the engine path lacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.synthetic import Variant, write_synthetic
from verispec import cli
from verispec.decoder.ours import EngineDecoder
from verispec.reference.sampling import SamplingParams

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)
PARAMS = SamplingParams(temperature=1.0, top_k=0, repeat_penalty=1.5)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("engine-decoder") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def forced_equals_incremental(decoder: EngineDecoder, prompt: tuple[int, ...], generated: list[int]) -> bool:
    """The one-pass rows of prompt + generation == the prompt pass then one 1-row pass per token."""
    forced = decoder.forced_rows(list(prompt) + generated, len(prompt))
    model = decoder.model
    cache = model.new_cache(len(prompt) + len(generated))
    rows = [model.forward(list(prompt), cache).logits[-1]]
    rows += [model.forward([t], cache).logits[-1] for t in generated[:-1]]
    return bool(np.array_equal(forced, np.stack(rows)))


def prompt_of(decoder: EngineDecoder, text: str) -> tuple[int, ...]:
    tokenizer = decoder.tokenizer
    return tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))


def test_blocks_are_fixed_by_their_seed_and_rows_are_the_decoders(tiny_model: Path) -> None:
    decoder = EngineDecoder(tiny_model, "int8")
    prompt = prompt_of(decoder, "the model")
    first = decoder.generate(prompt, PARAMS, 12, 3, seed=5)
    assert decoder.generate(prompt, PARAMS, 12, 3, seed=5) == first
    assert decoder.generate(prompt, PARAMS, 12, 3, seed=6) != first
    for generation in first:
        assert sum(accepted + 1 for _, accepted in generation["cycles"]) >= len(generation["ids"])
        assert forced_equals_incremental(decoder, prompt, generation["ids"])


@pytest.mark.model
def test_smollm2_int8_forced_rows_are_its_decoding_rows(smollm2_path: Path) -> None:
    decoder = EngineDecoder(smollm2_path, "int8")
    prompt = prompt_of(decoder, "The cat sat on the")
    (generation,) = decoder.generate(
        prompt, SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5), 10, 1, seed=3
    )
    assert decoder.weights == "int8" and forced_equals_incremental(decoder, prompt, generation["ids"])


def run(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
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
            "--ours",
            "--weights",
            "int8",
            "--json",
            *extra,
        ]
    )
    return status, json.loads(capsys.readouterr().out)


def test_the_command_runs_the_engine_decoder_in_workers(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for workers in ("2",):  # the checker-side path is the same with 1 (tests/test_decoder_workers.py)
        status, report = run(tiny_model, capsys, "--budget", "0.001", "--workers", workers)
        result = report["results"][0]  # type: ignore[index]
        assert (status, result["state"], result["mode"]) == (3, "inconclusive", "depth")


def test_weights_usage_errors(tiny_model: Path) -> None:
    base = ["check-decoder", "--model", str(tiny_model)]
    assert cli.main([*base, "--mutant", "bonus_kv_dropped", "--weights", "int8"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--greedy"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--target-law", "two-sample"]) == 2
    assert cli.main([*base, "--ours", "--weights", "int8", "--depth", "0"]) == 2
