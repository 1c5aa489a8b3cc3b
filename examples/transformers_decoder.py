"""transformers' assisted generation as a decoder under `verispec check-decoder`.

    verispec check-decoder --engine examples.transformers_decoder:prompt_lookup --model smollm2-135m
    verispec check-decoder --engine examples.transformers_decoder:prompt_lookup --greedy

The model is loaded by transformers from the same GGUF file (``from_pretrained(dir,
gguf_file=...)``: float32 on the dequantized weights, so its numerics are ours up to float32
rounding and the target law of verispec's reference forward applies). Speculation is
transformers' prompt lookup decoding (``prompt_lookup_num_tokens``): drafts are copied from the
prompt, q is one-hot. ``do_sample`` follows the params: sampled for temperature > 0 (the law test),
greedy for temperature 0 (the greedy mode; ``speculative=False`` runs plain ``generate``).

Sampling params map one to one (temperature, top_k, top_p, repetition_penalty); transformers
penalizes every earlier token of the sequence, llama.cpp (and verispec's law) the last
``repeat_last_n`` = 64: the same set for prompts + m tokens shorter than 64, which the checks use.

Needs the ``oracle`` extra (torch, transformers). Prompt lookup runs one sequence at a time, so N
samples cost N generate() calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reference.sampling import SamplingParams

LOOKUP_TOKENS = 3  # drafts per cycle (prompt_lookup_num_tokens)


class TransformersLookupDecoder:
    """``sample`` / ``greedy`` of :mod:`spec.decoder_check` over transformers' generate()."""

    def __init__(self, path: Path, lookup_tokens: int = LOOKUP_TOKENS) -> None:
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        ).eval()
        self.lookup_tokens = lookup_tokens

    def _generate(self, prompt_ids: Sequence[int], max_new: int, speculative: bool, **sampling: Any) -> list[int]:
        torch = self.torch
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        extra = {"prompt_lookup_num_tokens": self.lookup_tokens} if speculative else {}
        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                min_new_tokens=max_new,
                num_beams=1,
                pad_token_id=self.model.config.eos_token_id,
                **extra,
                **sampling,
            )
        return [int(t) for t in out[0, len(prompt_ids) :].tolist()]

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        if params.min_p or params.logit_bias:
            raise ValueError("this adapter maps temperature, top_k, top_p and repeat_penalty only")
        self.torch.manual_seed(seed)
        sampling = {
            "do_sample": True,
            "temperature": params.temperature,
            "top_k": params.top_k or None,
            "top_p": params.top_p,
            "repetition_penalty": params.repeat_penalty,
        }
        return [self._generate(prompt_ids, m, True, **sampling) for _ in range(n)]

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        return self._generate(prompt_ids, max_tokens, speculative, do_sample=False)


def prompt_lookup(path: Path) -> TransformersLookupDecoder:
    """The ``--engine`` factory: prompt lookup decoding on the GGUF at ``path``."""
    return TransformersLookupDecoder(Path(path))
