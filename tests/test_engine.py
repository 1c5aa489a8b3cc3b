"""Differential tests: engine/ (fast) against reference/ (the meaning), on real and tiny models.

Tolerance for logits and hidden states: derived per element, never hand-picked. The two forwards
compute the same function of the same dequantized float32 weights and differ only in float32
rounding order (fused matmuls, BLAS blocking, another span shape), so each element may differ by
tests/support/tolerances.py's 2 lambda sigma: sigma is its float32 rounding spread under the probabilistic
rounding model (each operation off by a relative u = 2^-24, a length-n dot product by
u sqrt(n) |a|.|b| in any order), propagated through every layer by Monte Carlo in float64 (the real
models with 16 samples: lambda = 31). What that detects: on the tiny models (tolerances ~1e-4) any
wrong mask, RoPE, norm or fused-row order; on the 30-layer real models the tolerance is ~0.02 on
logits of spread ~8 (the model is conservative: real differences stay below 0.2 sigma), which still
catches a norm eps 10x off, an attention scale 1% off (asserted below) or a RoPE pairing swap, but
not a logit shift of ~0.007 such as a RoPE base 1% off -- the tiny-model tests catch those. Tokens are compared exactly: greedy ids, and sampled ids for the same seed
(the engine's law and draw are bit-identical to the reference's, test_engine_sampling).

Reference decoding is slow (~1 s a token here), so the reference side of a decode test is one
teacher-forced pass over prompt + the engine's tokens, replayed through the reference's own law and
draw: the reference loop would emit exactly these tokens iff every replayed step agrees.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import GOLDEN_KEYS
from tests.support.tolerances import ForwardSpread, assert_within, forward_spread, truncated
from verispec.engine import load_model
from verispec.engine.generate import generate as fast_generate
from verispec.engine.model import FastModel
from verispec.engine.weights import InsufficientMemory, check_fits, estimate_bytes
from verispec.reference import sampling as ref_sampling
from verispec.reference.errors import ContextOverflow, ModelError
from verispec.reference.generate import GenerationRequest
from verispec.reference.gguf import GGUFFile
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

DECODE_STEPS = 12
REAL_SAMPLES = 16  # Monte Carlo samples for a real model's tolerances (cost: ~a forward per 2 samples)


def _logit_tolerance(spread: ForwardSpread) -> Any:
    assert spread.logits is not None
    return spread.logits.tolerance


NAMES = ["smollm2-135m", "gemma3-270m"]


# -- tiny random models: every architecture feature, exactly --------------------------------------


TINY_CASES: list[tuple[str, dict[str, Any]]] = [
    ("llama", {}),
    ("llama", {"tied": False, "n_head_kv": 4}),
    ("gemma3", {"sliding_window": 3, "softcap": 30.0, "head_dim": 16}),
]


@pytest.mark.parametrize("arch,options", TINY_CASES)
def test_tiny_forward_matches_reference(tiny_gguf: Any, arch: str, options: dict[str, Any]) -> None:
    path = tiny_gguf(arch, **options)
    ref, fast = Model.load(path), FastModel.load(path)
    ids = [3, 17, 5, 9, 40, 2, 11, 63, 0, 8]
    a = ref.forward(ids, ref.new_cache(32), return_hidden=True)
    cache = fast.new_cache(32)
    b = fast.forward(ids[:6], cache, return_hidden=True)
    c = fast.forward(ids[6:], cache)  # a second span over the cache (sliding window crosses it)
    assert a.hidden is not None and b.hidden is not None
    spread = forward_spread(ref, tuple(ids))
    tolerance = _logit_tolerance(spread)
    assert_within(b.logits, a.logits[:6], tolerance[:6], "first span's logits")
    assert_within(c.logits, a.logits[6:], tolerance[6:], "second span's logits")
    assert_within(b.hidden, a.hidden[:, :6], spread.hidden.tolerance[:, :6], "first span's hidden states")
    last = fast.forward(ids[-1:], fast.new_cache(32), positions=[9]).logits  # one token at pos 9
    alone = ref.forward(ids[-1:], ref.new_cache(32), positions=[9]).logits
    assert_within(last, alone, _logit_tolerance(forward_spread(ref, tuple(ids[-1:]), (9,))), "one token at 9")


def test_tiny_rollback_and_forward_layers(tiny_gguf: Any) -> None:
    path = tiny_gguf("gemma3", sliding_window=2)
    ref, fast = Model.load(path), FastModel.load(path)
    cache = fast.new_cache(16)
    fast.forward([1, 2, 3, 4], cache)
    fast.forward([50, 51, 52], cache)  # a rejected speculation
    cache.truncate(4)  # O(1) rollback
    again = fast.forward([5, 6], cache).logits
    fresh = ref.forward([1, 2, 3, 4, 5, 6], ref.new_cache(16)).logits[4:]
    assert_within(again, fresh, _logit_tolerance(forward_spread(ref, (1, 2, 3, 4, 5, 6)))[4:], "after rollback")
    # forward_layers + head == forward (the seam an early exit / layer-skip draft uses)
    rc, fc = ref.new_cache(16), fast.new_cache(16)
    x_ref = ref.forward_layers(ref.embed([7, 8]), rc, 0, 1, [0, 1])
    x_fast = fast.forward_layers(fast.embed([7, 8]), fc, 0, 1, [0, 1])
    two_layers = forward_spread(truncated(ref, 2), (7, 8))  # embed, layers 0..1, head
    assert_within(x_fast, x_ref, two_layers.hidden.tolerance[2], "layers 0..1")
    assert_within(fast.head(x_fast), ref.head(x_ref), _logit_tolerance(two_layers), "head after layer 1")


def test_tiny_errors_as_reference(tiny_gguf: Any) -> None:
    fast = FastModel.load(tiny_gguf("llama", context_length=8))
    cache = fast.new_cache(4)
    with pytest.raises(ContextOverflow):
        fast.forward([1, 2, 3, 4, 5], cache)
    assert cache.length == 0
    with pytest.raises(ModelError, match="token id 64"):
        fast.forward([64], cache)
    with pytest.raises(ContextOverflow):
        fast.new_cache(9)
    with pytest.raises(ModelError, match="engine 'turbo'"):
        load_model(tiny_gguf("llama"), engine="turbo")
    with pytest.raises(ModelError, match="quantized"):
        load_model(tiny_gguf("llama"), engine="reference", weights="quantized")
    with pytest.raises(ModelError, match="weights mode 'f16'"):
        FastModel.load(tiny_gguf("llama"), weights="f16")


def test_tiny_non_finite_names_the_layer(tiny_gguf: Any) -> None:
    fast = FastModel.load(tiny_gguf("llama", weight_scale=1e30))
    cache = fast.new_cache(8)
    with pytest.raises(ModelError, match="non-finite"):
        fast.forward([1, 2, 3], cache)
    assert cache.length == 0


# -- memory budget ---------------------------------------------------------------------------------


@pytest.mark.model
def test_memory_estimate_and_refusal(smollm2_path: Path) -> None:
    with GGUFFile.open(smollm2_path) as f:
        f32, quantized = estimate_bytes(f, "f32"), estimate_bytes(f, "quantized")
        n_weights = sum(t.n_elements for t in f.tensors.values())
        assert f32 == 4 * n_weights
        assert quantized < f32 / 2  # Q4_1 blocks plus one float32 layer and one head chunk
        with pytest.raises(InsufficientMemory, match=r"'f32' needs about \d+ MiB.*--weights quantized"):
            check_fits(f, "f32", available=f32)  # the weights alone, without headroom: refused
        assert check_fits(f, "quantized", available=f32) == quantized


def test_memory_release_looks_up_the_c_library_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load hands freed memory back after every session it builds. The C library is the one the
    interpreter runs on, looked up once a process and never through ``ctypes.util.find_library``
    (which runs ``ldconfig`` in a child process); every release still calls ``malloc_trim``
    (glibc) or nothing (where there is none)."""
    import ctypes
    import ctypes.util

    from verispec.engine import matmul, pages

    found: list[str] = []
    opened: list[object] = []
    real_cdll = ctypes.CDLL

    def counted_find(name: str) -> str | None:
        found.append(name)
        return None

    def counted_cdll(name: object, *args: object, **kwargs: object) -> object:
        opened.append(name)
        return real_cdll(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ctypes.util, "find_library", counted_find)
    monkeypatch.setattr(ctypes, "CDLL", counted_cdll)
    matmul.libc_malloc_trim.cache_clear()
    pages.libc.cache_clear()
    try:
        for _ in range(3):
            matmul.release_freed_memory()
        assert found == [] and opened == [None]
        trim = matmul.libc_malloc_trim()
        assert trim is None or trim(0) in (0, 1)  # glibc: 1 if memory was released, else 0
    finally:
        matmul.libc_malloc_trim.cache_clear()  # the next lookups are the real functions'
        pages.libc.cache_clear()
        pages.libc_madvise.cache_clear()


