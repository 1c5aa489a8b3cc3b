"""mlx-lm speculative decoding: the logits processors' history omits the prompt.

Run (model-free, no mlx needed, well under a second):

    python examples/repros/mlx_lm_speculative_prefill_history.py

Root cause (a mlx-lm source snapshot near 0.32.0, ``mlx_lm/generate.py``; verispec observed it on
0.32.2, where the lines are ``:532``, ``:587-595`` and ``:566-580``):

- ``speculative_generate_step`` starts the processors' history at ``prev_tokens = None``
  (``:510``).
- Its ``_prefill`` (``:570-578``, ``while y.size > 1: ... model(y[:n_to_process][None],
  cache=cache)``) runs the prompt through both models (``:595-596``) and never adds it to
  ``prev_tokens``.
- The first ``_step`` (``:551-561``) sets ``prev_tokens = y``: the LAST prompt token only. Every
  processor (``make_repetition_penalty`` and any custom one) so sees the last prompt token plus
  the output, never the rest of the prompt.

The same omission in plain ``generate_step`` (its prefill loop did not add the prompt to
``tokens``: ``:430`` of the 0.31.3 release) is mlx-lm #1773 (closed 2026-08-22, reported on 0.31.3),
fixed by PR #1777 (merged) for ``generate_step`` only. The 0.32.0 release already has #1777 (its
``generate_step`` is 0.32.2's, and the gate passes its plain path with the same tokens as 0.32.2's),
so on mlx-lm <= 0.31.3 the PLAIN path drops the prompt too; from 0.32.0 plain is right and only the
speculative copy is left.

Minimal fix: seed the history with the prompt when processors are set, as #1777 did for plain
decoding: in ``speculative_generate_step``, ``prev_tokens = prompt[:-1]`` before the first
``_step`` (which appends the last prompt token itself).

Versions affected: speculative path, every release with processors in
``speculative_generate_step`` (mlx-examples #1255 added them) through 0.32.2; plain path through
0.31.3. Related: mlx-lm #1773 / PR #1777 (plain path), #1175 (``mtp_generate_step``'s stale
``prev_tokens``, open), #1156 (lazy ``tokens`` in processors, open), mlx-examples #1255.

What the user sees: ``--draft-model`` with ``--repetition-penalty`` (or any history-dependent
processor) does not penalize the prompt's tokens: a different law from the same command without a
draft model. Small at penalty 1.1 on most prompts (TV 2e-4 at penalty 3 on verispec's default
prompt), large on prompts whose tokens the model favours (TV 0.54 on 'en thor fasten is').

This script is a stub: mlx does not run in verispec's venv, so ``StepFunctions`` transcribes the
history bookkeeping of the two step functions quoted above (prefill, then the first ``_step``),
without a model, and a recording processor takes the history of its first call. BROKEN is the
speculative path as released (and plain before #1777); the fix is applied as a monkeypatch of the
stub's speculative prefill. With mlx-lm installed, ``examples/mlx_lm_speculative_penalty_repro.py``
shows the same on the real library (a tiny random mlx llama, seconds). Exit 1 while the
transcription of the released speculative code is broken.

The same fix for the INSTALLED library: :func:`install_mlx_lm_fix` recompiles
``mlx_lm.generate.speculative_generate_step`` from the installed source with its one line
``prev_tokens = None`` changed to ``prev_tokens = y[:-1] if logits_processors else None`` (``y`` is
the prompt there; the first ``_step`` appends its last token), so a changed upstream line is an
error, not a silent no-op. The gate runs it as ``python -m tests.support.peer_verdicts_cmd --peer
mlx-lm --path speculative --patched`` (examples/mlx_lm_decoder_cmd.py ``--patched``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PROMPT = [5, 9, 14, 22, 31, 40, 47, 52, 58, 3, 17, 60]


class StepFunctions:
    """The history bookkeeping of ``generate_step`` and ``speculative_generate_step``."""

    def plain_history_before_1777(self, prompt: list[int]) -> list[int]:
        # prefill consumed prompt[:-1] without adding it to `tokens`; the step then adds y
        tokens: list[int] = []
        return tokens + prompt[-1:]

    def plain_history_after_1777(self, prompt: list[int]) -> list[int]:
        tokens = list(prompt[:-1])  # PR #1777: prefill adds the tokens it processes
        return tokens + prompt[-1:]

    def speculative_prefill_history(self, prompt: list[int]) -> list[int] | None:
        # prev_tokens = None; _prefill never touches it
        return None

    def speculative_history(self, prompt: list[int]) -> list[int]:
        prev_tokens = self.speculative_prefill_history(prompt)
        y = prompt[-1:]  # what _prefill leaves for the first _step
        return (prev_tokens + y) if prev_tokens is not None else y


def fixed_speculative_prefill_history(self: StepFunctions, prompt: list[int]) -> list[int] | None:
    """The fix: the prompt (but its last token, which the first _step appends) seeds prev_tokens."""
    return list(prompt[:-1])


ORIGINAL_SPECULATIVE_PREFILL = StepFunctions.speculative_prefill_history


@contextmanager
def patched_speculative() -> Iterator[None]:
    StepFunctions.speculative_prefill_history = fixed_speculative_prefill_history
    try:
        yield
    finally:
        StepFunctions.speculative_prefill_history = ORIGINAL_SPECULATIVE_PREFILL


# The installed library's line in ``speculative_generate_step`` and its fix.
BROKEN_LINE = "    prev_tokens = None\n"
FIXED_LINE = "    prev_tokens = y[:-1] if logits_processors else None\n"


def install_mlx_lm_fix() -> Callable[[], None]:
    """Apply the fix to the installed ``mlx_lm.generate.speculative_generate_step`` in this process
    (callers that import it from the module after this get the fixed one); returns the undo."""
    import importlib
    import inspect

    module: Any = importlib.import_module("mlx_lm.generate")  # the package's ``generate`` attribute is a function
    original = module.speculative_generate_step
    source = inspect.getsource(original)
    if source.count(BROKEN_LINE) != 1:
        raise RuntimeError(f"speculative_generate_step no longer has {BROKEN_LINE.strip()!r}: the fix does not apply")
    namespace: dict[str, Any] = {}
    exec(
        compile(source.replace(BROKEN_LINE, FIXED_LINE), module.__file__ or "generate.py", "exec"),
        vars(module),
        namespace,
    )
    module.speculative_generate_step = namespace["speculative_generate_step"]

    def undo() -> None:
        module.speculative_generate_step = original

    return undo


def first_call_history_lengths() -> dict[str, int]:
    steps = StepFunctions()
    lengths = {
        "plain <= 0.31.3": len(steps.plain_history_before_1777(PROMPT)),
        "plain after #1777": len(steps.plain_history_after_1777(PROMPT)),
        "BROKEN speculative": len(steps.speculative_history(PROMPT)),
    }
    with patched_speculative():
        lengths["FIXED speculative"] = len(steps.speculative_history(PROMPT))
    return lengths


def measure() -> dict[str, tuple[int, int]]:
    """(prompt tokens missing from the first processor call's history, prompt length) per path."""
    return {label: (len(PROMPT) - seen, len(PROMPT)) for label, seen in first_call_history_lengths().items()}


def main() -> int:
    outcome = measure()
    print("mlx-lm generate_step / speculative_generate_step history (transcribed stub; mlx not needed)")
    for label, (missing, total) in outcome.items():
        print(f"{label}: the first processor call misses {missing} of the {total} prompt tokens")
    broken = outcome["BROKEN speculative"][0] > 0
    return 1 if broken and outcome["FIXED speculative"][0] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
