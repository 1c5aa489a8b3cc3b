"""Synthetic TinyLlama, Mistral and Phi-3 files: our reference forward against transformers.

tests/support/synthetic.py writes each file the way llama.cpp's converter does (names, keys, the llama Q/K
row permutation, phi3's fused QKV and gate/up), with weights quantized by gguf-py to Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, F16 and BF16. transformers loads the same file independently (gguf-py
dequantize, its own name map, un-permutation and un-fusing, its own PyTorch forward). Both see the
same dequantized numbers, so the tolerance is the float32 one of the real-model oracle:
max |Δlogit| <= 1e-3 (measured ~1e-5 on logits of magnitude ~12).

A mutant check keeps the comparison honest: swapping the RoPE pairing (NEOX <-> NORM) in our
config must break the agreement by orders of magnitude more than the tolerance.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.hf_oracle import build_hf_gemma4, hf_logits, load_hf_model
from tests.support.synthetic import GEMMA4_HF_CONFIG, VARIANTS, write_synthetic
from verispec.cli import main as verispec_main
from verispec.reference.config import ROPE_NEOX, ROPE_NORM
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.tokenizer import Tokenizer

pytestmark = [pytest.mark.oracle, pytest.mark.usefixtures("blas_single_thread")]

LOGIT_TOL = 1e-3
# Not a per-element derived tolerance (tests/support/tolerances.py), and why: transformers is another float32
# function, not another rounding order of ours: it computes RoPE angles in float32 (pos * inv_freq,
# off by ~u * pos radians, beyond the per-op rounding the spread model charges) and its own op order
# in norms and attention. Deriving it would need a model of transformers' kernels; a float64 spread of
# the 262k-row gemma3 head over 70 positions also costs minutes. So 1e-3 is NOT derived: it is a
# margin over measured differences (~6e-5), tighter than the derived spread of our own forward on
# the real models (~0.02-0.07, tests/test_engine.py), and could fail where transformers' kernels
# round differently (the derived tolerances of tests/support/tolerances.py).
N_GREEDY = 48
PROMPTS = ("the model says the token is fast", "a fast model is a model that says it")

# The transformers class each file loads as. Mistral loads as llama: transformers switches to
# MistralForCausalLM only when `"mistral" in general.name` holds for the name *list* it reads,
# i.e. for a name of exactly "mistral"; real Mistral GGUFs (and this one) load as llama, which
# computes the same function (the two differ only in a 4096-token sliding window).
HF_CLASS = {
    "tinyllama": "LlamaForCausalLM",
    "mistral": "LlamaForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "gemma4": "Gemma4ForCausalLM",
}


def _oracle(name: str, path: Path) -> Any:
    """transformers' model of the file: its GGUF loader, or for gemma4 (whose GGUF config mapping
    in transformers 5.24 is too thin for a small file, see tests/support/hf_oracle.py) its Gemma4 model
    built from the HF config the file was converted from, filled by gguf-py's dequantization."""
    if name == "gemma4":
        return build_hf_gemma4(path, GEMMA4_HF_CONFIG)
    return load_hf_model(path)


