"""The depth tests' blocks of generations, decoded ahead by an engine that runs several at once.

A depth test (:mod:`spec.decoder.depth.law`) asks for whole generations block by block: block ``b`` is
ONE ``generate(prompt, params, max_tokens, n_b, seed_b, min_tokens)`` call whose size and seed are
fixed by the test's plan (the run seed and the block's index), never by what earlier blocks held.
So a block's generations are the same whichever process decodes it and whenever it is decoded,
and the test may have the next blocks decoded while it judges this one.

:func:`blocks` yields the blocks of a plan in order. An engine that offers ``submit`` (the same
arguments as ``generate``, returning a future; :class:`spec.decoder.depth.pool.GenerationPool`: N worker
processes) gets up to ``lookahead`` blocks of the plan in flight; any other engine is called block
by block, as before. The test consumes the blocks in the plan's order and stops where it stops,
so its verdict does not depend on the number of workers; blocks decoded past its end are dropped
(at most ``lookahead``). An engine's failure on a block is raised when that block is taken, as
the same call made directly would raise it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

from verispec.reference.errors import ExternalError
from verispec.spec.answers import shown
from verispec.spec.decoder.depth.generation import DepthCase, Generation, as_generation
from verispec.spec.decoder.laws import default as default_law


class Pending(Protocol):
    def result(self) -> Any: ...

    def cancel(self) -> bool: ...


def law_keywords(case: DepthCase) -> dict[str, Any]:
    """``{"law": profile}`` for a non-default target law (an engine of the default law need not take it)."""
    return {} if case.law is None or case.law.name == default_law.NAME else {"law": case.law}


def checked_block(raw: Any, n: int, vocab: int | None = None) -> list[Generation]:
    """The engine's answer to a block of ``n`` as Generations, every field of every generation
    exactly of its type and every id in [0, ``vocab``) (:func:`spec.answers.generation`, the one
    reader of generations whoever decoded them); ExternalError naming the item otherwise."""
    if not isinstance(raw, (list, tuple)):
        raise ExternalError(f"the engine answered {shown(raw)}, asked for a list of {n} generations")
    if len(raw) != n:
        raise ExternalError(f"the engine returned {len(raw)} generations, asked for {n}")
    return [as_generation(r, vocab, f"generation {i} of the block of {n}") for i, r in enumerate(raw)]


def blocks(
    engine: Any, case: DepthCase, plan: Iterable[tuple[int, int]], op: str = "generate"
) -> Generator[list[Generation], None, None]:
    """The blocks ``(size, seed)`` of ``plan``, in order (module docstring). ``op``: the engine's
    method (``generate``, or ``generate_plain`` for two-sample mode)."""
    submit = getattr(engine, "submit", None)
    if not callable(submit):
        call: Any = getattr(engine, op)
        for size, seed in plan:
            yield checked_block(call(*_arguments(case, size, seed), **law_keywords(case)), size, case.vocab)
        return
    lookahead = max(1, int(getattr(engine, "lookahead", 1)))
    upcoming = iter(plan)
    flight: deque[tuple[int, Pending]] = deque()
    try:
        while True:
            while len(flight) < lookahead:
                step = next(upcoming, None)
                if step is None:
                    break
                size, seed = step
                flight.append((size, submit(op, *_arguments(case, size, seed), **law_keywords(case))))
            if not flight:
                return
            size, pending = flight.popleft()
            yield checked_block(pending.result(), size, case.vocab)
    finally:  # the test stopped (or failed): nothing more of the plan is decoded
        for _, pending in flight:
            pending.cancel()


def _arguments(case: DepthCase, size: int, seed: int) -> tuple[Any, ...]:
    return (case.prompt_ids, case.params, case.max_tokens, size, seed, case.min_tokens)


def plan_of(first_seed: int, per_block: int, limit: int | None = None) -> Iterator[tuple[int, int]]:
    """Blocks of ``per_block`` generations seeded ``first_seed``, ``first_seed + 1``, ..; with
    ``limit``, ``limit`` generations in all (the last block smaller)."""
    index, planned = 0, 0
    while limit is None or planned < limit:
        size = per_block if limit is None else min(per_block, limit - planned)
        yield size, first_seed + index
        index += 1
        planned += size


def as_mapping(raw: Any) -> Mapping[str, Any] | list[Any]:
    """A generation as the wire carries it: a list of ids, or ``{"ids", "cycles", "logprobs"}``.
    Each value keeps its type (a NumPy scalar becomes the Python scalar of its kind): a worker
    converts nothing, so a float or string id reaches the checker's reader as what it was."""
    if isinstance(raw, Generation):
        out: dict[str, Any] = {"ids": list(raw.ids)}
        if raw.cycles is not None:
            out["cycles"] = [list(c) for c in raw.cycles]
        if raw.logprobs is not None:
            out["logprobs"] = list(raw.logprobs)
        return out
    if isinstance(raw, Mapping):
        return {key: wire_value(value) for key, value in raw.items()}
    listed: list[Any] = wire_value(raw) if isinstance(raw, (list, tuple, np.ndarray)) else raw
    return listed


def wire_value(value: Any) -> Any:
    """``value`` as JSON carries it, of the same kind: tuples and arrays as lists, NumPy scalars as
    Python's (an np.int64 as an int, an np.float64 as a float, an np.bool_ as a bool)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [wire_value(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
