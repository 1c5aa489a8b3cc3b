"""The depth test's teacher-forced passes, computed ahead on threads where the rows allow it.

The depth test (spec/decoder/depth/law.py) scores a block's generations one after another, and each
score starts with one teacher-forced pass (``rows_of(prompt + ids, len(prompt))``). With the
generations decoded by worker processes, that serial pass is the checker's own bottleneck: the
workers wait for it (they run at most a block ahead). A rows function that says it may be
called from several threads at once (``concurrency`` > 1: the fast engine's own k-row pass,
whose onnxruntime runs release the GIL and whose calls share no state but the weights) gets the
passes of the next generations computed on that many threads while the current one is scored.

Requirements (tests/test_decoder_forcing.py):

- The rows handed to ``score`` are the rows ``rows_of`` returns for that generation, in order;
  the statistics, the rng and the verdict do not change (only when the passes run does).
- A rows function without ``concurrency`` (or with 1) is called exactly as before: lazily, one
  generation at a time, on the caller's thread (a peer's logits op is one transport).
- Any other call of the rows (a near-tie's re-check of another prefix) goes to ``rows_of``.
- An error of a pass is raised where the serial call would have raised it, at that
  generation's score; a malformed generation (score returns before any pass) is never forced.
- At most ``concurrency`` passes are in flight or done-but-unread (each is a ``[T, V]`` array).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verispec.spec.decoder.types import ForcedRows, Prefix


def _keep_noise(wrapper: object, rows_of: ForcedRows) -> None:
    """The near-tie test reads ``batch_shape_noise`` off the rows it is given: a wrapper keeps it."""
    noise = getattr(rows_of, "batch_shape_noise", None)
    if noise is not None:
        setattr(wrapper, "batch_shape_noise", noise)  # noqa: B010 (wrapper is any rows object)


class ConcurrentRows:
    """``rows_of`` declared safe to call from ``concurrency`` threads at once."""

    def __init__(self, rows_of: ForcedRows, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency {concurrency} must be at least 1")
        self.rows_of = rows_of
        self.concurrency = concurrency
        _keep_noise(self, rows_of)

    def __call__(self, sequence: Prefix, prompt_length: int) -> Any:
        return self.rows_of(sequence, prompt_length)


class _Ahead:
    """The rows of one generation: its own pass from the future, any other prefix from ``rows_of``."""

    def __init__(self, rows_of: ForcedRows, key: Prefix, future: Future[Any]) -> None:
        self.rows_of, self.key, self.future = rows_of, key, future
        _keep_noise(self, rows_of)

    def __call__(self, sequence: Prefix, prompt_length: int) -> Any:
        if tuple(sequence) == self.key:
            return self.future.result()
        return self.rows_of(sequence, prompt_length)


def rows_in_order(
    rows_of: ForcedRows, prompt: Prefix, generations: Sequence[Sequence[int]], forced: Callable[[Sequence[int]], bool]
) -> Generator[ForcedRows, None, None]:
    """One rows function per generation, in order (module docstring). ``forced(ids)``: whether
    ``score`` will run that generation's pass (False for a malformed one)."""
    threads = int(getattr(rows_of, "concurrency", 1))
    if threads <= 1:
        for _ in generations:
            yield rows_of
        return
    length = len(prompt)
    keys = [prompt + tuple(ids) for ids in generations]
    pending: deque[tuple[int, Future[Any]]] = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="verispec-forcing") as executor:
        upcoming = iter([i for i, ids in enumerate(generations) if forced(ids)])

        def refill() -> None:
            while len(pending) < threads:
                index = next(upcoming, None)
                if index is None:
                    return
                pending.append((index, executor.submit(rows_of, keys[index], length)))

        try:
            for index in range(len(generations)):
                refill()
                if pending and pending[0][0] == index:
                    _, future = pending.popleft()
                    yield _Ahead(rows_of, keys[index], future)
                else:
                    yield rows_of  # not forced: score returns before it calls the rows
        finally:
            for _, future in pending:
                future.cancel()
