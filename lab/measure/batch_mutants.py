"""The batch test's reference engine and its mutants at a stated design, as a measurement (not a test).

    OPENBLAS_NUM_THREADS=1 python -m lab.measure.batch_mutants [TV] [FRACTION] [DEPTH]      (default 0.1 0.2 64)

On the tiny synthetic llama of tests/support/synthetic.py (a 3-layer TinyLlama shape, seed 3, the target of
tests/support/peer_verdicts.py), the verispec law (temperature 1, top_k 4, repeat_penalty 1.5: check-decoder's
defaults), alpha 1e-3: our lockstep engine (``EngineDecoder.generate_batch``, int8) and each batch
mutant of spec/decoder/depth/batch_mutants.py under the batch test (spec/decoder/depth/batch.py), one
line each: the verdict, where it failed, the calls and generations it took, seconds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tests.support.peer_verdicts import PROMPT, write_models
from verispec.decoder.ours import EngineDecoder
from verispec.spec.decoder.depth.batch import check_batch, default_lanes
from verispec.spec.decoder.depth.batch_mutants import BATCH_MUTANTS, batch_mutant
from verispec.spec.decoder.depth.generation import DepthCase
from verispec.spec.decoder.laws import build


def main(argv: list[str]) -> None:
    tv, fraction, depth = (float(argv[0]) if argv else 0.1), (float(argv[1]) if len(argv) > 1 else 0.2), 64
    depth = int(argv[2]) if len(argv) > 2 else depth
    target = write_models(Path(tempfile.mkdtemp()))["target"]
    engine = EngineDecoder(target, "int8")
    tokenizer = engine.tokenizer
    ids = tuple(tokenizer.encode(PROMPT, add_bos=tokenizer.add_bos, parse_special=True))
    profile = build("verispec", {}, tokenizer.eog_ids)
    case = DepthCase(ids, profile.legacy, depth, frozenset(tokenizer.eog_ids), 0, None, engine.model.config.n_vocab)
    lanes = default_lanes(case, profile)
    for name in ["none", *BATCH_MUTANTS]:
        decoder = engine if name == "none" else batch_mutant(name, engine)
        began = time.perf_counter()
        v = check_batch(decoder, engine.forced_rows, lanes, alpha=1e-3, tv=tv, fraction=fraction)
        print(
            f"{name}: {v.state} after {v.calls} test calls ({v.generations} generations) in "
            f"{time.perf_counter() - began:.1f} s; {v.where[:200] or v.detail[:200]}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
