"""Plain decoding on the fast engine: :func:`reference.generate.decode_plain` (the one plain loop,
its decode session) with the engine's forward (head on the last row only) and its bit-identical
target law and draw.

Same request, same seed, same model -> the same tokens as the reference loop, up to the float32
rounding differences of the forward (tests/test_engine.py checks the tokens on both models).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from verispec.engine.model import FastModel
from verispec.engine.sampling import sample, target_distribution
from verispec.reference.errors import ContextOverflow
from verispec.reference.generate import GenerationRequest, GenerationResult, decode_plain
from verispec.reference.model import Model
from verispec.reference.sampling import SamplingParams
from verispec.reference.sampling import sample as reference_draw
from verispec.reference.sampling import target_distribution as reference_law
from verispec.reference.seams import DrawFn, LawFn
from verispec.reference.tokenizer import Tokenizer


def generate(
    model: FastModel,
    tokenizer: Tokenizer,
    request: GenerationRequest,
    *,
    on_text: Callable[[str], None] | None = None,
) -> GenerationResult:
    """Decode ``request`` one token per pass; same contract as :func:`reference.generate.generate`
    (the same loop and session: :func:`reference.generate.decode_plain`). On a sparse-head model
    (``FastModel.load(..., head="sparse")``) each step decides from the head's input
    (:func:`engine.sparse_head.choose_token`): the same tokens, bit for bit."""
    if model.sparse_head is not None:
        from verispec.engine.sparse_head import choose_token

        def head_input(span: Sequence[int], cache: Any) -> npt.NDArray[np.float32]:
            return model.last_head_input(span, cache)  # [1, n_embd]

        def choose(x: npt.NDArray[np.float32], history: Sequence[int], params: SamplingParams, rng: Any) -> int:
            return choose_token(model, x, history, params, rng)

        return decode_plain(model, tokenizer, request, on_text=on_text, last_logits=head_input, choose=choose)

    def last_logits(span: Sequence[int], cache: Any) -> npt.NDArray[np.float32]:
        return np.asarray(
            model.forward(span, cache, last_only=True).logits[-1], dtype=np.float32
        )  # [V]: head on one row

    return decode_plain(
        model, tokenizer, request, on_text=on_text, law=target_distribution, draw=sample, last_logits=last_logits
    )


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
    from verispec.reference.generate import generate as reference_generate

    return reference_generate(model, tokenizer, request, on_text=on_text)


def law_for(model: "FastModel | Model") -> LawFn:
    """The target law of ``model``'s engine (bit-identical on both; the fast one is vectorized)."""
    return target_distribution if isinstance(model, FastModel) else reference_law


def draw_for(model: "FastModel | Model") -> DrawFn:
    """The draw of ``model``'s engine (bit-identical on both; the fast one scans the support only)."""
    return sample if isinstance(model, FastModel) else reference_draw


def prompt_logits_any(model: "FastModel | Model", prompt_ids: Sequence[int]) -> npt.NDArray[np.float32]:
    """:func:`reference.generate.prompt_logits` on either engine: ``[T, V]`` from one pass."""
    if isinstance(model, FastModel):
        if len(prompt_ids) > model.config.context_length:
            raise ContextOverflow(
                f"prompt of {len(prompt_ids)} tokens exceeds the context length {model.config.context_length}"
            )
        return model.forward(prompt_ids, model.new_cache(max(1, len(prompt_ids)))).logits
    from verispec.reference.generate import prompt_logits

    return prompt_logits(model, prompt_ids)
