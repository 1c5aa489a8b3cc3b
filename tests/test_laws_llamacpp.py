"""The ``llama.cpp`` profile against llama-cpp-python's own sampler chain on seeded random rows.

The chain is built by ``Llama._init_sampler`` itself (the function ``Llama.generate`` calls), on a
stand-in ``self`` that carries only what it reads (vocabulary size, penalty window, seed): the same
samplers in the same order, the logit bias as ``create_completion``'s logits processor (its
five lines: ``new_scores[id] = bias + scores[id]``). The window is fed as ``generate`` feeds it: the
chain accepts each OUTPUT token (``llama_sampler_sample`` accepts the token it draws; the prompt is
never accepted). Applying the chain to a token-data array in id order leaves the survivors with
``p`` set by the final ``dist`` sampler (expf(l - max) / their double sum), which is the law.

Error bound (float32 theirs, float64 ours): with e = 2^-24, S = max|l| * max(r, 1) / T + the largest
count * |frequency| + |presence|, each op rounds once (penalty, subtraction, temperature:
|d l| <= 3 e S), expf of l - max adds 2 e S + e, and the normalization <= V e: |d p| <= p (8 S + 2 + V) e.
Skips when llama_cpp is not importable.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from verispec.spec.decoder.laws import llamacpp as law

llama_cpp = pytest.importorskip("llama_cpp")

EPS32 = 2.0**-24
TRIALS = 200


def _bias_processor(bias: dict[int, float]) -> Any:
    """``Llama.create_completion``'s logit-bias processor, as written there."""

    def logit_bias_processor(input_ids: Any, scores: Any) -> Any:
        new_scores = np.copy(scores)
        for input_id, score in bias.items():
            new_scores[input_id] = score + scores[input_id]
        return new_scores

    return llama_cpp.LogitsProcessorList([logit_bias_processor])


def _theirs(params: law.Params, output: list[int], logits: np.ndarray) -> dict[int, float]:
    vocab = logits.shape[0]
    owner = SimpleNamespace(
        _n_vocab=vocab,
        last_n_tokens_size=params.penalty_last_n,
        _seed=1234,
        _input_ids=np.zeros(0, dtype=np.intc),
        _model=None,
    )
    processors = _bias_processor(dict(params.logit_bias)) if params.logit_bias else None
    sampler = llama_cpp.Llama._init_sampler(
        owner,
        top_k=params.top_k,
        top_p=params.top_p,
        min_p=params.min_p,
        typical_p=params.typical_p,
        temp=params.temp,
        repeat_penalty=params.repeat_penalty,
        frequency_penalty=params.frequency_penalty,
        presence_penalty=params.presence_penalty,
        logits_processor=processors,
    )
    for token in output:
        sampler.accept(token)
    data = (llama_cpp.llama_token_data * vocab)(
        *[llama_cpp.llama_token_data(i, float(logits[i]), 0.0) for i in range(vocab)]
    )
    array = llama_cpp.llama_token_data_array(
        data=ctypes.cast(data, llama_cpp.llama_token_data_p), size=vocab, selected=-1, sorted=False
    )
    llama_cpp.llama_sampler_apply(sampler.sampler, ctypes.byref(array))
    return {int(array.data[i].id): float(array.data[i].p) for i in range(array.size)}


def _case(rng: np.random.Generator) -> tuple[law.Params, list[int], list[int], np.ndarray]:
    vocab = int(rng.integers(8, 300))
    logits = (rng.normal(size=vocab) * rng.uniform(0.5, 4.0)).astype(np.float32)
    prompt = [int(t) for t in rng.integers(vocab, size=int(rng.integers(1, 10)))]
    output = [int(t) for t in rng.integers(min(vocab, 12), size=int(rng.integers(0, 20)))]
    bias = {int(t): float(rng.normal() * 2) for t in rng.integers(vocab, size=int(rng.integers(0, 3)))}
    params = law.Params(
        temp=float(rng.choice([-1.0, 0.3, 0.8, 1.0, 1.7])),
        top_k=int(rng.choice([0, 1, 5, 40, vocab + 3])),
        top_p=float(rng.choice([1.0, 0.5, 0.9, 0.95])),
        min_p=float(rng.choice([0.0, 0.05, 0.2])),
        typical_p=float(rng.choice([1.0, 1.0, 0.9, 0.5])),
        repeat_penalty=float(rng.choice([1.0, 0.9, 1.3])),
        frequency_penalty=float(rng.choice([0.0, 0.4])),
        presence_penalty=float(rng.choice([0.0, -0.3, 0.6])),
        penalty_last_n=int(rng.choice([0, 4, 64])),
        logit_bias=bias or None,
    )
    return params, prompt, output, logits


