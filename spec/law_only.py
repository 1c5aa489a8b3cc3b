"""Law-only checking: verifiers that draw their own randomness (``verispec check --law-only``).

Every speculative decoder in use (transformers' assisted generation, vLLM's rejection sampler,
llama.cpp) draws its own random numbers, so it cannot replay the protocol's uniforms. What can
still be checked is its LAW: given rows p, q and drafts, the distribution of its verdicts. Law-only
runs

- ``contract`` (less the uniforms' part, which such a verifier never sees),
- ``range_and_mass`` (every verdict in range, every token with positive mass in its law),
- every statistical test ``stat_*`` (the verifier's draws against exact laws, powered),

and reports the rest as not applicable: vector replay, ``protocol_boundaries``, ``protocol_cells``,
``exact_lossless`` and ``pipeline_processors`` evaluate the verdict AT given uniforms, and
``batch_matches_sequential`` needs a deterministic function of them.

What a pass shows: the verifier's verdict law equals the lossless one up to a total-variation
deviation the tests detect with the reported power ("lossless at power P against deviation D",
on the suite's test rows). What it does not show: bit-exact agreement with the protocol, so the
result is "not portable": another implementation given the same seed gives other tokens.

The interface (Python, ``--verifier MOD:FN --law-only``):

- ``verifier(p, q, drafts, seed=None) -> verdict``: p [k+1, V], q [k, V], drafts list[int] (k);
- ``batch_verifier(p, q, drafts, seed=None) -> BatchVerdict`` (optional): p [k+1, V] or
  [N, k+1, V], q [k, V] or [N, k, V], drafts int64 [N, k]; N verdicts from one call.

THE SEED. Every call gets its own ``seed``, an int in [0, 2^53), and the verifier MUST draw that
call's randomness from it (``numpy.random.default_rng(seed)``, ``torch.Generator().manual_seed(seed)``,
...). The seed is a function of the run seed, the test, the block and the call within the block
(:func:`call_seed` of the uniforms the protocol would have handed in, which come from the block's
own generator, :func:`spec.sequential.block_rng`), so a shard, a worker process or a rerun draws
the same blocks with the same seeds, and the merged counts of any sharding equal the unsharded
ones. A callable may instead take ``rng`` (a ``numpy.random.Generator`` made from the seed). A
callable that takes neither (the three-argument form) still works in one process, but a verifier
that then uses ONE fixed seed per process draws the same stream in every shard and worker: its
blocks are dependent and the chi-square tests would fail a correct sampler. The gate refuses such
runs instead (:mod:`spec.stream_probe`: "shards 1 and 2 drew the same stream").

On the wire (:mod:`spec.external`) it is the op ``sampled_law``: input ``p``, ``q`` (shared),
``drafts`` [N][k] and ``seed`` (an int in [0, 2^53): this request's randomness, same rule); output
``accepted`` [N], ``token`` [N], ``kind`` [N].
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerdict, BatchVerifier, Verdict, Verifier
from verispec.spec.properties import PROPERTY_NAMES, STATISTICAL

DETERMINISTIC_LAW_PROPERTIES: tuple[str, ...] = ("contract", "range_and_mass")
LAW_PROPERTIES: tuple[str, ...] = DETERMINISTIC_LAW_PROPERTIES + tuple(n for n in PROPERTY_NAMES if n in STATISTICAL)
NOT_APPLICABLE_REASON = (
    "not applicable: the verifier draws its own randomness (verdicts at given uniforms cannot be checked)"
)


SEED_BITS = 53  # seeds stay exact in any JSON reader (float64 integers)


class LawVerifier(Protocol):
    """``(p [k+1, V], q [k, V], drafts [k], seed=...) -> verdict`` with the verifier's own randomness."""

    def __call__(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], *args: Any, **kwargs: Any) -> Any: ...


class LawBatchVerifier(Protocol):
    """``(p, q, drafts [N, k], seed=...) -> BatchVerdict``: N verdicts, the verifier's own randomness."""

    def __call__(self, p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, *args: Any, **kwargs: Any) -> Any: ...


