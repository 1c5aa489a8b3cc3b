"""The ``vllm`` profile: vLLM's V1 sampler (documented and source semantics; vLLM is not installed).

Read from the vLLM sources (GitHub vllm-project/vllm, the commits named): ``vllm/v1/sample/sampler.py``
(3e342658b2e9: ``Sampler`` docstring steps 1-9, ``apply_logits_processors``, ``sample``,
``apply_temperature``, ``_SAMPLING_EPS = 1e-5``), ``vllm/v1/sample/logits_processor/builtin.py``
(bf17660a2493: ``MinTokensLogitsProcessor``, ``LogitBiasLogitsProcessor``, ``MinPLogitsProcessor``),
``vllm/v1/sample/ops/penalties.py`` (3ff2de9c9635: ``apply_all_penalties``),
``vllm/model_executor/layers/utils.py`` (00358600ed52: ``apply_penalties``) with
``vllm/_custom_ops.py`` ``apply_repetition_penalties_torch``, ``vllm/v1/sample/ops/topk_topp_sampler.py``
(3babc05a035b: ``apply_top_k_top_p``, ``apply_top_k_only``) and ``vllm/sampling_params.py``
(00388f6573cc: names, defaults, ``all_stop_token_ids``). Names and defaults are ``SamplingParams``'s.

Glossary: ``prompt_ids`` the prompt, ``output_ids`` the request's output tokens so far (with
speculation, the accepted ones plus the drafts before the position), stop ids = ``stop_token_ids``
plus ``eos_token_id`` unless ``ignore_eos``.

Chain, in this order (``Sampler.forward``; every op on float32 logits in vLLM, float64 here):

    1. min_tokens          while len(output) < min_tokens: l[stop id] = -inf
    2. logit_bias          l[t] += bias[t]
    3. repetition_penalty  each token of prompt OR output (a set, no window):
                           l = l / r if l > 0 else l * r
    4. frequency/presence  over the OUTPUT only: l -= count(t) * frequency + [count > 0] * presence
    5. temperature         temperature < 1e-5: greedy, one-hot at the argmax after steps 1-4 (the
                           lowest id on ties); else l = l / T
    6. min_p               (> 0) p = softmax(l), remove p < min_p * max p (an argmax-invariant
                           processor: after temperature, BEFORE top-k / top-p)
    7. top_k               (0 or -1 disables) remove l < the k-th largest: ties with it are KEPT
    8. top_p               (< 1) sort ascending, p = softmax of the top-k survivors, remove the prefix
                           whose running sum is <= 1 - top_p, never the last (most likely) token;
                           ties: torch.sort's order is unspecified, here ascending by (logit, id)
    9. softmax             over the survivors (vLLM draws by the exponential race, same law)

Left out: ``allowed_token_ids``, ``bad_words``, structured outputs, custom logits processors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verispec.reference.sampling import (
    FloatArray,
    Probs,
    SamplingParams,
    apply_logit_bias,
    apply_repeat_penalty,
    softmax_over,
)
from verispec.spec.decoder.laws.common import (
    Profile,
    alive_of,
    apply_counts,
    ban,
    bias_json,
    check_bias,
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

NAME = "vllm"
SAMPLING_EPS = 1e-5  # vllm/v1/sample/sampler.py: temperature below it is greedy


@dataclass(frozen=True)
class Params:
    """vLLM ``SamplingParams``' sampling fields (its defaults)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    logit_bias: Mapping[int, float] | None = None
    stop_token_ids: tuple[int, ...] = ()
    eos_token_id: int | None = None
    ignore_eos: bool = False

    def validate(self, vocab_size: int | None = None) -> None:
        check_real("temperature", self.temperature, 0.0, math.inf, high_open=True)
        check_int("top_k", self.top_k, -1)
        check_real("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_real("min_p", self.min_p, 0.0, 1.0)
        check_real("presence_penalty", self.presence_penalty, -2.0, 2.0)
        check_real("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        check_real("repetition_penalty", self.repetition_penalty, 0.0, math.inf, low_open=True, high_open=True)
        check_int("min_tokens", self.min_tokens, 0)
        check_bias(self.logit_bias, vocab_size)
        check_ids("stop_token_ids", self.stop_token_ids, vocab_size)
        if self.eos_token_id is not None:
            check_ids("eos_token_id", (self.eos_token_id,), vocab_size)
        require(isinstance(self.ignore_eos, bool), f"ignore_eos must be a bool, got {self.ignore_eos!r}")

    @property
    def stop_ids(self) -> frozenset[int]:
        """``SamplingParams.all_stop_token_ids``: stop_token_ids plus EOS unless ignore_eos."""
        eos = () if self.ignore_eos or self.eos_token_id is None else (self.eos_token_id,)
        return frozenset((*self.stop_token_ids, *eos))

    def to_json(self) -> dict[str, Any]:
        return {
            "temperature": float(self.temperature),
            "top_k": int(self.top_k),
            "top_p": float(self.top_p),
            "min_p": float(self.min_p),
            "presence_penalty": float(self.presence_penalty),
            "frequency_penalty": float(self.frequency_penalty),
            "repetition_penalty": float(self.repetition_penalty),
            "min_tokens": int(self.min_tokens),
            "logit_bias": bias_json(self.logit_bias),
            "stop_token_ids": [int(t) for t in self.stop_token_ids],
            "eos_token_id": None if self.eos_token_id is None else int(self.eos_token_id),
            "ignore_eos": bool(self.ignore_eos),
        }

    def legacy(self) -> SamplingParams:
        greedy = self.temperature < SAMPLING_EPS
        return SamplingParams(
            temperature=0.0 if greedy else float(self.temperature),
            top_k=max(self.top_k, 0),
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repetition_penalty,
            repeat_last_n=-1,
            logit_bias=self.logit_bias,
        )


def law(logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int], params: Params) -> Probs:
    """vLLM's law of the next token after ``prompt_ids + output_ids`` (module docstring)."""
    working = checked_row(logits, prompt_ids, output_ids)
    params.validate(working.shape[0])
    if len(output_ids) < params.min_tokens:
        ban(working, params.stop_ids)
    apply_logit_bias(working, params.logit_bias)
    apply_repeat_penalty(working, [*prompt_ids, *output_ids], float(params.repetition_penalty), -1)
    apply_counts(working, output_ids, float(params.frequency_penalty), float(params.presence_penalty))
    alive = alive_of(working)
    if params.temperature < SAMPLING_EPS:
        return one_hot_argmax(working, alive)
    working[alive] = working[alive] / float(params.temperature)
    min_p_relative(working, alive, float(params.min_p))
    top_k_keep_ties(working, alive, params.top_k)
    top_p_ascending(working, alive, float(params.top_p))
    return softmax_over(working, alive)


def profile(params: Params) -> Profile:
    params.validate()
    return Profile(NAME, params, law)
