"""transformers' assisted generation as a decoder under `verispec check-decoder`.

    verispec models synth --arch llama --out models/      # tiny: the default depth mode at full power
    verispec check-decoder --engine examples.transformers_decoder:prompt_lookup --model models/llama-seed0.gguf \
        --repeat-penalty 1
    verispec check-decoder --engine examples.transformers_decoder:prompt_lookup --model smollm2-135m
    verispec check-decoder --engine examples.transformers_decoder:prompt_lookup --greedy
    verispec check-decoder --engine examples.transformers_decoder:assistant --greedy
    verispec check-decoder --engine examples.transformers_decoder:assistant --target-law two-sample

The model is loaded by transformers from the same GGUF file (``from_pretrained(dir,
gguf_file=...)``: float32 on the dequantized weights, so its numerics are ours up to float32
rounding and the target law of verispec's reference forward applies). Speculation is either
transformers' prompt lookup decoding (``prompt_lookup_num_tokens``: drafts copied from the prompt,
q one-hot) or assisted generation with a SAME-VOCABULARY ASSISTANT model (``assistant_model``;
sampled, transformers verifies with its ``_speculative_sampling``). No assistant is downloaded: it
is built from the same GGUF, the target's first :data:`ASSISTANT_LAYERS` decoder layers plus its
final norm and (tied) head, as a smaller ``LlamaForCausalLM`` on the same vocabulary: a weak but
honest draft model (the shipped adapter's
:func:`verispec.peers.transformers_peer.truncated_assistant`, which raises a ``CheckError`` for a
layer count out of range). ``do_sample`` follows the params: sampled for temperature > 0 (the law test),
greedy for temperature 0 (the greedy mode; ``speculative=False`` runs plain ``generate``).
``logits`` (the target's plain forward, for ``--target-law engine-logits`` and the engine's own
batch-shape noise) and ``sample_plain`` (plain sampled ``generate``, for ``--target-law
two-sample``) are offered too.

``generate`` (the default depth mode) returns whole generations that stop AT an end-of-generation
id (included) or after ``max_tokens``, with ``min_tokens`` as transformers' ``min_new_tokens``
(which bans the EOS ids until then, as the verispec law does); ``generate_plain`` is the same with
speculation off.

Sampling params map one to one (temperature, top_k, top_p, repetition_penalty); transformers
penalizes every earlier token of the sequence, llama.cpp (and verispec's law) the last
``repeat_last_n`` = 64: the same set only while prompt + output stay within 64 tokens, so the
adapter refuses a penalty beyond that (pass ``--repeat-penalty 1`` at depth).

Needs the ``oracle`` extra (torch, transformers). Prompt lookup runs one sequence at a time, so N
samples cost N generate() calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verispec.peers.transformers_peer import load_causal_lm, truncated_assistant
from verispec.reference.sampling import SamplingParams
from verispec.reference.tokenizer import Tokenizer

LOOKUP_TOKENS = 3  # drafts per cycle (prompt_lookup_num_tokens)
ASSISTANT_LAYERS = 6  # of SmolLM2-135M's 30: the assistant is the target's first six layers
ASSISTANT_TOKENS = 3  # drafts per cycle (num_assistant_tokens, schedule "constant")


def load_target(path: Path) -> Any:
    """The GGUF as a transformers float32 model (dequantized weights: our numerics); the shipped
    adapter's loader, one model per process and path."""
    return load_causal_lm(Path(path))