def applicable(name: str) -> bool:
    """Whether a property of ``verispec check`` applies to a verifier with its own randomness."""
    return name in LAW_PROPERTIES


def call_seed(uniforms: npt.ArrayLike) -> int:
    """The seed of one call: a 53-bit digest of the uniforms the protocol would have handed in.

    Those uniforms come from the block's own generator (a function of the run seed, the test and
    the block), and each call of a block takes the next ones, so every call of every block gets
    its own seed, the same in any process.
    """
    draws = np.ascontiguousarray(np.asarray(uniforms, dtype=np.float64))
    digest = hashlib.blake2b(repr(draws.shape).encode() + draws.tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)


def request_seed(seed: int, request: int) -> int:
    """The seed of request ``request`` of a call split into several wire requests."""
    if request == 0:
        return seed
    state = np.random.SeedSequence([seed, request]).generate_state(2, np.uint32)
    return (int(state[0]) << 32 | int(state[1])) >> (64 - SEED_BITS)


SeedStyle = Literal["seed", "rng", "none"]


def seed_style(fn: Callable[..., Any]) -> SeedStyle:
    """How a law verifier takes its randomness: a ``seed`` int, an ``rng`` Generator, or not at all."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return "none"
    if "seed" in parameters:
        return "seed"
    if "rng" in parameters:
        return "rng"
    return "none"


def _seeded_call(fn: Callable[..., Any], style: SeedStyle, args: tuple[Any, ...], seed: int) -> Any:
    if style == "seed":
        return fn(*args, seed=seed)
    if style == "rng":
        return fn(*args, rng=np.random.default_rng(seed))
    return fn(*args)


def ignoring_uniforms(verifier: Callable[..., Any]) -> Any:
    """The law verifier in the four-argument form the properties call: the uniforms become the
    call's seed (:func:`call_seed`), handed to the verifier if it takes one."""
    style = seed_style(verifier)

    def call(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], uniforms: Sequence[float]) -> Any:
        return _seeded_call(verifier, style, (p, q, drafts), call_seed(uniforms))

    return call


def batch_ignoring_uniforms(batch: Callable[..., Any]) -> Any:
    """The law batch verifier in the four-argument batch form (uniforms -> the call's seed)."""
    style = seed_style(batch)

    def call(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, uniforms: npt.ArrayLike) -> Any:
        return _seeded_call(batch, style, (p, q, drafts), call_seed(uniforms))

    return call


def with_own_randomness(batch: BatchVerifier, seed: int, *, use_given_seed: bool = True) -> LawBatchVerifier:
    """A uniform-consuming batch verifier turned into one that draws its own uniforms: an adapter
    with a FIXED seed of its own, as in CI, that draws from the seed the gate hands it when it is
    given one (``use_given_seed=False``: it ignores it and keeps one stream per process, the
    mistake the same-stream probe catches).

    This is how a verifier with its own RNG looks to the checker; used to test law-only with the
    reference (must pass) and the mutants of :mod:`spec.mutants` (the law breakers must fail).
    """
    own = np.random.default_rng(seed)

    def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: npt.ArrayLike, seed: int | None = None) -> BatchVerdict:
        rng = np.random.default_rng(seed) if seed is not None and use_given_seed else own
        draft_arr = np.asarray(drafts)
        n, k = draft_arr.shape
        return batch(p, q, draft_arr, rng.random((n, k + 1)))

    return verify


def single_with_own_randomness(verifier: Verifier, seed: int, *, use_given_seed: bool = True) -> LawVerifier:
    """The single form of :func:`with_own_randomness`."""
    own = np.random.default_rng(seed)

    def verify(p: npt.ArrayLike, q: npt.ArrayLike, drafts: Sequence[int], seed: int | None = None) -> Verdict:
        rng = np.random.default_rng(seed) if seed is not None and use_given_seed else own
        return verifier(p, q, list(drafts), rng.random(len(drafts) + 1).tolist())

    return verify
