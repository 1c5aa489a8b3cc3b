"""`verispec check-decoder --depth`: the depth test wired into the command, on a synthetic GGUF.

A tiny synthetic llama file with a real SentencePiece vocabulary (tests/support/synthetic.py: 322 ids, one
layer) so the command's tokenizer, EOG ids and reference forward all run. Exit statuses: 1 for a
mutant caught outright (the stream-sharing one repeats a generation at once: no statistics
needed, so the run is cheap), 3 when a one-second budget ends before the design's power, 2 for
a usage error; two-sample mode at depth through the command (the same mutant: identical request
pairs). What it cannot show: the statistical power (tests/test_decoder_depth.py and
tests/test_decoder_depth_two_sample.py do).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.synthetic import Variant, write_synthetic
from verispec import cli

TINY = Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "tiny.gguf"
    write_synthetic(path, TINY, quant_types=("F16",))
    return path


def run(tiny_model: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
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
            *extra,
        ]
    )
    return status, json.loads(capsys.readouterr().out)


def test_a_mutant_sharing_one_stream_fails(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = run(tiny_model, capsys, "--mutant", "requests_share_one_stream")
    result = report["results"][0]  # type: ignore[index]
    assert status == 1 and result["state"] == "failed" and "repeats an earlier one" in result["where"]


def test_a_budget_short_of_power_is_inconclusive(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = run(tiny_model, capsys, "--mutant", "bonus_kv_dropped", "--top-k", "4", "--budget", "0.001")
    result = report["results"][0]  # type: ignore[index]
    assert (status, result["state"], result["exit_status"]) == (3, "inconclusive", 3)


def test_depth_usage_errors(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["check-decoder", "--model", str(tiny_model), "--mutant", "bonus_kv_dropped", "--fraction", "0"]) == 2
    )
    assert cli.main(["check-decoder", "--model", str(tiny_model), "--ours", "--min-tokens", "3"]) == 2


def test_two_sample_mode_at_depth_sees_a_shared_stream(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--target-law two-sample --depth: the stream-sharing mutant's request pairs are identical
    (its plain generations are not): exit 1 at the first look, the feature named."""
    status, report = run(tiny_model, capsys, "--mutant", "requests_share_one_stream", "--target-law", "two-sample")
    result = report["results"][0]  # type: ignore[index]
    assert status == 1 and result["mode"] == "two-sample depth" and "identical request pairs" in result["where"]
    assert result["tv"] == 0.1  # the mode's default design


def test_two_sample_mode_at_depth_runs_our_loop_and_its_budget(
    tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Our decode loop through generate / generate_plain; a budget that ends after the pilot: exit 3."""
    status, report = run(tiny_model, capsys, "--ours", "--target-law", "two-sample", "--budget", "0.001")
    result = report["results"][0]  # type: ignore[index]
    assert (status, result["state"], result["exit_status"]) == (3, "inconclusive", 3)
