"""The ``llama.cpp`` profile: llama-cpp-python 0.3.36's sampler chain (``Llama.generate``).

Read from the sources of llama-cpp-python 0.3.36 (the PyPI sdist): ``llama_cpp/llama.py``
``Llama._init_sampler`` / ``Llama.generate`` / ``create_completion`` (the logit-bias processor), and
the llama.cpp it vendors, ``vendor/llama.cpp/src/llama-sampler.cpp`` (``llama_sampler_sample``,
``llama_sampler_penalties_apply/accept``, ``_top_k_impl``, ``_typical_apply``, ``_top_p_apply``,
``_min_p_apply``, ``_temp_impl``, ``_dist_apply``). Names and defaults are ``Llama.generate``'s.

Glossary: ``prompt_ids`` the prompt, ``output_ids`` the tokens sampled so far, ``penalty_last_n`` the
penalty window (``Llama(last_n_tokens_size=64)``).

Which history the penalties see. ``generate`` builds a FRESH sampler chain per call and
``llama_sampler_sample`` accepts only the token it samples: the prompt is never accepted, so the
penalty window is the last ``penalty_last_n`` OUTPUT tokens (``penalize_prompt=False``, the
default). llama.cpp's own CLI (``common_sampler``) pushes the prompt into the window first:
``penalize_prompt=True`` gives that law (tests/test_laws_llamacpp.py runs ``generate`` to show the
output-only window). ``penalty_last_n <= 0`` disables the penalties
(``llama_sampler_init_penalties`` clamps it to 0; there is no -1 = whole history here).

Chain, in this order (temperature LAST, so the filters act on untempered logits):

    1. logit bias        l[t] += bias[t] (the Python logits processor, first in the chain)
    2. penalties         over the window W (above), for each distinct token t of W with count c:
                         l = l * repeat_penalty if l <= 0 else l / repeat_penalty, then
                         l -= c * frequency_penalty + presence_penalty
    3. top-k             keep the k largest (0 disables; llama.cpp's partial sort leaves ties
                         unspecified: here logit descending, then id ascending)
    4. typical           (typical_p < 1) p = softmax(l), H = -sum p log p; order by |-log p - H|
                         ascending (ties: the descending-logit order); keep the shortest prefix whose
                         running mass is > typical_p (at least min_keep = 1)
    5. top-p             softmax at temperature 1, descending order, the shortest prefix with mass
                         >= top_p (at least one); top_p >= 1 disables
    6. min-p             l >= max l + log(min_p) (p >= min_p * p_max at temperature 1); 0 disables
    7. temperature       l / temp; then dist: softmax over the survivors

Special temperatures (``_init_sampler``): ``temp == 0`` is greedy (one-hot at the argmax after steps
1-2, the lowest id on ties: ``llama_sampler_greedy`` keeps the first maximum); ``temp < 0`` is dist
alone (softmax at temperature 1 after steps 1-2, NO filters). Mirostat, grammar, DRY and XTC are
not part of this profile.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verispec.reference.sampling import (
    FloatArray,
    Probs,
    SamplingParams,
    apply_logit_bias,
    apply_min_p,
    apply_repeat_penalty,
    apply_top_k,
    apply_top_p,
    descending_order,
    softmax_over,
)
from verispec.spec.decoder.laws.common import (
    F64,
    Alive,
    Profile,
    alive_of,
    apply_counts,
    bias_json,
    check_bias,
    check_int,
    check_real,
    checked_row,
    one_hot_argmax,
    require,
)

NAME = "llama.cpp"


@dataclass(frozen=True)
class Params:
    """``Llama.generate``'s sampling arguments (its defaults) and the penalty window."""

    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    penalize_prompt: bool = False
    logit_bias: Mapping[int, float] | None = None

    def validate(self, vocab_size: int | None = None) -> None:
        require(
            isinstance(self.temp, (int, float)) and math.isfinite(float(self.temp)),
            f"temp must be a finite number (< 0: dist alone, 0: greedy), got {self.temp!r}",
        )
        check_int("top_k", self.top_k, 0)
        check_real("top_p", self.top_p, 0.0, 1.0)
        check_real("min_p", self.min_p, 0.0, 1.0)
        check_real("typical_p", self.typical_p, 0.0, 1.0, low_open=True)
        check_real("repeat_penalty", self.repeat_penalty, 0.0, math.inf, low_open=True, high_open=True)
        check_real("frequency_penalty", self.frequency_penalty, -math.inf, math.inf, True, True)
        check_real("presence_penalty", self.presence_penalty, -math.inf, math.inf, True, True)
        require(
            isinstance(self.penalty_last_n, int) and not isinstance(self.penalty_last_n, bool),
            f"penalty_last_n must be an integer (<= 0 disables the penalties), got {self.penalty_last_n!r}",
        )
        require(isinstance(self.penalize_prompt, bool), f"penalize_prompt must be a bool, got {self.penalize_prompt!r}")
        check_bias(self.logit_bias, vocab_size)

    def to_json(self) -> dict[str, Any]:
        return {
            "temp": float(self.temp),
            "top_k": int(self.top_k),
            "top_p": float(self.top_p),
            "min_p": float(self.min_p),
            "typical_p": float(self.typical_p),
            "repeat_penalty": float(self.repeat_penalty),
            "frequency_penalty": float(self.frequency_penalty),
            "presence_penalty": float(self.presence_penalty),
            "penalty_last_n": int(self.penalty_last_n),
            "penalize_prompt": bool(self.penalize_prompt),
            "logit_bias": bias_json(self.logit_bias),
        }

    def legacy(self) -> SamplingParams:
        return SamplingParams(
            temperature=max(float(self.temp), 0.0),
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            repeat_penalty=self.repeat_penalty,
            repeat_last_n=max(self.penalty_last_n, 0),
            logit_bias=self.logit_bias,
        )