class TransformersLookupDecoder:
    """``generate`` / ``sample`` / ``greedy`` / ``logits`` / ``sample_plain`` / ``generate_plain`` of
    :mod:`spec.decoder.check` over
    transformers' generate(): prompt lookup (default) or a same-vocabulary ``assistant``."""

    def __init__(
        self, path: Path, lookup_tokens: int = LOOKUP_TOKENS, assistant_layers: int | None = None, model: Any = None
    ) -> None:
        import torch

        self.torch = torch
        self.model = load_target(path) if model is None else model  # a loaded target may be shared
        self.lookup_tokens = lookup_tokens
        self.eog = sorted(Tokenizer.from_file(path).eog_ids)  # where a generation stops (verispec's rule)
        self.assistant = None if assistant_layers is None else truncated_assistant(self.model, assistant_layers)
        if self.assistant is not None:
            self.assistant.generation_config.num_assistant_tokens = ASSISTANT_TOKENS
            self.assistant.generation_config.num_assistant_tokens_schedule = "constant"

    def _speculation(self) -> dict[str, Any]:
        if self.assistant is not None:
            return {"assistant_model": self.assistant}
        return {"prompt_lookup_num_tokens": self.lookup_tokens}

    def _generate(self, prompt_ids: Sequence[int], max_new: int, speculative: bool, **sampling: Any) -> list[int]:
        torch = self.torch
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        extra = self._speculation() if speculative else {}
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

    def _sample(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int, speculative: bool
    ) -> list[list[int]]:
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
        return [self._generate(prompt_ids, m, speculative, **sampling) for _ in range(n)]

    def sample(self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int) -> list[list[int]]:
        return self._sample(prompt_ids, params, m, n, seed, True)

    def _sampling(self, params: SamplingParams, history_length: int) -> dict[str, Any]:
        if params.min_p or params.logit_bias:
            raise ValueError("this adapter maps temperature, top_k, top_p and repeat_penalty only")
        if params.repeat_penalty != 1.0 and params.repeat_last_n != -1 and history_length > params.repeat_last_n:
            raise ValueError(
                f"transformers penalizes the whole sequence, the law its last {params.repeat_last_n} "
                f"tokens: {history_length} tokens differ there (pass --repeat-penalty 1)"
            )
        return {
            "do_sample": True,
            "temperature": params.temperature,
            "top_k": params.top_k or None,
            "top_p": params.top_p,
            "repetition_penalty": params.repeat_penalty,
        }

    def _generations(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        n: int,
        seed: int,
        min_tokens: int,
        speculative: bool,
    ) -> list[list[int]]:
        """n whole generations: each stops at an end-of-generation id (kept) or after max_tokens."""
        torch = self.torch
        sampling = self._sampling(params, len(prompt_ids) + max_tokens)
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        extra = self._speculation() if speculative else {}
        torch.manual_seed(seed)
        out = []
        for _ in range(n):
            with torch.no_grad():
                row = self.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_tokens,
                    min_new_tokens=min_tokens,
                    num_beams=1,
                    eos_token_id=self.eog,
                    pad_token_id=self.eog[0] if self.eog else 0,
                    **extra,
                    **sampling,
                )
            tokens = [int(t) for t in row[0, len(prompt_ids) :].tolist()]
            end = next((i for i, t in enumerate(tokens) if t in self.eog), None)
            out.append(tokens if end is None else tokens[: end + 1])
        return out

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return self._generations(prompt_ids, params, max_tokens, n, seed, min_tokens, True)

    def generate_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return self._generations(prompt_ids, params, max_tokens, n, seed, min_tokens, False)

    def sample_plain(
        self, prompt_ids: Sequence[int], params: SamplingParams, m: int, n: int, seed: int
    ) -> list[list[int]]:
        return self._sample(prompt_ids, params, m, n, seed, False)

    def logits(self, prefix_ids: Sequence[int], split_at: int | None = None) -> list[float]:
        """The target's next-token logits after the prefix: one forward, or (``split_at`` s)
        ``prefix[:s]``, then each later token alone on the cache."""
        torch = self.torch
        ids = torch.tensor([list(prefix_ids)], dtype=torch.long)
        with torch.no_grad():
            if split_at is None:
                row = self.model(ids).logits[0, -1]
            else:
                out = self.model(ids[:, :split_at], use_cache=True)
                for i in range(split_at, ids.shape[1]):
                    out = self.model(ids[:, i : i + 1], cache=out.cache, use_cache=True)
                row = out.logits[0, -1]
        return [float(x) for x in row.tolist()]

    def greedy(self, prompt_ids: Sequence[int], max_tokens: int, speculative: bool) -> list[int]:
        return self._generate(prompt_ids, max_tokens, speculative, do_sample=False)


def prompt_lookup(path: Path) -> TransformersLookupDecoder:
    """The ``--engine`` factory: prompt lookup decoding on the GGUF at ``path``."""
    return TransformersLookupDecoder(Path(path))


def assistant(path: Path) -> TransformersLookupDecoder:
    """The ``--engine`` factory: assisted generation with the target's first six layers drafting."""
    return TransformersLookupDecoder(Path(path), assistant_layers=ASSISTANT_LAYERS)
