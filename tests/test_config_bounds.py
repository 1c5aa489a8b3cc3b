"""Metadata is bounded before it sizes anything: each hostile-metadata case a typed error.

Built from the corpus seeds (tests/support/model_corpus.py) with one value changed, so each test names
exactly one bad field; the CLI turns each into one line on stderr and exit status 2.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.gguf_builder import F32, VT, Meta, Tensor, Value
from tests.support.model_corpus import SEEDS, ModelFile
from verispec.cli import main
from verispec.reference.config import MAX_CONTEXT_LENGTH, Config
from verispec.reference.errors import ModelError
from verispec.reference.gguf import GGUFFile, GGUFLimitExceeded
from verispec.reference.model import Model


def with_value(arch: str, key: str, value: Meta) -> bytes:
    seed = SEEDS[arch]
    meta = [(k, value if k == key else v) for k, v in seed.metadata]
    if all(k != key for k, _ in seed.metadata):
        meta.append((key, value))
    return replace(seed, metadata=meta).to_bytes()


def with_tensor(arch: str, name: str, tensor: Tensor) -> bytes:
    seed = SEEDS[arch]
    return ModelFile(seed.metadata, [tensor if t.name == name else t for t in seed.tensors]).to_bytes()


def config_error(data: bytes) -> str:
    with pytest.raises(ModelError) as caught:
        Config.from_gguf(GGUFFile.from_bytes(data))
    return str(caught.value)


def test_an_empty_tensor_with_a_huge_dim_is_refused_by_the_parser() -> None:
    # [0, 2^62] holds no element, but no array of that shape exists: GGUFFile.dequantize used to
    # raise numpy's ValueError from the reshape.
    data = with_tensor("llama", "output_norm.weight", Tensor("output_norm.weight", F32, [0, 2**62]))
    with pytest.raises(GGUFLimitExceeded, match="overflow"):
        GGUFFile.from_bytes(data)
    # the largest empty shape that can exist still parses and decodes to its (empty) shape
    ok = with_tensor("llama", "output_norm.weight", Tensor("output_norm.weight", F32, [0, 2**40]))
    assert GGUFFile.from_bytes(ok).dequantize("output_norm.weight").shape == (2**40, 0)


@pytest.mark.parametrize("dims", [[], [0, 32], [32, 0], [32]])
def test_token_embd_must_be_a_non_empty_matrix(dims: list[int]) -> None:
    # zero dims used to raise IndexError in Config.from_gguf
    data = with_tensor("llama", "token_embd.weight", Tensor("token_embd.weight", F32, dims, bytes(4 * math.prod(dims))))
    assert "token_embd.weight" in config_error(data)


@pytest.mark.parametrize(
    ("arch", "value"),
    [
        ("llama", Value(VT.UINT32, 2**32 - 1)),
        ("llama", Value(VT.UINT64, 2**63)),
        ("llama", Value(VT.UINT32, 3)),
        ("gemma3", Value(VT.UINT64, 2**64 - 1)),
        ("gemma3", Value(VT.INT64, -1)),
        ("gemma3", Value(VT.UINT32, 0)),
    ],
)
def test_block_count_is_bounded_by_the_layers_present(arch: str, value: Value) -> None:
    # 2^32 - 1 built a 32 GiB tuple, 2^63 overflowed, gemma3's 2^64 - 1 looped in _sliding_layers
    started = time.process_time()
    message = config_error(with_value(arch, f"{arch}.block_count", value))
    assert "n_layer" in message or ("block_count" in message and "2 layers" in message)
    assert time.process_time() - started < 1.0  # CPU seconds: a loop over 2^64 layers never ends


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("embedding_length", Value(VT.UINT32, 64), "token_embd.weight has 32 columns"),
        ("embedding_length", Value(VT.UINT64, 2**64 - 1), "exceeds every tensor dim"),
        ("feed_forward_length", Value(VT.UINT32, 2**31), "exceeds every tensor dim"),
        ("attention.head_count", Value(VT.UINT32, 2**20), "exceeds every tensor dim"),
        ("attention.key_length", Value(VT.UINT32, 2**16), "exceeds every tensor dim"),
        ("context_length", Value(VT.UINT64, MAX_CONTEXT_LENGTH + 1), "context_length"),
        ("rope.freq_base", Value(VT.FLOAT32, math.nan), "rope.freq_base"),
        ("rope.freq_base", Value(VT.FLOAT32, 0.0), "rope.freq_base"),
        ("attention.layer_norm_rms_epsilon", Value(VT.FLOAT32, -1.0), "epsilon"),
        ("final_logit_softcapping", Value(VT.FLOAT32, math.inf), "softcapping"),
        ("attention.sliding_window_pattern", Value(VT.STRING, "none"), "sliding_window_pattern"),
    ],
)
def test_hyperparameters_are_bounded(key: str, value: Value, match: str) -> None:
    assert match in config_error(with_value("gemma3", f"gemma3.{key}", value))


def test_the_bounds_leave_wide_attention_alone() -> None:
    # gemma3-270m has n_head * head_dim = 1024 > n_embd = 640: the bound is the widest tensor dim,
    # not n_embd. Here 4 heads x 16 = 64 > n_embd = 32 passes the config; the load then names the
    # tensor whose shape disagrees (the seed's attn_q has 4 x 8 rows).
    seed = SEEDS["gemma3"]
    wide = {
        "gemma3.attention.key_length": Value(VT.UINT32, 16),
        "gemma3.attention.value_length": Value(VT.UINT32, 16),
        "gemma3.rope.dimension_count": Value(VT.UINT32, 16),
    }
    data = replace(seed, metadata=[(k, wide.get(k, v)) for k, v in seed.metadata]).to_bytes()
    with GGUFFile.from_bytes(data) as f:
        assert Config.from_gguf(f).head_dim == 16
        with pytest.raises(ModelError, match=r"attn_q\.weight.*shape"):
            Model.load(f)


@pytest.mark.parametrize("command", ["generate", "inspect", "tokenize"])
def test_the_cli_prints_one_line(tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(with_value("gemma3", "gemma3.block_count", Value(VT.UINT64, 2**64 - 1)))
    if command == "inspect":  # inspect shows metadata as it is; a broken tensor table is refused
        path.write_bytes(with_tensor("llama", "output_norm.weight", Tensor("output_norm.weight", F32, [0, 2**62])))
        argv = ["inspect", str(path)]
    elif command == "tokenize":
        path.write_bytes(with_value("llama", "tokenizer.ggml.tokens", Value(VT.UINT64, 2**64 - 1)))
        argv = ["tokenize", "--model", str(path), "hi"]
    else:
        argv = ["generate", "--model", str(path), "--prompt", "hi", "--max-tokens", "1"]
    assert main(argv) == 4  # a model/input error (verispec/exit_codes.py)
    err = capsys.readouterr().err
    assert err.startswith("verispec: error: ") and err.count("\n") == 1, err