@pytest.mark.model
def test_quantized_weights_mode_matches_f32(smollm2_path: Path, smollm2_model: Model) -> None:
    quantized = FastModel.load(smollm2_path, weights="quantized")
    ids = [1, 504, 2365, 6354]
    got = quantized.forward(ids, quantized.new_cache(8)).logits
    want = smollm2_model.forward(ids, smollm2_model.new_cache(8)).logits
    tolerance = _logit_tolerance(forward_spread(smollm2_model, tuple(ids), samples=REAL_SAMPLES))
    assert_within(got, want, tolerance, "quantized-mode logits")


# -- the real models: golden prompts ------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs(
    smollm2_path: Path, gemma3_path: Path, smollm2_model: Model, gemma3_model: Model, f32_real_model: Any
) -> dict[str, tuple[Model, FastModel, Tokenizer]]:
    """(reference, fast engine's f32 mode, tokenizer) per real model; the fast models are the
    session's (tests/conftest.py f32_real_model: ``FastModel.load(path)``, loaded once)."""
    return {
        "smollm2-135m": (smollm2_model, f32_real_model("smollm2-135m"), Tokenizer.from_file(smollm2_path)),
        "gemma3-270m": (gemma3_model, f32_real_model("gemma3-270m"), Tokenizer.from_file(gemma3_path)),
    }


