"""``verispec check --workers N``: draw the statistical tests' blocks in N verifier processes.

Each worker builds its own copy of the implementation from an :class:`ImplementationSpec`
(``module:function`` strings or a command: things that cross a process boundary) and answers
"counts of block b of test T". A block's generator depends only on (seed, test, block)
(:func:`spec.sequential.block_rng`), so for a verifier that consumes the given uniforms the counts,
and therefore the verdicts, are the same with any number of workers. A law-only verifier draws its
own randomness in each process: its verdicts are a fresh sample, the law tested is the same.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from verispec.reference.speculative import BatchVerifier
from verispec.spec.sequential import Counts, StatDesign, draw_block


@dataclass(frozen=True)
class ImplementationSpec:
    """How to build the implementation in another process (one of verifier / command)."""

    verifier: str | None = None  # module:function
    batch: str | None = None
    greedy: str | None = None
    pipeline: str | None = None
    command: str | None = None
    timeout: float = 60.0
    law_only: bool = False

    def build(self) -> object:
        """The implementation (a :class:`spec.check.Implementation`)."""
        from verispec.spec.check import CommandImplementation, PythonImplementation

        if self.command is not None:
            return CommandImplementation(self.command, self.timeout, law_only=self.law_only)
        assert self.verifier is not None, "an ImplementationSpec needs a verifier or a command"
        return PythonImplementation.from_specs(self.verifier, self.batch, self.greedy, self.pipeline, law_only=self.law_only)


_batch: BatchVerifier | None = None  # this worker's verifier
_seed = 0
_designs: dict[str, StatDesign] = {}


def _start(spec: ImplementationSpec, seed: int) -> None:
    global _batch, _seed
    from verispec.spec.properties import as_batch

    impl = spec.build()
    verifier, batch, _ = impl.verifier_parts()  # type: ignore[attr-defined]
    _batch, _seed = (batch if batch is not None else as_batch(verifier)), seed


def _draw(name: str, block: int, size: int) -> list[int]:
    from verispec.spec.properties import STAT_DESIGNS

    assert _batch is not None, "worker not started"
    if name not in _designs:
        _designs[name] = STAT_DESIGNS[name]()
    return [int(c) for c in draw_block(_designs[name], _batch, _seed, block, size)]


class WorkerPool:
    """N processes, each with its own implementation; :meth:`draw` is a ``BlockDraw``."""

    def __init__(self, spec: ImplementationSpec, seed: int, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        context = multiprocessing.get_context("spawn")  # no fork of a parent holding pipe threads
        self._executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_start, initargs=(spec, seed))

    def draw(self, design: StatDesign, blocks: Sequence[int], size: int) -> list[Counts]:
        names, sizes = [design.name] * len(blocks), [size] * len(blocks)
        return [np.asarray(c, dtype=np.int64) for c in self._executor.map(_draw, names, list(blocks), sizes)]

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
