"""`--ours` at depth on SmolLM2: our decode loop's whole generations, timed in a given source tree
(not collected by pytest: minutes).

    OPENBLAS_NUM_THREADS=1 python -m lab.measure.ours_depth TREE [max_tokens] [n] [rounds]

Imports verispec from TREE (this checkout, or an older one unpacked with
``git archive COMMIT | tar -x -C DIR``), loads SmolLM2 from the registry and times ``n``
generations of ``max_tokens`` (default 64, 4) of check-decoder's ``--ours`` decoder with its
defaults (target T 1, top-k 4, repeat penalty 1.5; draft T 2, top-k 4; k 2; "The cat sat on the"),
the same seed each round, and one teacher-forced forward per generation (the depth test's rows).
Two trees run one after the other with the same arguments time the same work: the before/after
of the decoder's row provider.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    tree = sys.argv[1]
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    sys.path.insert(0, tree)
    import verispec
    from verispec.reference.model import Model
    from verispec.reference.sampling import SamplingParams
    from verispec.reference.tokenizer import Tokenizer
    from verispec.registry import resolve_model
    from verispec.spec.decoder.check import ReferenceDecoder, ReferenceLogits
    from verispec.spec.decoder.depth.law import reference_rows

    path = resolve_model("smollm2-135m")
    model, tokenizer = Model.load(path), Tokenizer.from_file(path)
    decoder = ReferenceDecoder(ReferenceLogits(model), tokenizer, SamplingParams(temperature=2.0, top_k=4), 2)
    params = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)
    prompt = tokenizer.encode("The cat sat on the", add_bos=tokenizer.add_bos, parse_special=True)
    rows = reference_rows(model)
    for _ in range(rounds):
        started = time.perf_counter()
        gens = decoder.generate(prompt, params, max_tokens, n, 1)
        decoded = time.perf_counter() - started
        for g in gens:
            rows(tuple(prompt) + tuple(g), len(prompt))
        print(
            {
                "tree": verispec.__file__,
                "generations": n,
                "tokens": sum(len(g) for g in gens),
                "decode_s": round(decoded, 2),
                "forced_rows_s": round(time.perf_counter() - started - decoded, 2),
                "load": os.getloadavg(),
            },
            flush=True,
        )


if __name__ == "__main__":
    main()
