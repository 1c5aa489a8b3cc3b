"""transformers universal assisted generation: the draft law q is scattered in the wrong order.

Run (model-free, seconds; needs transformers >= the version with PR #36695, torch, tokenizers):

    python examples/repros/transformers_uag_scatter_order.py

Root cause (transformers 5.24.0, ``src/transformers/generation/``):

- ``utils.py:1375``, ``GenerationMixin._get_candidate_generator``: the universal path always builds
  its ``AssistantToTargetTranslator`` with ``assistant_prune_lm_head=True``.
- ``candidate_generator.py:728``, ``AssistantToTargetTranslator.__init__``: when the assistant's
  vocabulary is not a subset of the target's, the pruned head keeps the rows
  ``assistant_overlap_token_ids = list(self.target_to_assistant_input_ids.values())``, in dict
  insertion order, i.e. the iteration order of ``assistant_tokenizer.get_vocab()``
  (``_get_assistant_to_target_input_ids``, ``candidate_generator.py:794``). For a fast tokenizer
  that is a Rust HashMap: a different order in every process. ``_PruneReindexingLMHead``
  (``prune_linear_layer``, ``:640``) so makes pruned logit ``j`` the logit of assistant id
  ``overlap[j]``.
- ``get_target_ids`` (``:820``) maps a drafted pruned index ``j`` through ``overlap[j]``: the drafted
  token is right.
- ``get_target_logits`` (``:834``, ``:837``) scatters the pruned logits into
  ``self._assistant_to_target_input_ids[mask]``, i.e. in ASCENDING assistant-id order, not in
  ``overlap`` order. So q in target space is a permutation of the law the draft was drawn from.
- ``utils.py:4464``/``:4473`` (``_speculative_sampling``): ``p_i / q_i`` uses another token's
  probability as q_i, usually tiny, so the draft is accepted almost always and the output follows
  the assistant's law; the rejection residual is built from the wrong q as well.

Minimal fix (one line in ``get_target_logits``, pruned branch)::

    target_logits[..., self._assistant_to_target_input_ids[self.assistant_overlap_token_ids]] = assistant_logits

Versions affected: every release since PR #36695 ("prune LM Head for USD", merged 2025-03)
through 5.24.0 (the installed one here). Related threads: PR #36695 (introduced it); #47932 and
PR #47961 (a different q mismatch: raw vs processed scores in DFlash/MTP/Gemma-4 generators).
Not related: PR #46124 (stale ``position_ids``), which 5.24 already avoids (PR #46936).

What the user sees: ``generate(..., assistant_model=, tokenizer=, assistant_tokenizer=,
do_sample=True)`` returns text drawn (almost) from the assistant, not the target; from one
``torch.manual_seed`` the output differs from process to process (the HashMap order).

This script uses the REAL installed class with two in-memory WordLevel tokenizers (the assistant
has 4 tokens the target lacks, so the pruning path runs) and a stub assistant with an
``nn.Linear`` head. For each pruned index j it makes the assistant draw j with probability 1 and
asks whether q (``get_target_logits(...).softmax``) puts probability 1 on the target id that
``get_target_ids`` maps j to. BROKEN counts the indices where it does not; then the fix is applied
as a monkeypatch of the installed class and the count is taken again. Exit 1 while the installed
library is broken (the fix makes 0 mismatches), 0 if it is not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn
from transformers import PreTrainedTokenizerFast
from transformers.generation.candidate_generator import AssistantToTargetTranslator

TARGET_WORDS = ["<unk>"] + [f"w{i}" for i in range(40)]
ASSISTANT_WORDS = TARGET_WORDS + ["x1", "x2", "x3", "x4"]  # not a subset: the pruning path
HIDDEN = 4


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")  # type: ignore[no-untyped-call]


class StubAssistant:
    """The four members the translator touches on an assistant model, and nothing else."""

    device = torch.device("cpu")

    def __init__(self, vocab_size: int) -> None:
        self.head: nn.Module = nn.Linear(HIDDEN, vocab_size, bias=False)
        self.embeddings: nn.Module = nn.Embedding(vocab_size, HIDDEN)

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def set_output_embeddings(self, module: nn.Module) -> None:
        self.head = module

    def get_input_embeddings(self) -> nn.Module:
        return self.embeddings

    def set_input_embeddings(self, module: nn.Module) -> None:
        self.embeddings = module


def fixed_get_target_logits(self: AssistantToTargetTranslator, assistant_logits: torch.Tensor) -> torch.Tensor:
    """``get_target_logits`` with the one-line fix: scatter pruned logit j to overlap[j]'s target id."""
    if not self.assistant_prune_lm_head:
        return ORIGINAL_GET_TARGET_LOGITS(self, assistant_logits)
    shape = (*assistant_logits.shape[:-1], self.target_vocab_size)
    target_logits = torch.full(shape, self.FILTER_VALUE, device=assistant_logits.device)
    target_logits[..., self._assistant_to_target_input_ids[self.assistant_overlap_token_ids]] = assistant_logits
    return target_logits


