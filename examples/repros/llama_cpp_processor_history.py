"""llama-cpp-python prompt lookup: a user logits_processor sees unverified draft tokens.

Run (model-free, no llama-cpp-python needed, well under a second):

    python examples/repros/llama_cpp_processor_history.py

Root cause (llama-cpp-python 0.3.35 source, ``llama_cpp/llama.py``; verispec observed it on 0.3.36):

- ``Llama._input_ids`` (``:584-585``) is ``self.input_ids[: self.n_tokens]``.
- ``Llama._init_sampler``'s ``apply_func`` (``:742``) calls every user processor as
  ``logit_processor(self._input_ids, recarray.logit)``.
- ``Llama.generate`` (``:973-1027``) with ``draft_model=`` first runs ``self.eval(tokens)`` on the
  last token PLUS all its drafts, so ``n_tokens`` already counts them, then samples each position
  with ``while sample_idx < self.n_tokens: token = self.sample(..., idx=sample_idx)``. The
  processor called for position ``sample_idx`` so sees the drafts after it, which are not (yet,
  or ever) part of the output. The stopping criteria in the same loop get the right slice,
  ``self._input_ids[:sample_idx]``.

Minimal fix: hand the processor the history up to the position being sampled,
``self.input_ids[: idx + 1]`` (store ``idx`` on ``self`` in ``sample`` before the sampler chain runs,
and read it in ``apply_func``).

Versions affected: since PR #1179 (0.2.x), which made the processor receive the whole evaluated
array, through 0.3.36. Related threads: outlines #638 (closed: the history was one token short
after 0.2.38's speculative change) -> llama-cpp-python PR #1179 (its fix hands the whole array,
which under prompt lookup includes the drafts); llama-cpp-python #1770 ("Speculative decoding
gives weird results in v0.3", possibly the same, unconfirmed). Native penalties and grammars are
unaffected: they live in llama.cpp's sampler chain, fed by ``accept()``.

What the user sees: with ``draft_model=LlamaPromptLookupDecoding(...)`` a custom penalty, a
no-repeat rule or a constrained-decoding processor (outlines' llama.cpp integration) conditions on
tokens that are not in the output, and emits tokens its own rule forbids. On SmolLM2-135M,
1,471 of 1,912 processor calls saw drafts and 39 banned repeats were emitted
(``examples/llama_cpp_processor_history_repro.py SMOL``, which runs the real library).

This script is a stub: llama-cpp-python is a source build (its PyPI package compiles llama.cpp),
so here ``GenerateLoop`` transcribes the control flow of ``Llama.generate`` / ``sample`` quoted
above, with a deterministic toy target (the next token is the last one plus 1, skipping a banned
token) and a drafter that proposes wrong tokens, and a processor that records the history it is
handed. BROKEN counts processor calls whose history is longer than the position being sampled;
the fix is applied as a monkeypatch of the stub's ``processor_history`` and the count is taken
again. Exit 1 while the transcription of the installed-version code is broken.

The same fix for the INSTALLED library: :func:`patched_llama` (a context manager) and
:func:`install_llama_fix` apply it to ``llama_cpp.Llama`` in this process, as upstream would write
it: ``sample`` stores ``idx`` on the instance, and ``_init_sampler``'s ``apply_func`` (recompiled from
the installed source with that one call changed, so a changed upstream line is an error, not a
silent no-op) hands the processor ``self.input_ids[: idx + 1]``. The gate runs it as
``python -m tests.support.peer_verdicts_llama --path lookup-processor --patched``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

VOCAB = 50
PROMPT = [3, 4, 5, 6]
DRAFT_LENGTH = 3
MAX_TOKENS = 24


class RecordingProcessor:
    """Bans the previous token; records, per call, the position sampled and the history length."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, sample_idx: int, history: list[int], logits: list[float]) -> list[float]:
        self.calls.append((sample_idx, len(history)))
        banned = list(logits)
        banned[history[-1]] = float("-inf")
        return banned


