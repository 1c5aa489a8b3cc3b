"""CPU of the int8 mode's layer pass, for an A/B of two checkouts (SmolLM2, fused layers).

    OPENBLAS_NUM_THREADS=1 VERISPEC_THREADS=1 PYTHONPATH=CHECKOUT python -m lab.layer_ab LABEL

Prints one JSON line: the best of 3 of ``process_time`` per 1-row greedy decode step (48 steps
after a 16-token prompt) and per ``forward_many`` pass of 16 spans of 3 rows (10 passes). Run it
alternately from the two checkouts on an idle machine and compare the minima; the work is the
same ids on both sides.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

PROMPT = list(range(100, 116))


def main(argv: list[str]) -> int:
    from verispec.engine.model import FastModel
    from verispec.registry import resolve_model

    model = FastModel.load(resolve_model("smollm2-135m"), weights="int8")

    def decode_1row(steps: int = 48) -> float:
        cache = model.new_cache(len(PROMPT) + steps + 1)
        model.forward(PROMPT, cache, last_only=True)
        start, token = time.process_time(), 200
        for _ in range(steps):
            token = int(np.argmax(model.forward([token], cache, last_only=True).logits[-1]))
        return (time.process_time() - start) / steps

    def many(passes: int = 10) -> float:
        caches = [model.new_cache(len(PROMPT) + 3 * passes + 1) for _ in range(16)]
        for cache in caches:
            model.forward(PROMPT, cache, last_only=True)
        start = time.process_time()
        for i in range(passes):
            model.forward_many([([300 + i, 301, 302], cache) for cache in caches])
        return (time.process_time() - start) / passes

    decode_1row(4), many(2)  # warm
    print(
        json.dumps(
            {
                "label": argv[0] if argv else "",
                "decode_1row_ms": round(1e3 * min(decode_1row() for _ in range(3)), 3),
                "forward_many_16x3_ms": round(1e3 * min(many() for _ in range(3)), 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
