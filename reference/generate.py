"""Plain autoregressive decoding: prompt in, a stream of tokens out, with the stats to compare by.

One target pass per token: the prompt is one pass (its last logits row gives the first token),
then each sampled token is fed back as a one-token span. Every token is drawn from
:func:`reference.sampling.target_distribution` (THE target law) with the full history (prompt and
generated ids), through :func:`reference.sampling.sample` and the request's seeded
``numpy.random.Generator``: the same seed gives the same tokens.

Validation, context fitting, end ids, stop strings and stats are the decode session's
(:mod:`reference.session`), shared with every other loop; its request and result types are
re-exported here. :func:`decode_plain` is the one plain loop; the fast engine runs it with its own
forward, law and draw (:mod:`engine.generate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.reference.chat import ChatFormat
from verispec.reference.errors import ContextOverflow, ModelError
from verispec.reference.sampling import SamplingParams, sample, target_distribution
from verispec.reference.seams import DrawFn as DrawFn
from verispec.reference.seams import LawFn, TargetModel
from verispec.reference.session import DecodeSession
from verispec.reference.session import GenerationRequest as GenerationRequest  # re-exported: the request types
from verispec.reference.session import GenerationResult as GenerationResult
from verispec.reference.session import GenerationStats as GenerationStats
from verispec.reference.session import StopStringText as StopStringText
from verispec.reference.session import fit_context as fit_context
from verispec.reference.tokenizer import Tokenizer

F32 = npt.NDArray[np.float32]
LastLogitsFn = Callable[[Sequence[int], Any], F32]
"""``last_logits(span, cache) -> [V]``: run a span (appending it to the cache), its last logits row."""
ChooseFn = Callable[[F32, Sequence[int], SamplingParams, np.random.Generator], int]
"""``choose(row, history, params, rng) -> id``: the next token from what ``last_logits`` gave;
``draw(law(row, history, params), rng)`` or a step that gives the same token for the same rng."""


def encode_prompt(
    tokenizer: Tokenizer,
    text: str,
    *,
    chat: ChatFormat | None = None,
    parse_special: bool = True,
) -> list[int]:
    """Prompt ids as llama.cpp makes them: BOS per the metadata's ``add_bos_token``, special
    tokens parsed (``parse_special``; always on in chat mode, whose markers are special tokens).

    ``chat`` wraps ``text`` as one user turn of that chat format first. An empty prompt gives the
    model's BOS alone (ModelError if it has none).
    """
    if chat is not None:
        text, parse_special = chat.wrap(text), True
    ids = tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=parse_special)
    if not ids:
        if tokenizer.bos_id is None:
            raise ModelError("the prompt is empty and the model has no BOS token to start from")
        ids = [tokenizer.bos_id]
    return ids


def generate(
    model: TargetModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Decode ``request`` with ``model`` one token per pass; stream text pieces to ``on_text``.

    Raises SamplingError for invalid sampling parameters and ContextOverflow (before any model
    work) when the prompt plus ``max_tokens`` exceeds the context length and ``truncate`` is off.
    """
    return decode_plain(model, tokenizer, request, on_text=on_text)


def decode_plain(
    model: TargetModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
    law: LawFn = target_distribution,
    draw: DrawFn = sample,
    last_logits: LastLogitsFn | None = None,
    choose: ChooseFn | None = None,
) -> GenerationResult:
    """The plain loop on any engine: ``law`` and ``draw`` are THE target law and draw or
    bit-identical ones; ``last_logits(span, cache)`` runs a span and gives its last logits row
    ``[V]`` (default: ``model.forward(...).logits[-1]``; the fast engine computes the head on that
    row alone); ``choose`` (default ``draw(law(...))``) takes the next token from it (the fast
    engine's sparse head: from the head's input, the same token)."""
    session = DecodeSession(model.config, tokenizer, request, on_text=on_text)

    def forward_last(span: Sequence[int], cache: Any) -> F32:
        return np.asarray(model.forward(span, cache).logits[-1], dtype=np.float32)

    def law_then_draw(row: F32, history: Sequence[int], params: SamplingParams, rng: np.random.Generator) -> int:
        return draw(law(row, history, params), rng)

    run = forward_last if last_logits is None else last_logits
    step = law_then_draw if choose is None else choose
    session.begin()
    if not session.done:
        cache = model.new_cache(len(session.prompt) + request.max_tokens)
        logits = run(session.prompt, cache)  # [V]
        session.target_passes = 1
        while not session.commit(step(logits, session.history, request.params, session.rng)):
            logits = run(session.generated[-1:], cache)
            session.target_passes += 1
    return session.finish()


def prompt_logits(model: TargetModel, prompt_ids: Sequence[int]) -> npt.NDArray[np.float32]:
    """Logits after every prompt token, ``[T, V]`` float32, from one pass on a fresh cache.

    ContextOverflow when the prompt is longer than the context length.
    """
    if len(prompt_ids) > model.config.context_length:
        raise ContextOverflow(
            f"prompt of {len(prompt_ids)} tokens exceeds the context length {model.config.context_length}"
        )
    return model.forward(prompt_ids, model.new_cache(max(1, len(prompt_ids)))).logits
