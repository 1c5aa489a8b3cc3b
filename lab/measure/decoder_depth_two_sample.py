"""A measured run of two-sample mode at depth at its full design (not collected by pytest: minutes).

    OPENBLAS_NUM_THREADS=1 python -m lab.measure.decoder_depth_two_sample [max_tokens] [mutant]

On the tiny synthetic GGUF of lab/measure/decoder_depth.py, the case of
tests/test_decoder_depth_two_sample.py (processors on: top-k 12, min-p 0.02, a ban, a repeat
penalty window, min_tokens 6) with ``max_tokens`` (default 64), alpha 1e-3, the mode's design:
power 0.99 against TV 0.1 on each feature's law. Without ``mutant`` the bug-free loop must PASS
after the final look; with a DEPTH_MUTANTS name that mutant is run instead. Prints the verdict,
the design's N per arm, the seconds taken and the load average before and after.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from lab.measure.decoder_depth import tiny_model
from tests.support.depth import WITH_PROCESSORS, Loop, case
from verispec.spec.decoder.depth.two_sample import check_two_sample_depth, verdict_json
from verispec.spec.decoder.mutants import DEPTH_MUTANTS, DecoderBugs


def main() -> None:
    max_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    bugs = DEPTH_MUTANTS[sys.argv[2]][1] if len(sys.argv) > 2 else DecoderBugs()
    the_case = replace(case(WITH_PROCESSORS), max_tokens=max_tokens)
    load_before = os.getloadavg()
    started = time.perf_counter()
    verdict = check_two_sample_depth(Loop(tiny_model(), bugs), the_case, alpha=1e-3)
    print(
        {
            **verdict_json(verdict),
            "seconds": round(time.perf_counter() - started, 1),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        }
    )


if __name__ == "__main__":
    main()
