"""Plain decoding on the fast engine: :func:`reference.generate.generate`'s loop and contract,
with the engine's forward (head on the last row only) and its bit-identical target law and draw.

Same request, same seed, same model -> the same tokens as the reference loop, up to the float32
rounding differences of the forward (tests/test_engine.py checks the tokens on both models).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from engine.model import FastModel
from engine.sampling import sample, target_distribution
from reference.errors import ContextOverflow, ModelError
from reference.generate import (
    GenerationRequest,
    GenerationResult,
    GenerationStats,
    StopStringText,
    fit_context,
)
from reference.model import Model
from reference.tokenizer import Tokenizer


def generate(
    model: FastModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Decode ``request`` one token per pass; same contract as :func:`reference.generate.generate`."""
    request.params.validate(model.config.n_vocab)
    if not request.prompt_ids:
        raise ModelError("the prompt has no tokens (encode_prompt gives BOS for an empty prompt)")
    prompt = fit_context(
        request.prompt_ids, request.max_tokens, model.config.context_length,
        truncate=request.truncate, bos_id=tokenizer.bos_id,
    )
    rng = np.random.default_rng(request.seed)
    end_ids = tokenizer.eog_ids | request.stop_ids
    text = StopStringText(request.stop, tokenizer, on_text)
    history = list(prompt)
    generated: list[int] = []
    stop_reason = "max_tokens"

    started = time.perf_counter()
    first_token_at = started
    passes = 0
    if request.max_tokens > 0:
        cache = model.new_cache(len(prompt) + request.max_tokens)
        logits = model.forward(prompt, cache, last_only=True).logits[-1]  # [V]
        passes = 1
        for step in range(request.max_tokens):
            token = sample(target_distribution(logits, history, request.params), rng)
            if step == 0:
                first_token_at = time.perf_counter()
            generated.append(token)
            history.append(token)
            if token in end_ids:
                stop_reason = "eog"
                break
            if text.push(token):
                stop_reason = "stop"
                break
            if step + 1 == request.max_tokens:
                break
            logits = model.forward([token], cache, last_only=True).logits[-1]
            passes += 1
    finished = time.perf_counter()
    final_text = text.finish()

    stats = GenerationStats.measure(
        prompt_tokens=len(prompt), generated_tokens=len(generated), started=started,
        first_token_at=first_token_at, finished=finished, target_passes=passes,
    )
    return GenerationResult(tuple(prompt), tuple(generated), final_text, stop_reason, stats)


def generate_any(
    model: "FastModel | Model",
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Plain decoding on whichever engine ``model`` belongs to (the CLI's ``--engine``)."""
    if isinstance(model, FastModel):
        return generate(model, tokenizer, request, on_text=on_text)
    from reference.generate import generate as reference_generate

    return reference_generate(model, tokenizer, request, on_text=on_text)


def prompt_logits_any(model: "FastModel | Model", prompt_ids: Sequence[int]) -> npt.NDArray[np.float32]:
    """:func:`reference.generate.prompt_logits` on either engine: ``[T, V]`` from one pass."""
    if isinstance(model, FastModel):
        if len(prompt_ids) > model.config.context_length:
            raise ContextOverflow(
                f"prompt of {len(prompt_ids)} tokens exceeds the context length {model.config.context_length}"
            )
        return model.forward(prompt_ids, model.new_cache(max(1, len(prompt_ids)))).logits
    from reference.generate import prompt_logits

    return prompt_logits(model, prompt_ids)
