"""openvino-genai's prompt lookup ends a generation before ``min_new_tokens``.

Run with a python that has openvino-genai (nothing of verispec is used), on a llama GGUF its
reader loads (F16 matrices, byte-level BPE vocabulary):

    /work/venvs/openvino/bin/python examples/openvino_genai_lookup_min_tokens_repro.py TARGET.gguf

(``python -m tests.support.peer_verdicts_cmd --peer openvino-genai --out DIR`` writes one as
``DIR/tinyllama-bpe-f16.gguf``.) ``min_new_tokens = N`` bans the stop tokens while fewer than N
tokens have been generated (``EOSPenaltyTransform``: ``generated_tokens_cnt < min_new_tokens``),
so no output may hold a stop token at an index below N. The script samples the same requests
(temperature 1, seeds 0..SEEDS-1) from the plain pipeline and from ``prompt_lookup=True``, and
counts outputs that stop early. Plain decoding never does; prompt lookup does.

Exit 1 when prompt lookup stops before ``min_new_tokens`` and plain decoding does not (the
defect present), 0 otherwise.
"""

from __future__ import annotations

import sys

import numpy as np
import openvino as ov
import openvino_genai as g

PRECISION = {"KV_CACHE_PRECISION": "f32", "INFERENCE_PRECISION_HINT": "f32"}
PROMPT = [87, 261, 275, 271, 269, 271, 35, 266, 259, 261]  # "The cat sat on the" (tests/support/synthetic.py BPE)
STOP = {0, 2}
MIN_NEW, MAX_NEW, SEEDS = 8, 24, 150


def early_stops(pipe: g.LLMPipeline, lookup: bool) -> tuple[int, list[tuple[int, int]]]:
    """(outputs that hold a stop token before MIN_NEW, the first few (seed, index))."""
    cfg = pipe.get_generation_config()
    cfg.max_new_tokens, cfg.min_new_tokens, cfg.stop_token_ids = MAX_NEW, MIN_NEW, STOP
    cfg.do_sample, cfg.temperature, cfg.top_k = True, 1.0, 0
    if lookup:
        cfg.num_assistant_tokens, cfg.max_ngram_size = 3, 3
    ids = np.array([PROMPT], dtype=np.int64)
    count, where = 0, []
    for seed in range(SEEDS):
        cfg.rng_seed = seed
        out = [
            int(t)
            for t in pipe.generate(g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), cfg).tokens[0]
        ]
        early = [i for i, t in enumerate(out) if t in STOP and i < MIN_NEW]
        if early:
            count += 1
            where.append((seed, early[0]))
    return count, where[:5]


def main(argv: list[str]) -> int:
    target = argv[1]
    plain = early_stops(g.LLMPipeline(target, "CPU", **PRECISION), lookup=False)
    lookup = early_stops(g.LLMPipeline(target, "CPU", prompt_lookup=True, **PRECISION), lookup=True)
    print(f"min_new_tokens={MIN_NEW}, {SEEDS} sampled requests each (temperature 1):")
    print(f"  plain:         {plain[0]} outputs hold a stop token before index {MIN_NEW} (seed, index): {plain[1]}")
    print(f"  prompt lookup: {lookup[0]} outputs hold a stop token before index {MIN_NEW} (seed, index): {lookup[1]}")
    defect = lookup[0] > 0 and plain[0] == 0
    print("DEFECT: prompt lookup ends generations before min_new_tokens" if defect else "no difference")
    return 1 if defect else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