def window(prompt_ids: Sequence[int], output_ids: Sequence[int], params: Params) -> list[int]:
    """The ids the penalties count: the last ``penalty_last_n`` of the output (or prompt + output)."""
    if params.penalty_last_n <= 0:
        return []
    history = [*prompt_ids, *output_ids] if params.penalize_prompt else list(output_ids)
    return history[-params.penalty_last_n :]


def apply_typical(logits: F64, alive: Alive, typical_p: float) -> None:
    """Locally typical sampling (module docstring, step 4)."""
    if typical_p >= 1.0:
        return
    order = descending_order(logits, alive)  # descending, as llama.cpp's softmax sorts first
    probs = softmax_over(logits, alive)[order]
    with np.errstate(divide="ignore"):
        logs = np.log(probs)
    entropy = -float(np.sum(probs[probs > 0] * logs[probs > 0]))
    shifted = np.abs(-logs - entropy)
    by_shift = np.argsort(shifted, kind="stable")
    running = np.cumsum(probs[by_shift])
    over = np.flatnonzero(running > typical_p)
    keep = int(over[0]) + 1 if over.size else order.shape[0]
    alive[order[by_shift[keep:]]] = False


def law(logits: FloatArray, prompt_ids: Sequence[int], output_ids: Sequence[int], params: Params) -> Probs:
    """llama-cpp-python's law of the next token after ``prompt_ids + output_ids`` (module docstring)."""
    working = checked_row(logits, prompt_ids, output_ids)
    params.validate(working.shape[0])
    apply_logit_bias(working, params.logit_bias)
    seen = window(prompt_ids, output_ids, params)
    apply_repeat_penalty(working, seen, float(params.repeat_penalty), -1)
    apply_counts(working, seen, float(params.frequency_penalty), float(params.presence_penalty))
    alive = alive_of(working)
    if params.temp == 0:
        return one_hot_argmax(working, alive)
    if params.temp < 0:
        return softmax_over(working, alive)
    apply_top_k(working, alive, params.top_k)
    apply_typical(working, alive, float(params.typical_p))
    apply_top_p(working, alive, float(params.top_p))
    apply_min_p(working, alive, float(params.min_p))
    return softmax_over(working, alive, float(params.temp))


def profile(params: Params) -> Profile:
    params.validate()
    return Profile(NAME, params, law)
