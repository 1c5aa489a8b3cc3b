"""A measured run of the depth test at its full design (not collected by pytest: minutes).

    OPENBLAS_NUM_THREADS=1 python tests/measure_decoder_depth.py {deviation|correct} [max_tokens]

On a tiny synthetic GGUF (tests/conftest.py's writer: vocab 64, one layer, 32 wide), the case
of tests/test_decoder_depth.py with full support (temperature 1, repeat penalty 1.5), alpha 1e-3
(check-decoder's default), the design: power 0.99 against TV 0.05 on 10% of positions.
``deviation``: spec.decoder_mutants.DesignDeviation (exactly that deviation, flattened) must
FAIL; ``correct``: the mutant loop without bugs must PASS after the final look. Prints the
verdict, the design's N and the seconds taken.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from tests.conftest import write_tiny_gguf  # noqa: E402

from verispec.reference.model import Model  # noqa: E402
from verispec.reference.sampling import SamplingParams  # noqa: E402
from verispec.spec.decoder_check import ReferenceLogits  # noqa: E402
from verispec.spec.decoder_depth import DepthCase, check_depth, reference_rows, verdict_json  # noqa: E402
from verispec.spec.decoder_law import CachedLaw  # noqa: E402
from verispec.spec.decoder_mutants import DesignDeviation, LoopDecoder  # noqa: E402

EOG = 2
PARAMS = SamplingParams(temperature=1.0, repeat_penalty=1.5, repeat_last_n=32)
DRAFT = SamplingParams(temperature=1.5, top_k=12)


class FreshLoop:
    """The bug-free loop, its memos fresh per block (bounded memory over 10^5 tokens)."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def generate(self, prompt_ids, params, max_tokens, n, seed, min_tokens=0):  # type: ignore[no-untyped-def]
        loop = LoopDecoder(ReferenceLogits(self.model), DRAFT, 2, eog=frozenset({EOG}), law=CachedLaw())
        return loop.generate(prompt_ids, params, max_tokens, n, seed, min_tokens)


class FreshDeviation(FreshLoop):
    def generate(self, prompt_ids, params, max_tokens, n, seed, min_tokens=0):  # type: ignore[no-untyped-def]
        return DesignDeviation(ReferenceLogits(self.model), eog=frozenset({EOG})).generate(
            prompt_ids, params, max_tokens, n, seed, min_tokens)


def main() -> None:
    which = sys.argv[1]
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    path = write_tiny_gguf(Path("/tmp") / "verispec-depth-tiny.gguf", n_vocab=64, n_embd=32, n_layer=1, n_head=4,
                           n_head_kv=2, context_length=256, weight_scale=1.0)
    model = Model.load(path)
    engine = FreshDeviation(model) if which == "deviation" else FreshLoop(model)
    case = DepthCase((1, 5, 9, 13), PARAMS, max_tokens, frozenset({EOG}))
    started = time.perf_counter()
    verdict = check_depth(engine, reference_rows(model), case, alpha=1e-3)
    print({**verdict_json(verdict), "seconds": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()
