"""Batched decoding: ``EngineDecoder.generate`` runs its generations in lockstep (engine/lockstep.py).

- The SAME tokens and cycles as one generation at a time, for the same (seed, index): compared as
  equal lists on a block-quantized tiny llama (every matrix on the int8 kernel, n-gram drafts
  accepted and rejected, generations of different lengths, so the batch shrinks and refills) at
  several lockstep widths, and, marked ``model``, on SmolLM2 int8.
- Each step really is one batched pass: the number of ``forward_many`` calls and their sizes.
- Errors propagate and nothing hangs: a loop that raises in its own code, a model error inside a
  batched pass (rerun span by span, delivered to its own loop), and an interrupt of the scheduler.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.synthetic import write_synthetic
from verispec.decoder.ours import EngineDecoder
from verispec.engine.lockstep import LockstepModel, run_lockstep
from verispec.reference.errors import ModelError
from verispec.reference.sampling import SamplingParams

PARAMS = SamplingParams(temperature=1.0, top_k=3)  # drafts accepted and rejected on the tiny model


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lockstep") / "tinyllama-q.gguf"
    write_synthetic(path, "tinyllama", quant_types=("Q8_0", "Q4_0"))
    return path


def decoders(path: Path) -> tuple[EngineDecoder, EngineDecoder]:
    """The same engine (one load) decoding one at a time and in lockstep."""
    batched = EngineDecoder(path, "int8")
    assert getattr(batched.model, "batches_spans", False) and batched.batch > 1
    alone = copy.copy(batched)
    alone.batch = 1
    return alone, batched


def prompt(decoder: EngineDecoder, text: str) -> tuple[int, ...]:
    tokenizer = decoder.tokenizer
    return tuple(tokenizer.encode(text, add_bos=tokenizer.add_bos, parse_special=True))


class CountingModel:
    """A model wrapper counting the batched passes and their sizes."""

    def __init__(self, model: Any) -> None:
        self.model, self.sizes = model, list[int]()
        self.config = model.config

    def new_cache(self, capacity: int | None = None) -> Any:
        return self.model.new_cache(capacity)

    def forward(self, tokens: Any, cache: Any, **options: Any) -> Any:
        return self.model.forward(tokens, cache, **options)

    def forward_many(self, spans: Any, **options: Any) -> Any:
        self.sizes.append(len(spans))
        return self.model.forward_many(spans, **options)


def test_lockstep_generations_are_the_one_at_a_time_generations(tiny_path: Path) -> None:
    alone, batched = decoders(tiny_path)
    ids = prompt(alone, "the model the model")
    expected = alone.generate(ids, PARAMS, 30, 9, seed=3)
    assert len({len(g["cycles"]) for g in expected}) > 1  # they end at different steps: the batch shrinks, refills
    drafts = [verdict for g in expected for verdict in g["cycles"] if verdict[0]]
    assert any(accepted for _, accepted in drafts) and any(accepted < n for n, accepted in drafts)
    for width in (2, 4, 64):
        batched.batch = width
        assert batched.generate(ids, PARAMS, 30, 9, seed=3) == expected


def test_each_step_is_one_batched_pass(tiny_path: Path) -> None:
    alone, batched = decoders(tiny_path)
    ids = prompt(alone, "the model the model")
    counting = CountingModel(alone.model)
    batched.model, batched.batch = counting, 4  # type: ignore[assignment]
    counting.batches_spans = True  # type: ignore[attr-defined]
    out = batched.generate(ids, PARAMS, 12, 6, seed=1)
    assert out == alone.generate(ids, PARAMS, 12, 6, seed=1)
    cycles = sum(len(g["cycles"]) for g in out)
    # every cycle's pass is in one batched call of at most 4 spans, apart from steps with one live generation
    assert max(counting.sizes) == 4 and sum(counting.sizes) <= cycles < sum(counting.sizes) + len(out) * 12
    assert len(counting.sizes) < cycles / 2


class FailingModel(CountingModel):
    """Raises ModelError inside the batched pass (and alone) for spans on the cache ``bad``."""

    bad: Any = None

    def forward(self, tokens: Any, cache: Any, **options: Any) -> Any:
        if cache is self.bad:
            raise ModelError("injected model failure")
        return self.model.forward(tokens, cache, **options)

    def forward_many(self, spans: Any, **options: Any) -> Any:
        if any(cache is self.bad for _, cache in spans):
            raise ModelError("injected model failure")
        return super().forward_many(spans, **options)


def test_a_failing_generation_raises_and_nothing_hangs(tiny_path: Path) -> None:
    alone, _ = decoders(tiny_path)
    model = FailingModel(alone.model)
    steps = [0, 0, 0]
    before = set(threading.enumerate())  # the worker's own threads (xdist's, earlier tests') are not ours

    def loop(index: int, fail_at: int | None) -> Any:
        def run(proxy: LockstepModel) -> int:
            cache = proxy.new_cache(32)
            for step in range(6):
                if step == fail_at and index == 1:
                    raise RuntimeError("loop 1 broke in its own code")
                if step == fail_at and index == 2:
                    model.bad = cache
                proxy.forward([1 + step], cache)
                steps[index] += 1
            return cache.length  # type: ignore[no-any-return]

        return run

    assert run_lockstep(model, [loop(i, None) for i in range(3)], 3) == [6, 6, 6]
    with pytest.raises(RuntimeError, match="loop 1 broke"):
        run_lockstep(model, [loop(0, None), loop(1, 2)], 3)
    steps[:] = [0, 0, 0]
    with pytest.raises(ModelError, match="injected"):  # from inside a batched pass: rerun alone, delivered to loop 2
        run_lockstep(model, [loop(0, None), loop(1, None), loop(2, 3)], 3)
    assert steps[2] == 3 and steps[0] <= 4 and steps[1] <= 4  # the others stopped at their next call
    started = [thread for thread in threading.enumerate() if thread not in before]
    for thread in started:
        thread.join(timeout=5)  # a loop's thread may still be returning from its last call
    assert not [thread for thread in started if thread.is_alive()]  # none of the loops hangs


def test_an_interrupted_scheduler_releases_every_loop(tiny_path: Path) -> None:
    alone, _ = decoders(tiny_path)

    class Interrupting(CountingModel):
        def forward_many(self, spans: Any, **options: Any) -> Any:
            raise KeyboardInterrupt

    before = set(threading.enumerate())  # the worker's own threads (xdist's, earlier tests') are not ours

    def run(proxy: LockstepModel) -> None:
        proxy.forward([1], proxy.new_cache(4))

    with pytest.raises(KeyboardInterrupt):
        run_lockstep(Interrupting(alone.model), [run, run, run], 3)
    started = [thread for thread in threading.enumerate() if thread not in before]
    for thread in started:
        thread.join(timeout=5)  # released loops return from their waits
    assert not [thread for thread in started if thread.is_alive()]  # every loop was released


@pytest.mark.model
def test_smollm2_int8_lockstep_generations_are_the_one_at_a_time_generations(smollm2_path: Path) -> None:
    alone, batched = decoders(smollm2_path)
    ids = prompt(alone, "The cat sat on the mat. The cat sat on the")
    params = SamplingParams(temperature=1.0, top_k=4, repeat_penalty=1.5)
    expected = alone.generate(ids, params, 10, 4, seed=7)
    assert batched.generate(ids, params, 10, 4, seed=7) == expected
