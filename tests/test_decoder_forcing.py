"""The teacher-forced passes computed ahead (spec/decoder/depth/forcing.py).

The rows handed to the scoring are the rows function's own, in order, whatever the threads; a
rows function that does not declare ``concurrency`` is called lazily on the caller's thread; the
depth verdict is the same number for number. Deterministic: no statistics, no tolerance.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from tests.support.depth import EOG, MAX_TOKENS, MIN_TOKENS, PRODUCT_ALPHA, PROMPT, WITH_PROCESSORS, Loop, model  # noqa: F401 - model: the tiny model fixture
from verispec.reference.model import Model
from verispec.spec.decoder.depth.forcing import ConcurrentRows, rows_in_order
from verispec.spec.decoder.depth.law import DepthCase, check_depth, reference_rows, verdict_json

PROMPT_IDS = (1, 2)


class Recorder:
    """Rows ``[len(ids), 3]`` holding each id: says which thread ran each call, and how many ran at once."""

    def __init__(self, delay: float = 0.0, fail_on: int | None = None) -> None:
        self.calls: list[tuple[tuple[int, ...], str]] = []
        self.delay, self.fail_on = delay, fail_on
        self.lock = threading.Lock()
        self.running = self.most_running = 0

    def __call__(self, sequence: tuple[int, ...], prompt_length: int) -> Any:
        with self.lock:
            self.calls.append((tuple(sequence), threading.current_thread().name))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            time.sleep(self.delay)
            ids = sequence[prompt_length:]
            if self.fail_on is not None and self.fail_on in ids:
                raise ValueError(f"pass over {self.fail_on}")
            return np.array([[t, t, t] for t in ids], dtype=np.float32)
        finally:
            with self.lock:
                self.running -= 1


GENERATIONS = [[5, 6], [], [7], [8, 9, 10], [11], [12, 13]]


def forced(ids: Any) -> bool:
    return bool(ids)


def test_without_concurrency_the_rows_are_called_lazily_on_the_callers_thread() -> None:
    rows = Recorder()
    handed = rows_in_order(rows, PROMPT_IDS, GENERATIONS, forced)
    for ids, got in zip(GENERATIONS, handed):
        assert got is rows and not rows.calls  # nothing run ahead: the rows are the caller's to call
    assert rows.calls == []


@pytest.mark.parametrize("threads", [2, 3])
def test_the_rows_come_in_order_and_are_the_rows_functions_own(threads: int) -> None:
    rows = Recorder(delay=0.01)
    concurrent = ConcurrentRows(rows, threads)
    for ids, got in zip(GENERATIONS, rows_in_order(concurrent, PROMPT_IDS, GENERATIONS, forced)):
        if not ids:
            assert got is concurrent  # not forced: score returns before it calls the rows
            continue
        out = got(PROMPT_IDS + tuple(ids), len(PROMPT_IDS))
        assert np.array_equal(out, np.array([[t] * 3 for t in ids], dtype=np.float32))
        other = got(PROMPT_IDS + (4,), len(PROMPT_IDS))  # another prefix (a near-tie re-check): rows_of itself
        assert np.array_equal(other, np.array([[4, 4, 4]], dtype=np.float32))
    passes = [seq for seq, name in rows.calls if name.startswith("verispec-forcing")]
    assert passes == [PROMPT_IDS + tuple(ids) for ids in GENERATIONS if ids]  # each forced once, the malformed never
    assert 1 < rows.most_running <= threads + 1  # ahead on threads, at most `threads` (+ the caller's re-check)


def test_at_most_concurrency_passes_are_ahead_of_the_scoring() -> None:
    rows = Recorder()
    handed = rows_in_order(ConcurrentRows(rows, 2), PROMPT_IDS, GENERATIONS, forced)
    first = next(handed)
    first(PROMPT_IDS + (5, 6), len(PROMPT_IDS))
    time.sleep(0.05)  # let the threads finish what they were given
    assert len(rows.calls) <= 1 + 2  # the one read and two ahead
    handed.close()


def test_a_failing_pass_raises_at_its_own_generation() -> None:
    rows = Recorder(fail_on=9)
    handed = list(zip(GENERATIONS, rows_in_order(ConcurrentRows(rows, 2), PROMPT_IDS, GENERATIONS, forced)))
    for ids, got in handed:
        if not ids:
            continue
        if 9 in ids:
            with pytest.raises(ValueError, match="pass over 9"):
                got(PROMPT_IDS + tuple(ids), len(PROMPT_IDS))
        else:
            got(PROMPT_IDS + tuple(ids), len(PROMPT_IDS))


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConcurrentRows(Recorder(), 0)


def test_the_depth_verdict_is_the_same_with_the_passes_ahead(model: Model) -> None:
    """Same generations, same rng, same rows: every number of the verdict is equal."""
    case = DepthCase(PROMPT, WITH_PROCESSORS, MAX_TOKENS, frozenset({EOG}), MIN_TOKENS)
    serial = check_depth(
        Loop(model), reference_rows(model), case, alpha=PRODUCT_ALPHA, max_generations=40, pilot=8, block=20
    )
    ahead = check_depth(
        Loop(model),
        ConcurrentRows(reference_rows(model), 2),
        case,
        alpha=PRODUCT_ALPHA,
        max_generations=40,
        pilot=8,
        block=20,
    )
    assert verdict_json(serial) == verdict_json(ahead)
    assert serial.state == "inconclusive" and serial.power > 0


def test_the_wrappers_keep_the_rows_batch_shape_noise() -> None:
    """The near-tie test reads ``batch_shape_noise`` off the rows it is handed (spec/decoder/depth/law.py)."""
    rows = Recorder()
    rows.batch_shape_noise = 3e-5  # type: ignore[attr-defined]
    concurrent = ConcurrentRows(rows, 2)
    assert concurrent.batch_shape_noise == 3e-5  # type: ignore[attr-defined]
    handed = list(rows_in_order(concurrent, PROMPT_IDS, GENERATIONS, forced))
    assert all(getattr(got, "batch_shape_noise", None) == 3e-5 for got in handed)
    assert getattr(ConcurrentRows(Recorder(), 2), "batch_shape_noise", None) is None  # none where the rows have none
