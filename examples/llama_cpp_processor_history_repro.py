"""llama-cpp-python's prompt lookup decoding hands a ``logits_processor`` unverified drafts as history.

    python -m tests.support.peer_verdicts --out /tmp/peers --write-only     # the tiny GGUF models
    python examples/llama_cpp_processor_history_repro.py /tmp/peers/tinyllama.gguf
    python examples/llama_cpp_processor_history_repro.py SmolLM2-135M-Instruct.Q4_1.gguf   # any GGUF

``Llama.generate`` calls each logits processor as ``processor(self._input_ids, logits)``. With a
draft model (``LlamaPromptLookupDecoding``), ``generate`` first evaluates the last token together
with its drafts, then samples each verified position. At that point ``self._input_ids`` already
holds every drafted token, including those after the position being sampled. A processor that
reads its history (a custom penalty, a grammar, a no-repeat rule) therefore conditions on tokens
that are not yet, and may never be, part of the output.

The script uses llama-cpp-python only. It generates with a processor that bans the previous token
(``logits[input_ids[-1]] = -inf``: no token may repeat the one before it) and records the length
of every history it is handed. Correct, the history is always prompt + the tokens emitted so far,
and no output token repeats its predecessor. The script reports how often the history is longer
than that and how many banned repeats were emitted, with prompt lookup and without. Exit status 1
when prompt lookup shows either and plain decoding shows neither.
"""

from __future__ import annotations

import sys
from typing import Any

PROMPT_TEXT = "The cat sat on the"  # three times over: prompt lookup finds drafts in it
GENERATIONS, MAX_TOKENS = 40, 48


def prompt_ids(llm: Any) -> list[int]:
    """The model's BOS (where its vocabulary adds one), then the text's ids three times."""
    body = llm.tokenize(PROMPT_TEXT.encode(), add_bos=False, special=True)
    return [int(t) for t in llm.tokenize(b"", add_bos=True, special=True)] + [int(t) for t in body] * 3


def run(path: str, lookup: bool, generations: int = GENERATIONS) -> tuple[int, int, int, int]:
    """(tokens emitted, processor calls, calls whose history is longer than the output so far,
    emitted tokens equal to their predecessor)."""
    import numpy as np
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(num_pred_tokens=3) if lookup else None
    llm = Llama(model_path=path, n_ctx=512, verbose=False, draft_model=draft, n_threads=1, n_threads_batch=1)
    prompt, eos = prompt_ids(llm), int(llm.token_eos())
    tokens = calls = ahead = repeats = 0
    for g in range(generations):
        out: list[int] = []

        def no_repeat(input_ids: Any, logits: Any) -> Any:
            nonlocal calls, ahead
            calls += 1
            ahead += len(input_ids) > len(prompt) + len(out)
            logits[int(input_ids[-1])] = -np.inf
            return logits

        llm.set_seed(g)
        llm.reset()
        for t in llm.generate(
            prompt,
            reset=True,
            temp=0.5,
            top_k=0,
            top_p=1.0,
            min_p=0.0,
            repeat_penalty=1.0,
            logits_processor=[no_repeat],
        ):
            out.append(int(t))
            if len(out) == MAX_TOKENS or int(t) == eos:
                break
        history = prompt + out
        repeats += sum(history[len(prompt) + i] == history[len(prompt) + i - 1] for i in range(len(out)))
        tokens += len(out)
    return tokens, calls, ahead, repeats


def main(path: str) -> int:
    import llama_cpp

    results = {}
    for lookup in (False, True):
        results[lookup] = run(path, lookup)
        tokens, calls, ahead, repeats = results[lookup]
        print(
            f"llama-cpp-python {llama_cpp.__version__}, {'prompt lookup' if lookup else 'plain'}: {tokens} tokens, "
            f"{calls} processor calls, {ahead} with unverified tokens in the history, {repeats} banned repeats emitted",
            flush=True,
        )
    plain_ok = results[False][2] == 0 and results[False][3] == 0
    lookup_bad = results[True][2] > 0 or results[True][3] > 0
    return 1 if plain_ok and lookup_bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: llama_cpp_processor_history_repro.py TARGET.gguf")
    sys.exit(main(sys.argv[1]))
