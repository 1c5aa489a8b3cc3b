"""openvino-genai prompt lookup / draft model: ``min_new_tokens`` stops being enforced.

Run (model-free, no openvino-genai needed, well under a second):

    python examples/repros/openvino_genai_lookup_min_new_tokens.py

Root cause (openvino.genai master of 2026-08-21, after tag 2026.3.0.0; verispec observed it on
2026.4.1.0; ``src/cpp/src/sampling/``):

- ``logit_transformers.hpp:466``: ``EOSPenaltyTransform::is_applicable(cnt)`` is
  ``cnt < m_applicable_tensor_len`` (= ``min_new_tokens``), evaluated against
  ``LogitProcessor::m_generated_tokens`` (``logit_processor.hpp:120``), its only reader.
- ``sampler.cpp:1609``: ``sample_from_sequence_group`` ends with ``align_all_sequence_len(...)``,
  which sets that count to ``min_generated_len``: right.
- ``sampler.cpp:1799-1804``, ``Sampler::sample``: when any candidate was rejected
  (``assisting_pipeline_info.max_removed_tokens_per_request``) it computes
  ``min_processed_tokens = get_prompt_len() + min_generated_len - 1`` (a KV count, the prompt
  included) and writes it with ``logit_processor.update_generated_len(min_processed_tokens)``
  into the GENERATED-token count. After the first rejection the count is ``prompt_len - 1 + g``,
  at or above ``min_new_tokens`` for any prompt of ``min_new_tokens`` tokens or more, so the stop
  tokens are no longer banned.
- ``continuous_batching_for_prompt_lookup.cpp:80`` pads missing lookup candidates with
  ``PADDING_TOKEN_ID = -1``, always rejected: prompt lookup triggers it on nearly every step.
  The line dates from commit 2378ab08b ("[CB] SpeculativeDecoding impl C++ (#907)", 2024-10-18),
  so ``draft_model=`` runs the same ``Sampler::sample`` and should break ``min_new_tokens`` too,
  even greedy (not run here).

Minimal fix: do not overwrite the generated count with the processed count; in
``Sampler::sample`` drop ``logit_processor.update_generated_len(min_processed_tokens)`` (the
``align_all_sequence_len`` call has already set it to ``min_generated_len``), or pass
``assisting_pipeline_info.min_generated_len``.

Versions affected: since #907 (2024-10) through 2026.4.1.0. Related threads: none found upstream
for ``min_new_tokens`` with lookup or speculative decoding; the class is SGLang #33643
(min_tokens counted in cycles).

What the user sees: ``GenerationConfig(prompt_lookup=True, min_new_tokens=N, ...)`` (or a
``draft_model``) returns generations shorter than ``N`` tokens, ending in a stop token that plain
decoding never emits there (verispec: 2 of 150 sampled requests at T=1 on a synthetic GGUF,
``examples/openvino_genai_lookup_min_tokens_repro.py``, which runs the real library).

This script is a stub: the defect is in C++, which no Python monkeypatch reaches, and
openvino-genai is not in verispec's venv. ``LookupSampler`` transcribes the counter bookkeeping
quoted above: each step validates one real token plus padded (rejected) candidates, a toy target
whose likeliest token is the stop token from the second position on, and the EOS ban while the
count is below ``min_new_tokens``. BROKEN runs it as released; the fix is applied as a monkeypatch
of the stub's ``generated_count_after_rejection``. Exit 1 while the transcription of the
released code is broken.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

STOP_TOKEN = 2
PROMPT = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
MIN_NEW_TOKENS = 8
MAX_NEW_TOKENS = 16


class LookupSampler:
    """``Sampler::sample`` + ``LogitProcessor`` counter under prompt lookup with padded candidates."""

    def __init__(self) -> None:
        self.generated_count = 0  # LogitProcessor::m_generated_tokens

    def generated_count_after_rejection(self, prompt_len: int, min_generated_len: int) -> int:
        # align_all_sequence_len set it to min_generated_len; then sampler.cpp:1799-1804 overwrites it
        return prompt_len + min_generated_len - 1

    def sample_one(self, position: int) -> int:
        eos_banned = self.generated_count < MIN_NEW_TOKENS  # EOSPenaltyTransform::is_applicable
        wants_stop = position >= 1  # the toy target's likeliest token from position 1 on
        return STOP_TOKEN if wants_stop and not eos_banned else 100 + position

    def generate(self, prompt: list[int]) -> list[int]:
        output: list[int] = []
        while len(output) < MAX_NEW_TOKENS:
            token = self.sample_one(len(output))  # the validated position; the -1 pads are rejected
            output.append(token)
            self.generated_count = len(output)  # align_all_sequence_len(min_generated_len)
            self.generated_count = self.generated_count_after_rejection(len(prompt), len(output))
            if token == STOP_TOKEN:
                break
        return output


def fixed_generated_count_after_rejection(self: LookupSampler, prompt_len: int, min_generated_len: int) -> int:
    """The fix: the generated count stays the number of generated tokens."""
    return min_generated_len


ORIGINAL_COUNT = LookupSampler.generated_count_after_rejection


@contextmanager
def patched_sampler() -> Iterator[None]:
    LookupSampler.generated_count_after_rejection = fixed_generated_count_after_rejection
    try:
        yield
    finally:
        LookupSampler.generated_count_after_rejection = ORIGINAL_COUNT


def early_stop() -> tuple[int, int]:
    """(stop tokens emitted before index min_new_tokens, tokens generated)."""
    output = LookupSampler().generate(PROMPT)
    early = sum(1 for index, token in enumerate(output) if token == STOP_TOKEN and index < MIN_NEW_TOKENS)
    return early, len(output)


def measure() -> dict[str, tuple[int, int]]:
    broken = early_stop()
    with patched_sampler():
        fixed = early_stop()
    return {"BROKEN": broken, "FIXED": fixed}


def main() -> int:
    outcome = measure()
    print(f"openvino-genai Sampler::sample generated count, min_new_tokens {MIN_NEW_TOKENS} (transcribed stub)")
    for label, (early, length) in outcome.items():
        print(f"{label}: {early} stop token(s) before index {MIN_NEW_TOKENS}; generation of {length} tokens")
    return 1 if outcome["BROKEN"][0] > 0 and outcome["FIXED"][0] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
