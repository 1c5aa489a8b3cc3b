"""The ``transformers`` profile against transformers' own processors, as ``generate`` builds them.

For each seeded random case (vocabulary, float32 logits row, prompt and output ids, sampling
settings) the processors come from ``model._get_logits_processor`` on a tiny random Llama, after
``_prepare_generation_config`` (which fills generate's defaults: top_k 50 when unset) and
``_prepare_special_tokens`` (the EOS tensor min_new_tokens masks), exactly the calls ``generate``
makes; their scores go through ``softmax`` as ``generate`` samples them.

Error bound (float32 theirs, float64 ours, same float32 logits in). Let e = 2^-24 and S the largest
|score| after the penalty and the temperature (S <= max|l| * max(r, 1) / T). The penalty and the
temperature each round once (|d score| <= 2 e S); softmax's x - max and exp add (2 * 2 e S + e S + e)
per weight, and a float32 sum of V terms at most V e relative, so each probability is off by at most
p (8 S + 2 + V) e relative, plus 1e-30 for the subnormal. A decision of a filter (top-p's running
sum against 1 - top_p, min-p's ratio, top-k's k-th value) flips only when the two sides are within
that error: for continuous random rows it does not happen at these seeds, and if it did the test
would fail at that row, naming it (a flip moves a whole token's mass).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from verispec.spec.decoder.laws import transformers as hf_law

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EPS32 = 2.0**-24
TRIALS = 150


def _tiny_model() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=8,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _theirs(
    model: Any, settings: dict[str, Any], prompt: list[int], output: list[int], logits: np.ndarray
) -> np.ndarray:
    config, _ = model._prepare_generation_config(transformers.GenerationConfig(**settings))
    model._prepare_special_tokens(config, kwargs_has_attention_mask=False, device="cpu")
    processors = model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=len(prompt),
        encoder_input_ids=None,
        prefix_allowed_tokens_fn=None,
        logits_processor=None,
        device="cpu",
        model_kwargs={},
    )
    input_ids = torch.tensor([prompt + output], dtype=torch.long)
    scores = processors(input_ids, torch.tensor(logits[None, :], dtype=torch.float32))
    return np.asarray(torch.nn.functional.softmax(scores, dim=-1)[0].double().numpy())


def _case(rng: np.random.Generator) -> tuple[dict[str, Any], hf_law.Params, list[int], list[int], np.ndarray]:
    vocab = int(rng.integers(8, 300))
    logits = (rng.normal(size=vocab) * rng.uniform(0.5, 4.0)).astype(np.float32)
    prompt = [int(t) for t in rng.integers(vocab, size=int(rng.integers(1, 10)))]
    output = [int(t) for t in rng.integers(vocab, size=int(rng.integers(0, 8)))]
    eos = sorted({int(t) for t in rng.integers(vocab, size=int(rng.integers(1, 3)))})
    settings: dict[str, Any] = {
        "do_sample": True,
        "temperature": float(rng.choice([0.3, 0.7, 1.0, 1.5, 2.0])),
        "eos_token_id": eos,
        "pad_token_id": 0,
    }
    if rng.random() < 0.8:  # else generate's default top_k (50) applies
        settings["top_k"] = int(rng.choice([0, 1, 5, 20, vocab + 3]))
    settings["top_p"] = float(rng.choice([1.0, 0.5, 0.8, 0.95]))
    if rng.random() < 0.6:
        settings["min_p"] = float(rng.choice([0.0, 0.02, 0.1, 0.3]))
    settings["repetition_penalty"] = float(rng.choice([1.0, 0.8, 1.3, 2.0]))
    settings["min_new_tokens"] = int(rng.integers(0, 5))
    params = hf_law.Params(
        temperature=settings["temperature"],
        top_k=settings.get("top_k", hf_law.DEFAULT_TOP_K),
        top_p=settings["top_p"],
        min_p=settings.get("min_p"),
        repetition_penalty=settings["repetition_penalty"],
        min_new_tokens=settings["min_new_tokens"],
        eos_token_id=tuple(eos),
    )
    return settings, params, prompt, output, logits


@pytest.mark.oracle
def test_transformers_profile_matches_generate_processors() -> None:
    model = _tiny_model()
    rng = np.random.default_rng(20261201)
    worst = 0.0
    for trial in range(TRIALS):
        settings, params, prompt, output, logits = _case(rng)
        ours = hf_law.law(logits, prompt, output, params)
        theirs = _theirs(model, settings, prompt, output, logits)
        scale = float(np.abs(logits).max()) * max(params.repetition_penalty, 1.0) / params.temperature
        bound = ours * (8 * scale + 2 + logits.shape[0]) * EPS32 + 1e-30
        gap = np.abs(ours - theirs)
        assert np.all(gap <= bound), (trial, settings, int(np.argmax(gap - bound)), float(gap.max()))
        assert np.array_equal(ours > 0, theirs > 0), (trial, settings)
        worst = max(worst, float(np.max(gap / np.maximum(bound, 1e-300))))
    print(f"{TRIALS} rows: the largest |p_ours - p_theirs| is {worst:.3f} of its bound")
    assert worst <= 1.0


@pytest.mark.oracle
def test_the_default_top_k_is_what_generate_applies() -> None:
    """Unset top_k: generate keeps 50 tokens (a row of 200 distinct logits), and so does the profile."""
    model = _tiny_model()
    logits = np.linspace(3.0, -3.0, 200).astype(np.float32)
    theirs = _theirs(model, {"do_sample": True, "eos_token_id": [2], "pad_token_id": 0}, [1], [], logits)
    ours = hf_law.law(logits, [1], [], hf_law.Params(eos_token_id=(2,)))
    assert int((theirs > 0).sum()) == 50 == int((ours > 0).sum())
