"""`verispec inspect MODEL [--json]` through verispec.cli.main."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.support import gguf_oracle
from tests.support.gguf_builder import small_model
from verispec import registry
from verispec.cli import main


def run_json(capsys: pytest.CaptureFixture[str], model: str) -> dict[str, Any]:
    assert main(["inspect", model, "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.model
@pytest.mark.oracle
def test_json_report_of_real_models(
    model_name: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    path: Path = request.getfixturevalue("smollm2_path" if model_name == "smollm2-135m" else "gemma3_path")
    report = run_json(capsys, model_name)
    reader = gguf_oracle.reader(path)
    expected = {
        "smollm2-135m": ("llama", "gpt2", "smollm", 49152, 30),
        "gemma3-270m": ("gemma3", "llama", "default", 262144, 18),
    }[model_name]
    arch, tok_model, tok_pre, vocab, blocks = expected
    assert report["sha256"] == registry.REGISTRY[model_name].sha256
    assert report["architecture"] == arch
    assert report["tokenizer"] == {"model": tok_model, "pre": tok_pre, "vocab_size": vocab}
    assert report["hyperparameters"][f"{arch}.block_count"] == blocks
    arch_keys = [k for k in reader.fields if k.startswith(f"{arch}.")]
    assert list(report["hyperparameters"]) == arch_keys
    assert [t["name"] for t in report["tensors"]] == [t.name for t in reader.tensors]
    for row, t in zip(report["tensors"], reader.tensors):
        assert row["type"] == t.tensor_type.name
        assert row["shape"] == [int(d) for d in reversed(t.shape)]
        assert row["bytes"] == t.n_bytes
    assert report["n_parameters"] == sum(int(t.n_elements) for t in reader.tensors)


@pytest.mark.model
def test_text_report_of_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "smollm2-135m"]) == 0
    out = capsys.readouterr().out
    assert "architecture  llama" in out
    assert registry.REGISTRY["smollm2-135m"].sha256 in out
    assert "tokenizer     gpt2 (pre: smollm), 49152 tokens" in out
    assert "llama.attention.layer_norm_rms_epsilon  1e-05" in out  # f32 shown in shortest form
    line = next(row for row in out.splitlines() if row.strip().startswith("token_embd.weight"))
    assert line.split() == ["token_embd.weight", "Q8_0", "49152x576", "30,081,024"]


def test_small_file_by_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    built = small_model()
    path = tmp_path / "toy.gguf"
    path.write_bytes(built.data)
    report = run_json(capsys, str(path))
    assert report["sha256"] == hashlib.sha256(built.data).hexdigest()
    assert report["architecture"] == "toy"
    assert report["hyperparameters"] == {
        "toy.block_count": 2,
        "toy.rope.freq_base": 10000.0,
        "toy.flags": [True, False, True],
        "toy.i8": -5,
        "toy.u64": 2**64 - 1,
        "toy.f64": -0.25,
        "toy.nested": [[1, -2], ["x"]],
    }
    assert report["tokenizer"] == {"model": "gpt2", "pre": None, "vocab_size": 4}
    assert report["tensors"][1] == {"name": "embd.weight", "type": "Q4_0", "shape": [2, 32], "bytes": 36}
    assert report["file_size"] == len(built.data)


def test_malformed_file_is_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", 1) + bytes(16))
    assert main(["inspect", str(path)]) == 4  # a model/input error (verispec/exit_codes.py)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "offset 4" in lines[0] and "version is 1" in lines[0]


def test_unknown_model_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-model" in err[0]
