"""`verispec tokenize` through verispec.cli.main, on the real models (ids from the golden data)."""

from __future__ import annotations

import json

import pytest

from verispec.cli import main

pytestmark = pytest.mark.model

CHAT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"  # a golden text


def test_text_output_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", "Hello world"]) == 0  # smollm2-135m is the default
    assert capsys.readouterr().out == "19556 905\n"


def test_json_is_exactly_model_and_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", "--model", "gemma3-270m", "--json", "Hello world"]) == 0
    assert json.loads(capsys.readouterr().out) == {"model": "gemma3-270m", "ids": [9259, 1902]}


def test_special_and_bos(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", "--model", "smollm2-135m", "--json", CHAT]) == 0
    plain = json.loads(capsys.readouterr().out)["ids"]
    assert plain[:7] == [44, 108, 306, 79, 3738, 108, 46]  # "<|im_start|>" as plain text
    assert main(["tokenize", "--model", "smollm2-135m", "--special", "--bos", "--json", CHAT]) == 0
    ids = json.loads(capsys.readouterr().out)["ids"]
    assert ids == [1, 1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198]  # BOS=1
    assert main(["tokenize", "--model", "gemma3-270m", "--bos", "Hello"]) == 0
    assert capsys.readouterr().out == "2 9259\n"


def test_pieces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", "--pieces", "Hello world"]) == 0
    assert capsys.readouterr().out == "19556\t'Hello'\t'Hello'\n905\t'Ġworld'\t' world'\n"


def test_unknown_model_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", "--model", "no-such-model", "x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "no-such-model" in captured.err
