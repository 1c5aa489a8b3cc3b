"""The ``transformers`` profile: what ``generate(do_sample=True, ...)`` of transformers 5.24 samples.

Read from the installed transformers 5.24: ``generation/utils.py``
``GenerationMixin._get_logits_processor`` (the order below) and ``_prepare_generation_config``
(unset fields take ``GenerationConfig._get_default_generation_params()``: ``top_k=50``,
``temperature=1.0``, ``top_p=1.0``, ``repetition_penalty=1.0``, ``min_length=0``), and
``generation/logits_process.py`` (each processor's formula). Names and defaults are
``GenerationConfig``'s; ``generate`` samples ``torch.multinomial(softmax(scores))``.

Glossary: ``input_ids`` = prompt + output (transformers' processors see the whole sequence),
``eos_token_id`` the generation config's end-of-sequence ids, ``min_new_tokens`` output tokens
before an EOS may come, ``min_length`` the same for the whole sequence length.

Chain, in this order (temperature FIRST among the warpers: top-k, top-p and min-p act on TEMPERED
scores):

    1. repetition_penalty  (!= 1) each distinct token t of input_ids (prompt AND output, no window):
                           s = s * r if s < 0 else s / r (RepetitionPenaltyLogitsProcessor)
    2. min_length          while len(input_ids) < min_length: s[eos] = -inf (MinLengthLogitsProcessor)
    3. min_new_tokens      while len(output) < min_new_tokens: s[eos] = -inf
                           (MinNewTokensLengthLogitsProcessor)
       -- warpers, only when do_sample --
    4. temperature         (!= 1) s = s / T (TemperatureLogitsWarper; T > 0)
    5. top_k               (!= 0) remove s < the k-th largest s: ties with it are KEPT (TopKLogitsWarper,
                           k = max(top_k, min_tokens_to_keep = 1))
    6. top_p               (< 1) sort ascending, p = softmax, remove the prefix whose running sum is
                           <= 1 - top_p, never the last token (TopPLogitsWarper). Ties: torch.sort
                           leaves equal scores in an unspecified order (measured: by id for a
                           few, not for 40 equal scores), so a tie straddling the cut is cut here
                           by (score, id) ascending, the lower id removed first
    7. min_p               (set) p = softmax of the survivors, remove p < min_p * max p, the most
                           likely always stays (MinPLogitsWarper)
    8. softmax             over the survivors

``do_sample=False`` is greedy: one-hot at the argmax of the scores after steps 1-3 (torch's argmax:
the lowest id on ties).

Left out (not on a sampled speculative path of a decoder-only model, or not a per-token law):
``sequence_bias`` and ``bad_words_ids`` of length > 1, ``no_repeat_ngram_size``, ``typical_p``,
``epsilon_cutoff``, ``eta_cutoff``, ``top_h``, ``suppress_tokens``, ``begin_suppress_tokens``,
``forced_bos/eos_token_id``, ``exponential_decay_length_penalty``, guidance, watermarking, beams.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verispec.reference.sampling import FloatArray, Probs, SamplingParams, apply_repeat_penalty, softmax_over
from verispec.spec.decoder.laws.common import (
    Profile,
    alive_of,
    ban,
    check_ids,
    check_int,
    check_real,
    checked_row,
    min_p_relative,
    one_hot_argmax,
    require,
    top_k_keep_ties,
    top_p_ascending,
)

NAME = "transformers"
DEFAULT_TOP_K = 50  # GenerationConfig._get_default_generation_params()


@dataclass(frozen=True)
class Params:
    """``GenerationConfig``'s sampling fields with ``generate``'s defaults (min_p None: no warper)."""

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = DEFAULT_TOP_K
    top_p: float = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    min_length: int = 0
    eos_token_id: tuple[int, ...] = ()

    def validate(self, vocab_size: int | None = None) -> None:
        require(isinstance(self.do_sample, bool), f"do_sample must be a bool, got {self.do_sample!r}")
        check_real("temperature", self.temperature, 0.0, math.inf, low_open=True, high_open=True)
        check_int("top_k", self.top_k, 0)
        check_real("top_p", self.top_p, 0.0, 1.0)
        if self.min_p is not None:
            check_real("min_p", self.min_p, 0.0, 1.0)
        check_real("repetition_penalty", self.repetition_penalty, 0.0, math.inf, low_open=True, high_open=True)
        check_int("min_new_tokens", self.min_new_tokens, 0)
        check_int("min_length", self.min_length, 0)
        check_ids("eos_token_id", self.eos_token_id, vocab_size)

    def to_json(self) -> dict[str, Any]:
        return {
            "do_sample": bool(self.do_sample),
            "temperature": float(self.temperature),
            "top_k": int(self.top_k),
            "top_p": float(self.top_p),
            "min_p": None if self.min_p is None else float(self.min_p),
            "repetition_penalty": float(self.repetition_penalty),
            "min_new_tokens": int(self.min_new_tokens),
            "min_length": int(self.min_length),
            "eos_token_id": [int(e) for e in self.eos_token_id],
        }

    def legacy(self) -> SamplingParams:
        return SamplingParams(
            temperature=float(self.temperature) if self.do_sample else 0.0,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p or 0.0,
            repeat_penalty=self.repetition_penalty,
            repeat_last_n=-1,
        )


def law(logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int], params: Params) -> Probs:
    """transformers' law of the next token after ``prompt_ids + output_ids`` (module docstring)."""
    scores = checked_row(logits, prompt_ids, output_ids)
    params.validate(scores.shape[0])
    input_ids = [*prompt_ids, *output_ids]
    apply_repeat_penalty(scores, input_ids, float(params.repetition_penalty), -1)
    if len(input_ids) < params.min_length or len(output_ids) < params.min_new_tokens:
        ban(scores, params.eos_token_id)
    alive = alive_of(scores)
    if not params.do_sample:
        return one_hot_argmax(scores, alive)
    if params.temperature != 1.0:
        scores[alive] = scores[alive] / float(params.temperature)
    top_k_keep_ties(scores, alive, params.top_k)
    top_p_ascending(scores, alive, float(params.top_p))
    if params.min_p is not None:
        min_p_relative(scores, alive, float(params.min_p))
    return softmax_over(scores, alive)


def profile(params: Params) -> Profile:
    params.validate()
    return Profile(NAME, params, law)
