"""Many decode loops in lockstep: each one's target passes batched with the others' into one pass.

A decode loop (:func:`reference.decode.speculative_generate`, or any function of a model) calls
``model.forward(span, cache)`` once a cycle and waits for the logits. :func:`run_lockstep` runs
up to ``width`` such loops at once, each on its own thread, against a proxy model
(:class:`LockstepModel`): the proxy's ``forward`` hands the span to the scheduler and blocks. When
every live loop is blocked (or done), the scheduler runs ALL waiting plain spans as ONE
``model.forward_many`` (:meth:`engine.model.FastModel.forward_many`) and wakes each loop with its
own rows. Anything it cannot batch (a tree span, ``positions``, ``return_hidden``, ``last_only``,
``forward_layers``, ``head``, ``embed``, any other model method) runs alone, in turn, on the
scheduler's thread. The loops' own logic is untouched: there is one speculative loop.

Requirements (tests/test_engine_lockstep.py):

- Same results as running the loops one after another: each loop's model calls are the calls
  it would make alone, and ``forward_many`` gives each span bit for bit what ``forward`` gives it
  alone (the fused int8 mode; in every other mode ``forward_many`` IS one ``forward`` a span).
  Nothing else is shared between loops: each has its own cache, generator and draft. So the
  tokens do not depend on ``width`` or on which loops share a pass.
- A loop that ends leaves the batch; the next waiting loop starts in its place (at most ``width``
  live).
- Errors propagate and nothing hangs: a batched pass that raises is rerun span by span (it
  committed nothing), so each loop gets its own result or its own error, as alone. The first loop
  to raise (the lowest index among those raising in the same step) stops the run: the other loops
  are stopped at their next model call and its exception is raised. An exception in the
  scheduler itself (Ctrl-C) releases every loop the same way.

All model work happens on the scheduler's (the caller's) thread, so models need not be
thread-safe; the GIL serializes the loops' own Python work, which is what it was alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from verispec.reference.errors import LoopStopped

T = TypeVar("T")


@dataclass(eq=False)
class _Call:
    """One loop's pending model call: a batchable span, or anything else as a thunk."""

    span: tuple[list[int], Any] | None
    thunk: Callable[[], Any] | None
    ready: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


@dataclass
class _Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None


STOPPED = "the lockstep run is stopping: another generation failed"


class _Scheduler:
    """The shared state of one lockstep run (module docstring): who is running, who waits on what."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cond = threading.Condition()
        self.running = 0  # live loops executing their own code (not waiting on a call)
        self.waiting: list[_Call] = []
        self.stopping = False

    def submit(self, call: _Call) -> Any:
        """From a loop's thread: queue ``call``, block until the scheduler has run it."""
        with self.cond:
            if self.stopping:
                raise LoopStopped(STOPPED)
            self.waiting.append(call)
            self.running -= 1
            self.cond.notify_all()
        call.ready.wait()
        if call.error is not None:
            raise call.error
        return call.result

    def execute(self, calls: Sequence[_Call]) -> None:
        """One step's calls: all plain spans in one ``forward_many``, the rest alone (each its own
        outcome; a batched pass that raised committed nothing, so its spans are rerun alone)."""
        spans = [c for c in calls if c.span is not None]
        done: set[int] = set()
        if len(spans) > 1 and callable(getattr(self.model, "forward_many", None)):
            try:
                results = self.model.forward_many([c.span for c in spans])
            except Exception:  # noqa: BLE001 - rerun span by span below: each loop gets its own error
                results = None
            if results is not None:
                for c, r in zip(spans, results):
                    c.result = r
                done = {id(c) for c in spans}
        for c in calls:
            if id(c) in done:
                continue
            try:
                c.result = c.thunk() if c.thunk is not None else self.model.forward(*_span(c))
            except Exception as exc:  # noqa: BLE001 - delivered to its own loop, raised there
                c.error = exc


def _span(call: _Call) -> tuple[list[int], Any]:
    assert call.span is not None
    return call.span


