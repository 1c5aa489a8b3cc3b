"""`verispec demo` (what `make demo` runs): plain, speculative and llama.cpp plain side by side in
one run, the same prompt ids and the same number of tokens on every side; llama.cpp in a child
process, so a crash of it is its row of the table and the demo still exits 0; greedy speculation that
changes a token in any round fails it (exit 1). On a small synthetic
llama file with stand-in llama.cpp children (no llama_cpp needed); never asserts a speed."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import SEGV_AT_FIRST_RUN
from tests.support.synthetic import write_synthetic
from verispec import cli
from verispec.bench import llama, llama_child
from verispec.commands import demo as demo_command
from verispec.commands import generate
from verispec.exit_codes import EXIT_FAILED
from verispec.reference.drafts import DEFAULT_DRAFT
from verispec.workload import load_workload

# A llama.cpp stand-in that opens and then decodes exactly max_tokens tokens of id 5 per run.
DECODES = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "exit":
        break
    args = request["args"]
    if request["op"] == "open":
        result = {"available": True, "version": "stand-in", "system_info": "AVX2 = 1", "threads": 1,
                  "num_pred_tokens": args["k"], "n_ctx": args["n_ctx"]}
    else:
        assert args["end_ids"] == [] and args["ids"][0] >= 0  # the engine's prompt ids, EOG ignored
        result = {"tokens": [5] * args["max_tokens"], "tok_s": 1000.0}
    sys.stdout.write(json.dumps({"ok": True, "result": result}) + "\\n"); sys.stdout.flush()
"""


@pytest.fixture
def tinyllama(tmp_path: Path) -> Path:
    path = tmp_path / "tinyllama.gguf"
    write_synthetic(path, "tinyllama")
    return path


def demo(
    model: Path,
    child: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    draft: tuple[str, ...] = (),
) -> list[str]:
    monkeypatch.setattr(llama, "available", lambda: True)
    monkeypatch.setattr(llama_child, "child_argv", lambda: [sys.executable, "-c", child])
    status = cli.main(
        [
            "demo",
            *draft,
            "--model",
            str(model),
            "--no-chat",
            "--prompt",
            "one two one two one two",
            "--max-tokens",
            "6",
            "--repeats",
            "1",
            "--k",
            "3",
        ]
    )
    assert status == 0
    return capsys.readouterr().out.splitlines()


def test_the_three_sides_run_the_same_number_of_tokens(
    tinyllama: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = demo(tinyllama, DECODES, monkeypatch, capsys)
    assert "int8 mode, lossless w.r.t. the int8 model's own law" in lines[0]
    assert "; head kernel " in lines[0]  # mlas, or tile (ISA): the int8 law depends on it
    assert "; layer kernel " in lines[0]  # likewise its layers' kernel
    assert lines[1].startswith("prompt: the --prompt text, ") and lines[1].endswith(" prompt tokens")
    table = lines[lines.index(next(line for line in lines if "tokens on every side" in line)) :]
    n = int(table[0].split()[0])
    assert 1 <= n <= 6
    assert table[1].split()[0] == "plain" and table[1].split()[3] == "1.00x"
    assert table[2].startswith("  speculative auto ") and table[2].endswith("same tokens as plain: True")
    assert table[3].startswith("  llama.cpp plain") and "tok/s" in table[3] and "cut to our length" in table[3]


@pytest.mark.parametrize("layer_kernel", ["mlas", "tile"])
def test_the_first_line_names_the_layer_kernel_the_demo_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], layer_kernel: str
) -> None:
    """An all-Q8_0 file (every layer matrix has a block form, so the tile layer kernel can run it)
    on the layer kernel VERISPEC_INT8_LAYER_KERNEL names: the first line says which."""
    path = tmp_path / "tinyllama_q8_0.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0",))
    monkeypatch.setenv("VERISPEC_INT8_LAYER_KERNEL", layer_kernel)
    lines = demo(path, DECODES, monkeypatch, capsys)
    named = lines[0].split("; layer kernel ")[1]
    assert named == "mlas" if layer_kernel == "mlas" else named.startswith("tile ("), lines[0]
    assert any(line.startswith("  speculative auto ") and line.endswith("same tokens as plain: True") for line in lines)


def test_the_demo_runs_the_draft_generate_runs_by_default() -> None:
    """`make demo` shows speculation as `generate --draft` runs it: the same default draft."""
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    demo_command.register(commands)
    generate.register(commands)
    assert parser.parse_args(["demo"]).draft == DEFAULT_DRAFT == "auto"
    assert parser.parse_args(["generate", "--prompt", "x", "--draft"]).draft == DEFAULT_DRAFT


def test_a_named_draft_still_runs_and_is_the_speculative_row(
    tinyllama: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--draft ngram (the prompt-lookup chain, adaptive k): lossless, its row named after it."""
    lines = demo(tinyllama, DECODES, monkeypatch, capsys, ("--draft", "ngram"))
    row = next(line for line in lines if line.startswith("  speculative "))
    assert row.startswith("  speculative ngram ") and row.endswith("same tokens as plain: True")


def test_a_crashing_llama_cpp_is_its_row_and_the_demo_exits_0(
    tinyllama: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = demo(tinyllama, SEGV_AT_FIRST_RUN, monkeypatch, capsys)
    row = next(line for line in lines if line.startswith("  llama.cpp plain"))
    assert "crashed (killed by SIGSEGV, exit -11) during run" in row
    assert any(line.startswith("  speculative auto ") for line in lines)


def test_the_default_prompt_is_the_workloads_first_summarisation_request() -> None:
    """Grounded work (a report to summarise), taken from the workload as it is, and said so."""
    args = argparse.Namespace(prompt=None)
    said = demo_command.describe_prompt(args)
    item = next(i for i in load_workload() if i.id == demo_command.DEMO_REQUEST)
    assert item.category == "summarisation" and item == next(
        i for i in load_workload() if i.category == "summarisation"
    )
    assert args.prompt == item.messages[-1].content
    assert said.startswith("a summarisation request (verispec/data/workload.jsonl summarisation-1: ")
    own = argparse.Namespace(prompt="my text")
    assert demo_command.describe_prompt(own) == "the --prompt text" and own.prompt == "my text"


def test_speculation_that_changes_a_token_in_any_round_fails_the_demo(
    tinyllama: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Greedy speculation must give plain's tokens in every round, not only in the fastest one the
    table keeps: a decoder that changes one token in its second round makes the row say False, an
    error on stderr and exit status 1 (EXIT_FAILED)."""
    real = demo_command.speculative_generate
    rounds = iter(range(100))

    def second_round_off_by_one(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if next(rounds) == 1:
            ids = (result.generation.ids[0] + 1, *result.generation.ids[1:])
            return dataclasses.replace(result, generation=dataclasses.replace(result.generation, ids=ids))
        return result

    monkeypatch.setattr(demo_command, "speculative_generate", second_round_off_by_one)
    monkeypatch.setattr(llama, "available", lambda: True)
    monkeypatch.setattr(llama_child, "child_argv", lambda: [sys.executable, "-c", DECODES])
    argv = ["demo", "--model", str(tinyllama), "--no-chat", "--prompt", "one two one two", "--max-tokens", "6"]
    status = cli.main([*argv, "--repeats", "2", "--k", "3"])
    captured = capsys.readouterr()
    row = next(line for line in captured.out.splitlines() if line.startswith("  speculative auto "))
    assert row.endswith("same tokens as plain: False")
    assert "not lossless" in captured.err and status == EXIT_FAILED
