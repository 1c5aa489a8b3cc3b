"""``verispec check --workers N``: draw the statistical tests' blocks in N verifier processes.

Each worker builds its own copy of the implementation from an :class:`ImplementationSpec`
(``module:function`` strings or a command: things that cross a process boundary) and answers
"counts of block b of test T". A block's generator depends only on (seed, test, block)
(:func:`spec.sequential.block_rng`), so for a verifier that consumes the given uniforms the counts,
and therefore the verdicts, are the same with any number of workers. A law-only verifier is handed
the seed of each call (:mod:`spec.law_only`), a function of the block too: its counts are the same
with any number of workers as well, provided it draws from that seed. One that ignores it and
seeds one stream per process would give every worker the same stream: each worker's first call is
the same-stream probe (:mod:`spec.stream_probe`, indexed by its process id), and two workers with
identical probes stop the run with "worker processes A and B drew the same stream".
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from verispec.reference.speculative import BatchVerifier
from verispec.spec.sequential import Counts, StatDesign, draw_block
from verispec.spec.stream_probe import run_probe, same_stream, same_stream_message
from verispec.spec.subject import until_expired


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
        return PythonImplementation.from_specs(
            self.verifier, self.batch, self.greedy, self.pipeline, law_only=self.law_only
        )


_batch: BatchVerifier | None = None  # this worker's verifier
_seed = 0
_probe: str | None = None  # this worker's same-stream probe (its first verifier call)
_designs: dict[str, StatDesign] = {}
_barrier: Any = None  # all workers meet here once, so each answers one roll call
_deadline: float | None = None  # the current draw's budget end (time.time()), None: no budget
START_TIMEOUT = 300.0  # seconds for every worker to start and probe


def _start(spec: ImplementationSpec, seed: int, barrier: Any = None) -> None:
    global _batch, _seed, _probe, _barrier
    from verispec.spec.properties import as_batch

    _barrier = barrier
    impl = spec.build()
    verifier, batch, _ = impl.verifier_parts()  # type: ignore[attr-defined]
    _batch, _seed = (until_expired(batch, _expired) if batch is not None else as_batch(verifier, _expired)), seed
    _probe = run_probe(_batch, seed, os.getpid())


def _expired() -> bool:
    return _deadline is not None and time.time() >= _deadline


def _roll_call(_: int) -> tuple[int, str | None]:
    """(pid, probe) of the worker that runs it; blocks until every worker has one (the barrier)."""
    if _barrier is not None:
        _barrier.wait(timeout=START_TIMEOUT)
    return os.getpid(), _probe


def _draw(name: str, block: int, size: int, deadline: float | None = None) -> tuple[int, str | None, list[int]]:
    """(this worker's pid, its probe, the counts of one block); BudgetEnded (raised in the checker
    too) if the verifier would be called past ``deadline``."""
    from verispec.spec.properties import STAT_DESIGNS

    global _deadline
    assert _batch is not None, "worker not started"
    _deadline = deadline
    if name not in _designs:
        _designs[name] = STAT_DESIGNS[name]()
    return os.getpid(), _probe, [int(c) for c in draw_block(_designs[name], _batch, _seed, block, size)]


class WorkerPool:
    """N processes, each with its own implementation; :meth:`draw` is a ``BlockDraw``."""

    def __init__(self, spec: ImplementationSpec, seed: int, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.law_only = spec.law_only
        self.probes: dict[int, str | None] = {}  # pid -> its probe
        context = multiprocessing.get_context("spawn")  # no fork of a parent holding pipe threads
        barrier = context.Barrier(workers)
        self._executor = ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start, initargs=(spec, seed, barrier)
        )
        try:
            self._roll_call(workers)
        except BaseException:
            self.close()
            raise

    def _roll_call(self, workers: int) -> None:
        """Start every worker and compare their probes before any block is drawn: one task per
        worker, each held at the barrier until all have arrived, so no worker answers two."""
        from verispec.spec.report import CheckError

        try:
            answers = list(self._executor.map(_roll_call, range(workers)))
        except threading.BrokenBarrierError:
            raise CheckError(f"not all {workers} worker processes started within {START_TIMEOUT:g} s") from None
        for pid, probe in answers:
            self.probes[pid] = probe
        pair = same_stream(self.probes)
        if pair is not None:
            raise CheckError(same_stream_message(pair, "worker processes", self.law_only))

    def draw(self, design: StatDesign, blocks: Sequence[int], size: int, deadline: float | None = None) -> list[Counts]:
        """The counts of ``blocks``, one per worker; with ``deadline`` (a budget's end, ``time.time()``)
        BudgetEnded when a worker reaches it inside a block (the blocks are dropped)."""
        from verispec.spec.report import CheckError

        names, sizes = [design.name] * len(blocks), [size] * len(blocks)
        answers = list(self._executor.map(_draw, names, list(blocks), sizes, [deadline] * len(blocks)))
        for pid, probe, _ in answers:
            self.probes[pid] = probe
        pair = same_stream(self.probes)
        if pair is not None:
            raise CheckError(same_stream_message(pair, "worker processes", self.law_only))
        return [np.asarray(c, dtype=np.int64) for _, _, c in answers]

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