class LockstepModel:
    """The model a loop sees: ``config`` and ``new_cache`` its own; every other call goes through
    the scheduler (module docstring). Attributes that are not methods are the model's."""

    def __init__(self, scheduler: _Scheduler) -> None:
        self._scheduler = scheduler
        self.config = scheduler.model.config

    def new_cache(self, capacity: int | None = None) -> Any:
        return self._scheduler.model.new_cache(capacity)

    def forward(
        self,
        tokens: Sequence[int],
        cache: Any,
        *,
        positions: Sequence[int] | None = None,
        return_hidden: bool = False,
        last_only: bool = False,
        tree_parents: Sequence[int] | None = None,
    ) -> Any:
        """A plain causal span waits for the step's batched pass; any other forward runs alone."""
        if positions is None and not return_hidden and not last_only and tree_parents is None:
            return self._scheduler.submit(_Call((list(tokens), cache), None))
        options: dict[str, Any] = {"positions": positions, "return_hidden": return_hidden}
        if last_only:
            options["last_only"] = True
        if tree_parents is not None:
            options["tree_parents"] = tree_parents
        return self._call("forward", (tokens, cache), options)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._scheduler.model, name)
        if not callable(value):
            return value
        return lambda *args, **kwargs: self._call(name, args, kwargs)

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        method = getattr(self._scheduler.model, name)
        return self._scheduler.submit(_Call(None, lambda: method(*args, **kwargs)))


def run_lockstep(model: Any, loops: Sequence[Callable[[LockstepModel], T]], width: int) -> list[T]:
    """Run ``loops[i](proxy)`` for every i, at most ``width`` at once in lockstep over ``model``
    (module docstring); their results in order. Raises the first failing loop's exception."""
    if width < 1:
        raise ValueError(f"lockstep width {width} must be positive")
    scheduler = _Scheduler(model)
    proxy = LockstepModel(scheduler)
    outcomes: list[_Outcome[T]] = [_Outcome() for _ in loops]
    failed: list[int] = []

    def body(index: int) -> None:
        try:
            outcomes[index].value = loops[index](proxy)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcomes[index].error = exc
            if not isinstance(exc, LoopStopped):
                with scheduler.cond:
                    failed.append(index)
                    scheduler.stopping = True
        finally:
            with scheduler.cond:
                scheduler.running -= 1
                scheduler.cond.notify_all()

    threads: list[threading.Thread] = []
    calls: list[_Call] = []
    try:
        while True:
            with scheduler.cond:
                while (
                    len(threads) < len(loops)
                    and not scheduler.stopping
                    and scheduler.running + len(scheduler.waiting) < width
                ):
                    scheduler.running += 1
                    threads.append(threading.Thread(target=body, args=(len(threads),), daemon=True))
                    threads[-1].start()
                scheduler.cond.wait_for(lambda: scheduler.running == 0)
                calls, scheduler.waiting = scheduler.waiting, []
                if not calls and (len(threads) == len(loops) or scheduler.stopping):
                    break
                scheduler.running += len(calls)
                stopping = scheduler.stopping
            if stopping:
                for call in calls:
                    call.error = LoopStopped(STOPPED)
            else:
                scheduler.execute(calls)
            for call in calls:
                call.ready.set()
            calls = []
    except BaseException:
        _release(scheduler, calls)
        raise
    for thread in threads:
        thread.join()
    if failed:
        error = outcomes[min(failed)].error
        assert error is not None
        raise error
    return [_value(o) for o in outcomes]


def _value(outcome: _Outcome[T]) -> T:
    assert outcome.error is None
    return outcome.value  # type: ignore[return-value]


def _release(scheduler: _Scheduler, in_flight: list[_Call]) -> None:
    """The scheduler itself is failing (Ctrl-C): wake every loop, waiting or in the step being
    run, with :class:`LoopStopped`."""
    with scheduler.cond:
        scheduler.stopping = True
        calls, scheduler.waiting = [*in_flight, *scheduler.waiting], []
    for call in calls:
        if not call.ready.is_set():
            call.error = LoopStopped("the lockstep run is stopping")
            call.ready.set()
