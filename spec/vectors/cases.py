"""Cases: each kind's generator, its tolerances, and the expected outputs filled in (in memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from verispec.spec.vectors.answers import reference_answer
from verispec.spec.vectors.draws import Item
from verispec.spec.vectors.gen_dequantize import dequantize_items
from verispec.spec.vectors.gen_gates import conformal_items, gate_items
from verispec.spec.vectors.gen_large import large_items
from verispec.spec.vectors.gen_processors import rows_items, target_law_items
from verispec.spec.vectors.gen_verdicts import greedy_items, sampled_items
from verispec.spec.vectors.kinds import DEFAULT_COUNT, DEFAULT_SEED, KINDS, VectorError
from verispec.spec.vectors.wire import Case

PROB_TOLERANCE = 1e-6  # |got - expected| per probability (zeros must match exactly)

# each kind's generator: (rng, count) -> count random items plus the kind's edge and invalid items
GENERATORS: dict[str, Callable[[np.random.Generator, int], list[Item]]] = {
    "sampled": sampled_items,
    "sampled_large": large_items,
    "greedy": greedy_items,
    "rows": rows_items,
    "target_law": target_law_items,
    "gate": gate_items,
    "conformal_index": conformal_items,
    "dequantize": dequantize_items,
}
TOLERANCES: dict[str, dict[str, float]] = {
    "rows": {"p": PROB_TOLERANCE, "q": PROB_TOLERANCE},
    "target_law": {"probs": PROB_TOLERANCE},
}


def build_cases(kind: str, count: int, seed: int) -> list[Case]:
    """The cases of one kind: ``count`` random ones plus the edge cases, with expected outputs."""
    if kind not in GENERATORS:
        raise VectorError(f"unknown vector kind {kind!r}; known: {', '.join(KINDS)}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    cases: list[Case] = []
    for index, (inp, tags) in enumerate(GENERATORS[kind](rng, count)):
        cases.append(
            {
                "id": f"{kind}/{index:04d}",
                "op": kind,
                "tags": tags,
                "input": inp,
                "expected": reference_answer(kind, inp),
                "tolerance": TOLERANCES.get(kind, {}),
            }
        )
    return cases


@dataclass(frozen=True)
class VectorSet:
    """Cases by kind (file order), with the seed and count they came from."""

    cases: dict[str, list[Case]]
    seed: int
    count: int
    source: str  # "generated" or the directory they were read from
    # per kind, the replay's request lines as the wire spells them (spec/external): filled by the
    # first replay of this set through a program, reused by every later one (the cases are fixed
    # once built, so their encoding is too); never copied by dataclasses.replace (init=False)
    wire_lines: dict[str, list[bytes]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def all_cases(self) -> Iterable[Case]:
        for kind in KINDS:
            yield from self.cases.get(kind, [])


def build_vectors(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED, kinds: Sequence[str] = KINDS) -> VectorSet:
    """Every kind's cases, in memory."""
    if count < 0:
        raise VectorError(f"count must be >= 0, got {count}")
    return VectorSet({kind: build_cases(kind, count, seed) for kind in kinds}, seed, count, "generated")