ORIGINAL_GET_TARGET_LOGITS: Callable[[AssistantToTargetTranslator, torch.Tensor], torch.Tensor] = (
    AssistantToTargetTranslator.get_target_logits
)


@contextmanager
def patched_translator() -> Iterator[None]:
    """Apply the fix to the installed class for the duration of the block, then restore it."""
    AssistantToTargetTranslator.get_target_logits = fixed_get_target_logits
    try:
        yield
    finally:
        AssistantToTargetTranslator.get_target_logits = ORIGINAL_GET_TARGET_LOGITS


def build_translator() -> AssistantToTargetTranslator:
    return AssistantToTargetTranslator(
        word_tokenizer(TARGET_WORDS),
        word_tokenizer(ASSISTANT_WORDS),
        len(TARGET_WORDS),
        assistant_model=StubAssistant(len(ASSISTANT_WORDS)),  # type: ignore[arg-type]
        assistant_prune_lm_head=True,
    )


def count_mismatches(translator: AssistantToTargetTranslator) -> tuple[int, int]:
    """(pruned indices whose q misses its own drafted target token, pruned indices in all).

    A point mass on pruned index j must become a point mass on ``get_target_ids``' token for j;
    any q below 0.5 there is a permuted law (q is exactly 0 or 1 here, so 0.5 is no tolerance).
    """
    overlap = len(translator.assistant_overlap_token_ids)
    no_prompt = torch.zeros(1, 0, dtype=torch.long)
    mismatches = 0
    for pruned_index in range(overlap):
        point_mass = torch.full((1, 1, overlap), -1e9)
        point_mass[0, 0, pruned_index] = 0.0
        drafted = int(translator.get_target_ids(no_prompt, no_prompt, torch.LongTensor([[pruned_index]]))[0, -1])
        q_at_drafted = float(translator.get_target_logits(point_mass).softmax(-1)[0, 0, drafted])
        mismatches += int(q_at_drafted < 0.5)
    return mismatches, overlap


def measure() -> dict[str, tuple[int, int]]:
    """BROKEN and FIXED counts on one translator (one vocab order), the fix as a monkeypatch."""
    translator = build_translator()
    broken = count_mismatches(translator)
    with patched_translator():
        fixed = count_mismatches(translator)
    return {"BROKEN": broken, "FIXED": fixed}


def main() -> int:
    import transformers

    outcome = measure()
    print(f"transformers {transformers.__version__}: AssistantToTargetTranslator.get_target_logits")
    for label, (bad, total) in outcome.items():
        print(
            f"{label}: {bad} of {total} drafted tokens get q < 0.5 although the assistant drew them with probability 1"
        )
    broken_bad, fixed_bad = outcome["BROKEN"][0], outcome["FIXED"][0]
    # With a random order, a permutation of 41 fixes some point by chance; 0 mismatches means the
    # installed library already scatters in overlap order (or the order happened to be ascending).
    return 1 if broken_bad > 0 and fixed_bad == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
