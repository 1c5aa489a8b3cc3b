"""``check-decoder --workers N``: the depth tests' generations decoded by N engine processes.

Each worker is a program under test behind its own :class:`spec.external.CommandTransport` (a
:class:`spec.decoder.check.CommandEngine`): ``--engine-cmd`` N times, or ``python -m
verispec.decoder.worker`` serving a Python engine (``--engine MOD:FACTORY``, ``--ours``,
``--mutant``) that each worker builds for itself. So a worker is contained exactly as any program
under test is: its own process group, every wait bounded by ``--timeout``, its group killed on
close, on a failure, on Ctrl-C / SIGTERM and at exit (:func:`spec.external.kill_all_peers`). A
worker that crashes, hangs or answers malformed output fails the block it was decoding with an
:class:`~verispec.reference.errors.ExternalError` naming how, which the depth test reports as the
engine's failure (exit 1); one that cannot start at all is a :class:`ProgramCannotStart` when the
pool starts (exit 2), before any test.

:class:`GenerationPool` answers ``submit(op, ...)`` (a future of one block: ``generate`` or
``generate_plain``) by handing the block to an idle worker; :mod:`spec.decoder.depth.blocks` keeps
``lookahead`` = N blocks in flight. A block's generations depend on its own seed only (the
engine's ``generate`` contract), so they are the same whichever worker decodes them.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verispec.spec import signals

READY_OP = "ready"  # the start probe: any valid envelope (an engine answers "unsupported") means it runs


class GenerationPool:
    """N engines (each a program of its own) serving blocks of generations concurrently."""

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("a generation pool needs at least one engine")
        self.engines = list(engines)
        self.lookahead = len(self.engines)
        self._idle: queue.Queue[Any] = queue.Queue()
        for engine in self.engines:
            self._idle.put(engine)
        self._executor = ThreadPoolExecutor(len(self.engines), thread_name_prefix="verispec-decoder-worker")
        try:
            self._start_all()
        except BaseException:
            self.close()
            raise

    def _start_all(self) -> None:
        """Start every worker (concurrently: each loads its model) and wait for its first answer;
        ProgramCannotStart for one that exits before it."""
        started = [Block(self._executor.submit(_ready, engine)) for engine in self.engines]
        for block in started:
            block.result()

    def submit(self, op: str, *args: Any, **kwargs: Any) -> Block:
        """One block (``op`` = ``generate`` or ``generate_plain`` with its arguments) on the next idle worker."""
        return Block(self._executor.submit(self._run, op, args, kwargs))

    def _run(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        engine = self._idle.get()
        try:
            return getattr(engine, op)(*args, **kwargs)
        finally:
            self._idle.put(engine)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.submit("generate", *args, **kwargs).result()

    def generate_plain(self, *args: Any, **kwargs: Any) -> Any:
        return self.submit("generate_plain", *args, **kwargs).result()

    def close(self) -> None:
        """Kill every worker's group first (a block still in flight then fails at once and is
        dropped), then let the threads end."""
        for engine in self.engines:
            close = getattr(engine, "close", None)
            if callable(close):
                close()
        self._executor.shutdown(wait=True, cancel_futures=True)


class Block:
    """A block in flight on a worker. The checker's main thread waits for it in slices
    (spec/signals.py): a Ctrl-C or SIGTERM ends the wait at once, whichever thread took it."""

    def __init__(self, future: Future[Any]) -> None:
        self.future = future

    def result(self) -> Any:
        return signals.result(self.future)

    def cancel(self) -> bool:
        return self.future.cancel()


def _ready(engine: Any) -> None:
    wire = engine.wire
    transport = wire.transport
    transport.exchange([{"id": transport.next_id(READY_OP), "op": READY_OP, "input": {}}])