class GenerateLoop:
    """The slice of ``Llama.generate``/``sample``/``apply_func`` that decides the processor's history."""

    def __init__(self, processor: RecordingProcessor) -> None:
        self.input_ids: list[int] = []
        self.n_tokens = 0
        self.processor = processor

    def processor_history(self, idx: int) -> list[int]:
        # apply_func: logit_processor(self._input_ids, ...), _input_ids = input_ids[: n_tokens]
        return self.input_ids[: self.n_tokens]

    def eval(self, tokens: list[int]) -> None:
        self.input_ids[self.n_tokens :] = list(tokens)
        self.n_tokens += len(tokens)

    def sample(self, idx: int) -> int:
        # toy target logits at row idx: the token after input_ids[idx] is the likeliest
        logits = [0.0] * VOCAB
        logits[(self.input_ids[idx] + 1) % VOCAB] = 2.0
        logits[(self.input_ids[idx] + 2) % VOCAB] = 1.0
        logits = self.processor(idx, self.processor_history(idx), logits)
        return max(range(VOCAB), key=lambda token: logits[token])

    def draft(self, history: list[int]) -> list[int]:
        # a prompt-lookup-like drafter whose guesses are wrong: every draft is rejected
        return [(history[-1] + 7 + i) % VOCAB for i in range(DRAFT_LENGTH)]

    def generate(self, prompt: list[int]) -> list[int]:
        tokens, output = list(prompt), list[int]()
        sample_idx = len(prompt) - 1  # the first sampled row is the prompt's last
        while len(output) < MAX_TOKENS:
            self.eval(tokens)
            while sample_idx < self.n_tokens:
                token = self.sample(sample_idx)
                sample_idx += 1
                output.append(token)
                tokens = [token]
                if sample_idx < self.n_tokens and token != self.input_ids[sample_idx]:
                    self.n_tokens = sample_idx  # drafts rejected: the KV is cut back here
                    break
            tokens = tokens + self.draft(self.input_ids[: self.n_tokens] + tokens)
        return output[:MAX_TOKENS]


def fixed_processor_history(self: GenerateLoop, idx: int) -> list[int]:
    """The fix: the history up to and including the row being sampled."""
    return self.input_ids[: idx + 1]


ORIGINAL_PROCESSOR_HISTORY = GenerateLoop.processor_history


@contextmanager
def patched_loop() -> Iterator[None]:
    GenerateLoop.processor_history = fixed_processor_history
    try:
        yield
    finally:
        GenerateLoop.processor_history = ORIGINAL_PROCESSOR_HISTORY


# The installed library's line in ``Llama._init_sampler.apply_func`` and its fix.
BROKEN_CALL = "logit_processor(self._input_ids, recarray.logit)"
FIXED_CALL = "logit_processor(_processor_history(self), recarray.logit)"


def _processor_history(llm: Any) -> Any:
    """The fix's history: prompt + output up to the row being sampled (``Llama.sample``'s ``idx``),
    or the evaluated ids where ``sample`` was called without one (its last row)."""
    idx = getattr(llm, "_sampled_row", None)
    return llm._input_ids if idx is None else llm.input_ids[: idx + 1]


def install_llama_fix() -> Callable[[], None]:
    """Apply the fix to the installed ``llama_cpp.Llama`` in this process; returns the undo."""
    import inspect
    import textwrap

    import llama_cpp.llama as module

    llama = module.Llama
    original_init_sampler, original_sample = llama._init_sampler, llama.sample
    source = textwrap.dedent(inspect.getsource(original_init_sampler))
    if source.count(BROKEN_CALL) != 1:
        raise RuntimeError(f"llama_cpp.Llama._init_sampler no longer calls {BROKEN_CALL!r}: the fix does not apply")
    namespace: dict[str, Any] = {}
    scope = dict(vars(module), _processor_history=_processor_history)
    exec(compile(source.replace(BROKEN_CALL, FIXED_CALL), module.__file__ or "llama.py", "exec"), scope, namespace)
    signature = inspect.signature(original_sample)

    def sample(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._sampled_row = signature.bind(self, *args, **kwargs).arguments.get("idx")
        try:
            return original_sample(self, *args, **kwargs)
        finally:
            self._sampled_row = None

    llama._init_sampler, llama.sample = namespace["_init_sampler"], sample

    def undo() -> None:
        llama._init_sampler, llama.sample = original_init_sampler, original_sample

    return undo


@contextmanager
def patched_llama() -> Iterator[None]:
    """The installed llama-cpp-python with the fix for the duration of the block, then as released."""
    undo = install_llama_fix()
    try:
        yield
    finally:
        undo()


def calls_seeing_drafts() -> tuple[int, int]:
    """(processor calls whose history runs past the sampled row, calls in all)."""
    processor = RecordingProcessor()
    GenerateLoop(processor).generate(PROMPT)
    seeing = sum(1 for idx, length in processor.calls if length > idx + 1)
    return seeing, len(processor.calls)


def measure() -> dict[str, tuple[int, int]]:
    broken = calls_seeing_drafts()
    with patched_loop():
        fixed = calls_seeing_drafts()
    return {"BROKEN": broken, "FIXED": fixed}


def main() -> int:
    outcome = measure()
    print("llama-cpp-python Llama.generate + draft_model (transcribed stub; library not needed)")
    for label, (seeing, calls) in outcome.items():
        print(f"{label}: {seeing} of {calls} processor calls saw unverified draft tokens in their history")
    return 1 if outcome["BROKEN"][0] > 0 and outcome["FIXED"][0] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