@pytest.mark.model
@pytest.mark.parametrize("name", NAMES)
def test_golden_prompt_logits_match_reference(pairs: dict[str, Any], golden: dict[str, Any], name: str) -> None:
    ref, fast, _ = pairs[name]
    for item in golden["models"][GOLDEN_KEYS[name]]["logits"][:1]:  # one prompt: the reference prefill is slow
        ids = item["prompt_ids"]
        want = ref.forward(ids, ref.new_cache(len(ids))).logits  # [T, V]
        got = fast.forward(ids, fast.new_cache(len(ids))).logits
        assert got.shape == want.shape
        tolerance = _logit_tolerance(forward_spread(ref, tuple(ids), samples=REAL_SAMPLES))
        assert_within(got, want, tolerance, f"{name} engine vs reference")
        last = fast.forward(ids, fast.new_cache(len(ids)), last_only=True).logits
        assert_within(last, got[-1:], tolerance[-1:], f"{name} 1-row vs T-row head")
        # teeth at this tolerance: an attention scale 1% off is caught
        mutant = Model(dataclasses.replace(ref.config, attn_scale=ref.config.attn_scale * 1.01), ref.weights)
        with pytest.raises(AssertionError, match="outside the derived"):
            assert_within(mutant.forward(ids, mutant.new_cache(len(ids))).logits, want, tolerance, "mutant")


def _replay(ref: Model, prompt: list[int], ids: list[int], params: SamplingParams, seed: int) -> list[int]:
    """The reference's tokens for this prompt and seed, given that the engine emitted ``ids``:
    one reference pass over prompt + ids, then the reference law and draw step by step."""
    rows = ref.forward(prompt + ids[:-1], ref.new_cache(len(prompt) + len(ids))).logits[len(prompt) - 1 :]
    rng = np.random.default_rng(seed)
    history = list(prompt)
    out: list[int] = []
    for row in rows:
        token = ref_sampling.sample(ref_sampling.target_distribution(row, history, params), rng)
        out.append(token)
        history.append(token)
    return out


@pytest.mark.model
@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_identical(pairs: dict[str, Any], golden: dict[str, Any], name: str) -> None:
    ref, fast, tokenizer = pairs[name]
    prompt = list(golden["models"][GOLDEN_KEYS[name]]["greedy"][0]["prompt_ids"])
    params = SamplingParams(temperature=0.0)
    request = GenerationRequest(tuple(prompt), params=params, max_tokens=DECODE_STEPS, seed=0)
    result = fast_generate(fast, tokenizer, request)
    ids = list(result.ids)
    assert len(ids) >= 4
    assert _replay(ref, prompt, ids, params, seed=0) == ids


@pytest.mark.model
@pytest.mark.parametrize("name", NAMES)
def test_sampled_tokens_identical_for_the_same_seed(pairs: dict[str, Any], golden: dict[str, Any], name: str) -> None:
    ref, fast, tokenizer = pairs[name]
    prompt = list(golden["models"][GOLDEN_KEYS[name]]["greedy"][1]["prompt_ids"])
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1)
    request = GenerationRequest(tuple(prompt), params=params, max_tokens=DECODE_STEPS, seed=1234)
    ids = list(fast_generate(fast, tokenizer, request).ids)
    assert _replay(ref, prompt, ids, params, seed=1234) == ids


# -- synthetic quantized files (every quant type in several roles) and unsupported architectures ----


@pytest.mark.parametrize("variant", ["tinyllama", "mistral"])
def test_synthetic_quantized_llamas_match_reference(tmp_path: Path, variant: str) -> None:
    from tests.support.synthetic import write_synthetic

    path = tmp_path / f"{variant}.gguf"
    write_synthetic(path, variant)
    ref, fast = Model.load(path), FastModel.load(path)
    quantized = FastModel.load(path, weights="quantized")
    ids = [1, 5, 9, 2, 7, 3]
    want = ref.forward(ids, ref.new_cache(8)).logits
    tolerance = _logit_tolerance(forward_spread(ref, tuple(ids)))
    for model in (fast, quantized):
        got = model.forward(ids, model.new_cache(8)).logits
        assert_within(got, want, tolerance, f"{variant} engine vs reference")


def test_architectures_the_fast_engine_lacks_run_on_the_reference(tmp_path: Path) -> None:
    from tests.support.synthetic import write_synthetic
    from verispec.reference.errors import UnsupportedArchitecture

    path = tmp_path / "phi3.gguf"
    write_synthetic(path, "phi3")
    with pytest.raises(UnsupportedArchitecture, match="'phi3'.*--engine reference"):
        FastModel.load(path)
    assert isinstance(load_model(path, engine="fast"), Model)  # the CLI default still works
    with pytest.raises(UnsupportedArchitecture, match="'phi3'"):
        load_model(path, engine="fast", weights="quantized")