@pytest.mark.oracle
def test_llamacpp_profile_matches_the_sampler_chain() -> None:
    rng = np.random.default_rng(20261201)
    worst, sizes = 0.0, []
    for trial in range(TRIALS):
        params, prompt, output, logits = _case(rng)
        ours = law.law(logits, prompt, output, params)
        theirs = np.zeros_like(ours)
        for token, p in _theirs(params, output, logits).items():
            theirs[token] = p
        window = law.window(prompt, output, params)
        counts = max((window.count(t) for t in set(window)), default=0)
        temp = abs(params.temp) if params.temp else 1.0
        scale = (
            (float(np.abs(logits).max()) + sum(abs(b) for b in (params.logit_bias or {}).values()))
            * max(params.repeat_penalty, 1.0)
            / temp
            + counts * abs(params.frequency_penalty)
            + abs(params.presence_penalty)
        )
        bound = ours * (8 * scale + 2 + logits.shape[0]) * EPS32 + 1e-30
        assert np.array_equal(ours > 0, theirs > 0), (trial, params)
        assert np.all(np.abs(ours - theirs) <= bound), (trial, params, float(np.abs(ours - theirs).max()))
        worst, sizes = max(worst, float(np.abs(ours - theirs).max())), sizes + [int((theirs > 0).sum())]
    print(f"{TRIALS} rows: max |p_ours - p_theirs| = {worst:.2g}, surviving tokens {min(sizes)}..{max(sizes)}")


PROMPT_TOKENS = (4, 117, 128, 145, 186, 216, *range(5, 19))


@pytest.mark.oracle
def test_generate_penalizes_the_output_not_the_prompt(tmp_path: Any) -> None:
    """Which history ``Llama.generate``'s penalties see, run (not only read): on a tiny synthetic
    GGUF, greedy generation with repeat_penalty 3 after 2-token prompts, each token against the
    profile's argmax on llama.cpp's own logits (``Llama.eval`` + ``scores``) with the window on the
    output only (the default) and with the prompt in it (llama-cli's ``penalize_prompt``). Every
    token must agree with the first; the second must disagree somewhere (the prompts include ones
    whose greedy continuation is a prompt token), else the check could not tell them apart.
    ``PROMPT_TOKENS``: the six second tokens (of all 319) where a search found the two laws differ on
    this synthetic model (seed 0), and 14 others."""
    from tests.support.synthetic import Variant, write_synthetic

    path = tmp_path / "tiny.gguf"
    write_synthetic(
        path,
        Variant("tiny", "llama", "tiny llama", n_embd=32, n_layer=1, n_head=4, n_head_kv=2, n_ff=48),
        quant_types=("F16",),
    )
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False, seed=1, logits_all=True)
    output_only, with_prompt = (
        law.Params(temp=0.0, repeat_penalty=3.0),
        law.Params(temp=0.0, repeat_penalty=3.0, penalize_prompt=True),
    )
    total = disagree = 0
    for x in PROMPT_TOKENS:
        prompt = [1, x]
        gen = llm.generate(prompt, temp=0.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=3.0)
        ids = [next(gen) for _ in range(2)]
        gen.close()
        out: list[int] = []
        for token in ids:
            llm.reset()
            llm.eval(prompt + out)
            row = np.array(llm.scores[len(prompt + out) - 1], dtype=np.float32)
            assert int(np.argmax(law.law(row, prompt, out, output_only))) == token, (prompt, out)
            disagree += int(np.argmax(law.law(row, prompt, out, with_prompt))) != token
            total += 1
            out.append(token)
    print(f"{total} tokens agree with the output-only window; the prompt-penalized law differs at {disagree}")
    assert disagree >= 6