def _build(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("synthetic") / f"{name}.gguf"
    types = write_synthetic(path, name, seed=sorted(VARIANTS).index(name))
    return {
        "name": name,
        "path": path,
        "types": types,
        "ours": Model.load(path),
        "hf": _oracle(name, path),
        "tok": Tokenizer.from_file(path),
    }


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def synthetic(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _build(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _build("gemma4", tmp_path_factory)


def _ids(s: dict[str, Any], text: str) -> list[int]:
    tok: Tokenizer = s["tok"]
    return [int(t) for t in tok.encode(text, add_bos=tok.add_bos)]


def test_file_is_quantized_and_loaded_by_its_own_hf_class(synthetic: dict[str, Any]) -> None:
    with GGUFFile.open(synthetic["path"]) as f:
        found = {f.tensors[n].type_name for n in synthetic["types"]}
    assert {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32"} <= found
    assert type(synthetic["hf"]).__name__ == HF_CLASS[synthetic["name"]]


def test_prompt_logits_match_transformers(synthetic: dict[str, Any]) -> None:
    ours: Model = synthetic["ours"]
    for text in PROMPTS:
        ids = _ids(synthetic, text)
        expected = hf_logits(synthetic["hf"], ids)
        got = ours.forward(ids, ours.new_cache(len(ids))).logits
        assert got.shape == expected.shape
        delta = float(np.max(np.abs(got - expected)))
        assert delta <= LOGIT_TOL, f"{synthetic['name']} {text!r}: max |Δlogit| {delta:.3g}"
        assert float(np.max(np.abs(expected))) > 1.0  # the logits are not trivially small


def test_cached_greedy_decode_matches_transformers(synthetic: dict[str, Any]) -> None:
    ours: Model = synthetic["ours"]
    prompt = _ids(synthetic, PROMPTS[0])
    cache = ours.new_cache(len(prompt) + N_GREEDY)
    logits = ours.forward(prompt, cache).logits[-1]
    chosen, rows = [], []
    for _ in range(N_GREEDY):
        rows.append(logits)
        chosen.append(int(np.argmax(logits)))
        logits = ours.forward([chosen[-1]], cache).logits[-1]
    expected = hf_logits(synthetic["hf"], prompt + chosen)[len(prompt) - 1 : -1]
    assert [int(t) for t in expected.argmax(-1)] == chosen
    delta = float(np.max(np.abs(np.stack(rows) - expected)))
    assert delta <= LOGIT_TOL, f"{synthetic['name']}: cached decode max |Δlogit| {delta:.3g}"


def test_wrong_rope_pairing_is_caught(synthetic: dict[str, Any]) -> None:
    ours: Model = synthetic["ours"]
    swapped = ROPE_NORM if ours.config.rope_type == ROPE_NEOX else ROPE_NEOX
    mutant = Model(dataclasses.replace(ours.config, rope_type=swapped), ours.weights)
    ids = _ids(synthetic, PROMPTS[1])
    expected = hf_logits(synthetic["hf"], ids)
    delta = float(np.max(np.abs(mutant.forward(ids, mutant.new_cache(len(ids))).logits - expected)))
    assert delta > 100 * LOGIT_TOL


GEMMA4_MUTANTS = {
    "no value norm": {"value_norm": False},
    "no sliding window": {"sliding_window": 0},
    "global RoPE base on sliding layers": {"rope_base_local": 1_000_000.0},
    "gemma3 attention scale": {"attn_scale": 0.25},
    "one head dim for all layers": {"rope_dim_swa": 8},
}


@pytest.mark.parametrize("mutant", sorted(GEMMA4_MUTANTS))
def test_gemma4_mutants_are_caught(gemma4: dict[str, Any], mutant: str) -> None:
    """Each gemma4-specific rule, broken alone, breaks the agreement with transformers."""
    synthetic = gemma4
    ours: Model = synthetic["ours"]
    model = Model(dataclasses.replace(ours.config, **GEMMA4_MUTANTS[mutant]), ours.weights)
    ids = _ids(synthetic, PROMPTS[1])
    expected = hf_logits(synthetic["hf"], ids)
    delta = float(np.max(np.abs(model.forward(ids, model.new_cache(len(ids))).logits - expected)))
    assert delta > 100 * LOGIT_TOL, f"{mutant}: max |Δlogit| only {delta:.3g}"


def test_cli_inspect_and_generate(synthetic: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    path = str(synthetic["path"])
    assert verispec_main(["inspect", "--json", path]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == VARIANTS[synthetic["name"]].arch
    assert (
        verispec_main(
            [
                "generate",
                "--model",
                path,
                "--prompt",
                PROMPTS[0],
                "--max-tokens",
                "6",
                "--temperature",
                "0",
                "--json",
                "--engine",
                "reference",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["ids"]) == 6
    ours: Model = synthetic["ours"]
    prompt = _ids(synthetic, PROMPTS[0])
    assert out["prompt_ids"] == prompt
    expected = hf_logits(synthetic["hf"], prompt + out["ids"])[len(prompt) - 1 : -1]
    assert [int(t) for t in expected.argmax(-1)] == out["ids"]  # the CLI's greedy is transformers'
    assert ours.config.arch == info["architecture"]


def test_cli_default_engine_runs_every_architecture(
    synthetic: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`verispec generate` with the default `--engine fast` works on every synthetic file; an
    architecture the fast engine does not implement runs on the reference with a one-line note on
    stderr (never a silent switch); the exact mode gives the same greedy tokens as `--engine
    reference`."""
    from verispec.engine import FAST_ARCHITECTURES

    path = str(synthetic["path"])
    args = ["generate", "--model", path, "--prompt", PROMPTS[0], "--max-tokens", "4", "--temperature", "0", "--json"]
    assert verispec_main(args) == 0  # the default mode (auto: int8 where the fast engine runs it)
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["ids"]) == 4
    arch = VARIANTS[synthetic["name"]].arch
    noted = f"running {arch} on the reference engine" in captured.err
    assert noted == (arch not in FAST_ARCHITECTURES)
    # the exact mode computes the reference's function: the same greedy tokens
    assert verispec_main([*args, "--exact"]) == 0
    exact_ids = json.loads(capsys.readouterr().out)["ids"]
    assert verispec_main([*args, "--engine", "reference"]) == 0
    assert json.loads(capsys.readouterr().out)["ids"] == exact_ids
