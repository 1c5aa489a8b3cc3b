"""Early exit's prompt pass with the head on its last row (what the deferred decoder runs) against the head on every row.

``python -m lab.exit_prefill_ab MODEL [--prompt-tokens 32] [--rounds 3]`` loads the int8 mode once
and times ``DeferredDecoder.prefill`` (reference/early_exit.py: the head on the last row alone,
the only row decoding reads) against the same pass with the head on every prompt row (what it
ran before), interleaved, in CPU seconds (``time.process_time``: at 1 thread the pass's own work,
robust to the machine's load). Both give the last row the same bits (checked). Set
``OPENBLAS_NUM_THREADS=1`` and ``VERISPEC_THREADS=1``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from verispec.engine.model import FastModel
from verispec.reference.early_exit import DeferredDecoder
from verispec.registry import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a registered model name or a GGUF path")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = FastModel.load(resolve_model(args.model), weights="int8")
    prompt = list(range(100, 100 + args.prompt_tokens))  # token ids; the pass's cost does not depend on them
    seconds: dict[str, list[float]] = {"last row": [], "every row": []}
    for _ in range(args.rounds):
        rows = {}
        for how in seconds:
            cache = model.new_cache(len(prompt))
            decoder = DeferredDecoder(model, cache, (1,))
            start = time.process_time()
            if how == "last row":
                rows[how] = decoder.prefill(prompt)
            else:
                rows[how] = model.forward(prompt, cache).logits[-1:]
            seconds[how].append(time.process_time() - start)
        assert np.array_equal(rows["last row"], rows["every row"]), "the last row's bits differ"
    median = {how: statistics.median(values) for how, values in seconds.items()}
    for how, values in seconds.items():
        print(f"{how:>9}: CPU s {', '.join(f'{v:.3f}' for v in values)} (median {median[how]:.3f})")
    print(
        f"{args.model}, {len(prompt)} prompt tokens: every row / last row = {median['every row'] / median['last row']:.2f}"
    )


if __name__ == "__main__":
    main()
