"""Fuzz past the parser: mutated llama / gemma3 / phi3 models through inspect, config, tokenizer and both
engines' load and forward (tests/support/model_corpus.py) end in a typed VerispecError or succeed.

No other exception, and no case past its time bound (a CPU-time timer turns a hang into a failure
instead of a stuck run). The corpus is a fixed seeded list: ``ci`` runs its first cases (a few
seconds), ``thorough`` five times as many; ``python -m tests.support.model_corpus --cases N`` is the long
run with totals by stage and error class.
"""

from __future__ import annotations

import warnings

import numpy as np

from tests.support.model_corpus import SEEDS, STAGES, case, exercise, run_cases
from tests.support.profiles import examples


def test_the_seeds_pass_every_stage() -> None:
    # The corpus starts from working models: a mutation, not the seed, is what a failure points at.
    for arch, seed in SEEDS.items():
        want = dict.fromkeys(STAGES, "ok")
        if arch == "phi3":  # the fast engine implements llama and gemma3; phi3 runs f32 on the reference
            want["engine_quantized"] = "UnsupportedArchitecture"
        assert exercise(seed.to_bytes()) == want, arch


def test_cases_are_a_pure_function_of_their_number() -> None:
    assert case(17) == case(17) and case(17) != case(18)


def test_mutated_models_fail_only_with_typed_errors() -> None:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow in a forward: NaN, a ModelError
        counts, failures = run_cases(range(examples(400)))
    assert not failures, "\n".join(failures)
    # The corpus reaches every stage, and the model-building stages both pass and refuse some
    # mutants: a generator that broke every file at parse time would test nothing past the parser.
    for stage in STAGES:
        assert counts[f"{stage}: ok"] > 0, stage
    for stage in ("parse", "config", "tokenizer", "reference"):
        assert any(key.startswith(f"{stage}: ") and not key.endswith((": ok", ": skipped")) for key in counts), stage
