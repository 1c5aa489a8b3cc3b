"""The mutant table of docs/checking-decoders.md, measured (not collected by pytest: minutes).

    OPENBLAS_NUM_THREADS=1 python -m lab.measure.depth_mutants [law|two-sample|both] [NAME ...]

Every mutant of spec.decoder.mutants.DEPTH_MUTANTS (and the first-m mutant ``rollback_off_by_one``)
on the tiny synthetic GGUF of tests/test_decoder_depth.py, k = 2, through the law at depth (the
product's design: power 0.99 against TV 0.05 on 10% of positions, alpha 1e-3, processors on:
top-k 12, min-p 0.02, a ban, a repeat penalty window, min_tokens 6; blocks of 20 generations)
and through two-sample mode at depth (its default design: TV 0.1 on each feature's law, alpha
1e-3, the same params, 12 tokens), exactly the cases of tests/test_decoder_depth.py and
tests/test_decoder_depth_two_sample.py. Prints one markdown row per mutant: the verdict, the
generations (per arm in two-sample mode) and tokens drawn until it, and where it was seen; a
two-sample run is cut at 150 s (inconclusive: not seen by then).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from lab.measure.decoder_depth import tiny_model
from tests.support.depth import WITH_PROCESSORS, Loop, case, run_mutant
from verispec.reference.model import Model
from verispec.spec.decoder.depth.two_sample import TwoSampleDepthVerdict, check_two_sample_depth
from verispec.spec.decoder.mutants import DEPTH_MUTANTS, MUTANT_BUGS

BUDGET = 150.0  # seconds per two-sample run: a mutant it cannot see would run to the design's N


def two_sample(model: Model, name: str) -> TwoSampleDepthVerdict:
    bugs = {**DEPTH_MUTANTS, **MUTANT_BUGS}[name][1]
    params = replace(WITH_PROCESSORS, top_p=0.8) if name == "top_k_top_p_in_the_other_order" else WITH_PROCESSORS
    the_case = replace(case(params), max_tokens=12)
    if name == "eos_in_span_at_max_tokens":
        the_case = replace(the_case, max_tokens=8, min_tokens=0)
    return check_two_sample_depth(Loop(model, bugs), the_case, alpha=1e-3, pilot=50, budget_s=BUDGET)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    names = sys.argv[2:] or [*DEPTH_MUTANTS, "rollback_off_by_one"]
    model = tiny_model()
    for name in names:
        if which in ("law", "both") and name in DEPTH_MUTANTS:
            started = time.perf_counter()
            v = run_mutant(model, name, WITH_PROCESSORS)
            print(
                f"| law | `{name}` | {v.state} | {v.generations} | {v.tokens} | {v.where[:160]} | {time.perf_counter() - started:.0f} s |",
                flush=True,
            )
        if which in ("two-sample", "both"):
            started = time.perf_counter()
            t = two_sample(model, name)
            print(
                f"| two-sample | `{name}` | {t.state} | {t.generations}/arm | | {t.where[:160]} | {time.perf_counter() - started:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
