"""Small shard sets of `verispec check` reports for the merge tests (tests/spec/test_merge_*.py):
the reference or a mutant through the Python interface, the contract and one statistical test at
2% of its N (:data:`ONLY`, :data:`SCALE`), each shard's report read back from JSON as a CI step
would hand it over."""

from __future__ import annotations

import json
from typing import Any

from verispec.reference.speculative import verify_sampled, verify_sampled_batch
from verispec.spec.check import PythonImplementation, run_check
from verispec.spec.mutants import catalogue
from verispec.spec.vectors import VectorSet

ONLY = ["contract", "stat_verdict_law_k1"]
SCALE = 0.02
Files = list[dict[str, Any]]


def python_impl(mutant: str | None = None) -> PythonImplementation:
    if mutant is None:
        return PythonImplementation(verify_sampled, batch=verify_sampled_batch, description="python: reference")
    chosen = {m.name: m for m in catalogue()}[mutant]
    return PythonImplementation(chosen.verifier, batch=chosen.batch, description=f"python: {mutant}")


def shard_files(vectors: VectorSet, mutant: str | None = None, shards: int = 2) -> Files:
    return [
        json.loads(
            json.dumps(
                run_check(
                    python_impl(mutant), vectors, only=ONLY, scale=SCALE, shard=(i, shards), min_power=0
                ).as_json()
            )
        )
        for i in range(1, shards + 1)
    ]


def copy_shards(files: Files) -> Files:
    return json.loads(json.dumps(files))  # type: ignore[no-any-return]
