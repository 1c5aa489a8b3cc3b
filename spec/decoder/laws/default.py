"""The ``verispec`` profile (the default): THE target law of :mod:`reference.sampling` with min_tokens.

Chain (the llama.cpp order; every formula, tie rule and the greedy case are those of
:func:`reference.sampling.target_distribution`, which this profile calls and never copies):

    0. min_tokens        while len(output_ids) < min_tokens: l[e] = -inf for every end-of-
                         generation id e (a -inf logit bias, before the chain; vLLM's meaning)
    1. logit bias        l[t] += bias[t]
    2. repeat penalty    distinct tokens of the last ``repeat_last_n`` ids of prompt + output:
                         l / r if l > 0 else l * r (0 disables, -1 = the whole history)
    3. top-k             the k first in (logit descending, id ascending); 0 disables
    4. top-p             shortest prefix of that order with softmax mass >= top_p (temperature 1)
    5. min-p             l >= max l + log(min_p) (temperature 1)
    6. temperature       (l - max l) / T; T = 0: one-hot argmax after steps 0-2, lowest id on ties
    7. softmax           over the survivors

Glossary: ``prompt_ids`` the request's prompt, ``output_ids`` the tokens emitted so far, ``eog`` the
model's end-of-generation ids, ``min_tokens`` how many output tokens must come before one of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from verispec.reference.sampling import FloatArray, Probs, SamplingParams, target_distribution
from verispec.spec.decoder.laws.common import Profile, check_ids, check_int

NAME = "verispec"


@dataclass(frozen=True)
class Params:
    """The verispec law: llama.cpp-order :class:`SamplingParams`, plus min_tokens over ``eog``."""

    sampling: SamplingParams = field(default_factory=SamplingParams)
    eog: frozenset[int] = frozenset()
    min_tokens: int = 0

    def validate(self, vocab_size: int | None = None) -> None:
        self.sampling.validate(vocab_size)
        check_int("min_tokens", self.min_tokens, 0)
        check_ids("eog", self.eog, vocab_size)

    def at(self, position: int) -> SamplingParams:
        """The llama.cpp-order params at 0-based output ``position`` (EOG banned before min_tokens)."""
        if position >= self.min_tokens or not self.eog:
            return self.sampling
        bias = dict(self.sampling.logit_bias or {})
        bias.update({int(e): -math.inf for e in self.eog})
        return replace(self.sampling, logit_bias=bias)

    def to_json(self) -> dict[str, Any]:
        from verispec.spec.decoder.laws.common import bias_json

        s = self.sampling
        return {
            "temperature": float(s.temperature),
            "top_k": int(s.top_k),
            "top_p": float(s.top_p),
            "min_p": float(s.min_p),
            "repeat_penalty": float(s.repeat_penalty),
            "repeat_last_n": int(s.repeat_last_n),
            "logit_bias": bias_json(s.logit_bias),
            "eog": sorted(int(e) for e in self.eog),
            "min_tokens": int(self.min_tokens),
        }

    def legacy(self) -> SamplingParams:
        return self.sampling


def law(logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int], params: Params) -> Probs:
    """The verispec target law after ``prompt_ids + output_ids`` (module docstring)."""
    params.validate()
    history = [*prompt_ids, *output_ids]
    return target_distribution(logits, history, params.at(len(output_ids)))


def profile(params: Params) -> Profile:
    params.validate()
    return Profile(NAME, params, law)
