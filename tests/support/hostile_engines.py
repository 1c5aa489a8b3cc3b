"""Hostile and careless engines for the depth mode of ``check-decoder`` (``--engine MOD:FACTORY``).

Each factory wraps our own correct decode loop (``--ours``) on the model it is given and spoils its
answers in one way, so a run that PASSES one of them is a wrong verdict. They are plain module
factories so ``--workers N`` can build them in worker processes too (verispec/decoder/worker.py).

- ``float_ids`` / ``near_int_ids`` / ``string_ids`` / ``bool_ids``: the first id of every
  generation sent as ``t + 0.5``, ``t - 0.001``, ``"t"`` or ``True``: each would convert to an int;
- ``vocab_id_late`` / ``negative_id_late`` / ``huge_id_late``: each generation of the test (not of the
  pilot) has the id V (one past the vocabulary), -1 or 10**30 (beyond any machine integer) just before
  its last one (a teacher-forced pass would feed it to the model);
- ``float_id_late`` / ``whole_float_id_late`` / ``string_id_late`` / ``bool_id_late``: the same
  place of each generation of the test (not of the pilot) holds ``t + 0.5``, ``5.0``-like
  ``float(t)``, ``"t"`` or ``True`` (the blocks a worker decodes in ``--workers N`` runs);
- ``four_streams``: generation i of every block drawn from stream ``i % 4`` (generations 5.. repeat
  1..4 exactly);
- ``stale_blocks``: every second call answers the previous call's block again (a stale cache);
- ``seed_ignored``: every block drawn from the same seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verispec.reference.sampling import SamplingParams

# check_depth's default run seed and its test's first block seed (the pilot's blocks come before)
TEST_SEEDS_FROM = 20_261_130 + 100


def _ours(path: Path) -> Any:
    from verispec.decoder.api import build_engine
    from verispec.decoder.options import DecoderUnderTest

    return build_engine(DecoderUnderTest(ours=True, model=path))


class Spoiled:
    """Our loop, its generations passed through ``spoil(ids, seed)``."""

    def __init__(self, path: Path, spoil: Callable[[list[Any], int], list[Any]]) -> None:
        self.inner = _ours(path)
        self.spoil = spoil
        self.vocab = int(self.inner.reference.model.config.n_vocab)

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[Any]]:
        return [
            self.spoil(list(g), seed) for g in self.inner.generate(prompt_ids, params, max_tokens, n, seed, min_tokens)
        ]


def _first(value: Callable[[int], Any]) -> Callable[[list[Any], int], list[Any]]:
    return lambda ids, seed: [value(int(ids[0]))] + ids[1:]


def float_ids(path: Path) -> Spoiled:
    return Spoiled(path, _first(lambda t: t + 0.5))


def near_int_ids(path: Path) -> Spoiled:
    return Spoiled(path, _first(lambda t: t + 0.999))


def string_ids(path: Path) -> Spoiled:
    return Spoiled(path, _first(str))


def bool_ids(path: Path) -> Spoiled:
    return Spoiled(path, _first(lambda t: True))


def _late(value: Callable[[int, int], Any]) -> Callable[[Path], Spoiled]:
    """Each generation of the test has ``value(vocab, id)`` in place of an id before its last."""

    def factory(path: Path) -> Spoiled:
        engine = Spoiled(path, lambda ids, seed: ids)
        engine.spoil = lambda ids, seed: _middle(ids, value, engine.vocab) if seed >= TEST_SEEDS_FROM else ids
        return engine

    return factory


def _middle(ids: list[Any], value: Callable[[int, int], Any], vocab: int) -> list[Any]:
    """``value(vocab, id)`` in place of an id before the last (a teacher-forced pass would feed it to the model)."""
    at = max(0, len(ids) - 2)
    return ids[:at] + [value(vocab, int(ids[at]))] + ids[at + 1 :]


vocab_id_late = _late(lambda vocab, t: vocab)
huge_id_late = _late(lambda vocab, t: 10**30)
negative_id_late = _late(lambda vocab, t: -1)
float_id_late = _late(lambda vocab, t: t + 0.5)
whole_float_id_late = _late(lambda vocab, t: float(t))
string_id_late = _late(lambda vocab, t: str(t))
bool_id_late = _late(lambda vocab, t: True)


class FourStreams:
    def __init__(self, path: Path) -> None:
        self.inner = _ours(path)

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        return [self.inner.generate(prompt_ids, params, max_tokens, 1, i % 4, min_tokens)[0] for i in range(n)]


def four_streams(path: Path) -> FourStreams:
    return FourStreams(path)


class StaleBlocks:
    def __init__(self, path: Path) -> None:
        self.inner = _ours(path)
        self.calls = 0
        self.last: list[list[int]] | None = None

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        self.calls += 1
        if self.last is not None and len(self.last) == n and self.calls % 2 == 0:
            return self.last
        self.last = self.inner.generate(prompt_ids, params, max_tokens, n, seed, min_tokens)
        return self.last


def stale_blocks(path: Path) -> StaleBlocks:
    return StaleBlocks(path)


class SeedIgnored:
    def __init__(self, path: Path) -> None:
        self.inner = _ours(path)

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, max_tokens: int, n: int, seed: int, min_tokens: int = 0
    ) -> list[list[int]]:
        out: list[list[int]] = self.inner.generate(prompt_ids, params, max_tokens, n, 7, min_tokens)
        return out


def seed_ignored(path: Path) -> SeedIgnored:
    return SeedIgnored(path)


def shifted_last(path: Path) -> Spoiled:
    """The last id of every generation replaced by the next id: impossible under a one-hot law."""
    engine = Spoiled(path, lambda ids, seed: ids)
    engine.spoil = lambda ids, seed: ids[:-1] + [(int(ids[-1]) + 1) % engine.vocab]
    return engine
