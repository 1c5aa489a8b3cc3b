"""A batched speculative-sampling verifier with its OWN randomness, gated with ``--law-only``.

This is the shape of most production samplers (vLLM's rejection sampler, transformers' assisted
generation): given the target rows p, the draft rows q and the drafted ids, it draws its own
random numbers, so ``verispec check`` cannot replay the protocol's uniforms and checks its LAW
instead (spec/law_only.py). It imports only NumPy. Gate it with

    verispec check --verifier law_only_verifier:verify --batch-verifier law_only_verifier:verify_batch \\
        --law-only --budget 600

or from Python / pytest: ``verispec.check(verifier=verify, batch_verifier=verify_batch,
law_only=True)``. Give the batch form: the statistical tests draw hundreds of thousands of
verdicts, one call per block instead of one per verdict.

The rule (lossless speculative sampling): accept draft i while ``u_i * q_i[x_i] < p_i[x_i]``;
at the first rejection emit a token from the residual ``max(p_i - q_i, 0)`` (``p_i`` itself if
that is all zero), after k acceptances a bonus token from ``p_k``. Rows shared by a batch give
k + 1 laws, each drawn from once per batch (``Generator.choice``), so V = 262,144 stays cheap.

Randomness: the gate hands every call a ``seed`` (derived from the run seed, the test, the block
and the call); a verifier gated with ``--law-only`` must draw from it, so that every ``--shard I/S``
and ``--workers`` process draws its own stream (one fixed seed per process would give every shard
the same stream; the merge refuses that). Called without one (in production), it draws from a
generator keyed by a digest of its inputs and a call counter.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

SEED = 20_260_101  # the stream's key, mixed with each call's inputs
TOLERANCE = 1e-6  # probability rows sum to 1 within this (the protocol's tolerance)
_calls = itertools.count()  # makes repeated identical calls draw fresh numbers

Rows = npt.NDArray[np.float64]


class Verdict(NamedTuple):
    accepted: int  # drafts accepted, 0..k
    token: int  # the emitted token
    kind: str  # "repair" (after a rejection) or "bonus" (all k accepted)


class BatchVerdict(NamedTuple):
    accepted: npt.NDArray[np.int64]  # [N]
    token: npt.NDArray[np.int64]  # [N]
    is_bonus: npt.NDArray[np.bool_]  # [N]


def _generator(*arrays: npt.NDArray[np.generic]) -> np.random.Generator:
    """A generator keyed by (SEED, the inputs' bytes, a call counter)."""
    digest = hashlib.blake2b(digest_size=16)
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    key = int.from_bytes(digest.digest(), "little")
    return np.random.default_rng([SEED, key, next(_calls)])


def _check_rows(rows: Rows, name: str) -> None:
    if not np.all(np.isfinite(rows)) or np.any(rows < 0):
        raise ValueError(f"{name} has an entry that is not a finite number >= 0")
    if np.any(np.abs(rows.sum(axis=-1) - 1.0) > TOLERANCE):
        raise ValueError(f"a row of {name} does not sum to 1 within {TOLERANCE}")


def _checked(p_in: object, q_in: object, drafts_in: object) -> tuple[Rows, Rows, npt.NDArray[np.int64]]:
    """(p, q, drafts [N, k]) with p [k+1, V] and q [k, V] shared or [N, k+1, V], [N, k, V]; or ValueError."""
    drafts = np.asarray(drafts_in)
    if drafts.ndim != 2 or drafts.shape[1] < 1 or not np.issubdtype(drafts.dtype, np.integer):
        raise ValueError("drafts must be integer ids [N, k] with k >= 1")
    n, k = drafts.shape
    p, q = np.asarray(p_in, dtype=np.float64), np.asarray(q_in, dtype=np.float64)
    shared = p.ndim == 2 and q.ndim == 2
    lead = () if shared else (n,)
    if p.shape[:-1] != (*lead, k + 1) or q.shape != (*lead, k, p.shape[-1]):
        raise ValueError(f"need p [k+1, V], q [k, V] (or [N, ...]) for k = {k}; got p {p.shape}, q {q.shape}")
    _check_rows(p, "p")
    _check_rows(q, "q")
    vocab = p.shape[-1]
    if np.any(drafts < 0) or np.any(drafts >= vocab):
        raise ValueError(f"a draft id is outside [0, {vocab})")
    q_x = q[np.arange(k), drafts] if shared else np.take_along_axis(q, drafts[:, :, None], axis=2)[:, :, 0]
    if np.any(q_x <= 0):
        raise ValueError("a draft has q = 0: the draft could not have drawn it")
    return p, q, drafts.astype(np.int64)


def stop_laws(p: Rows, q: Rows) -> Rows:
    """[..., k+1, V]: the law of the emitted token when verification stops at position i (the
    residual max(p_i - q_i, 0), or p_i where that is all zero; the bonus law p_k at i = k)."""
    residual = np.maximum(p[..., :-1, :] - q, 0.0)  # [..., k, V]
    residual = np.where(residual.any(axis=-1, keepdims=True), residual, p[..., :-1, :])
    return np.concatenate([residual, p[..., -1:, :]], axis=-2)


def _accepted(rng: np.random.Generator, p_x: Rows, q_x: Rows) -> npt.NDArray[np.int64]:
    """[N]: drafts accepted (the first rejection's position, or k), from p, q at the drafts [N, k]."""
    rejected = rng.random(q_x.shape) * q_x >= p_x  # [N, k]
    k = q_x.shape[1]
    return np.where(rejected.any(axis=1), rejected.argmax(axis=1), k).astype(np.int64)


def _verify_shared(rng: np.random.Generator, p: Rows, q: Rows, drafts: npt.NDArray[np.int64]) -> BatchVerdict:
    """Rows p [k+1, V], q [k, V] shared by every item: k + 1 laws, each drawn from once."""
    n, k = drafts.shape
    positions = np.arange(k)
    accepted = _accepted(rng, p[positions, drafts], q[positions, drafts])
    tokens = np.empty(n, dtype=np.int64)
    for stop, law in enumerate(stop_laws(p, q)):
        where = accepted == stop
        tokens[where] = rng.choice(law.shape[0], size=int(where.sum()), p=law / law.sum())
    return BatchVerdict(accepted, tokens, accepted == k)


def _verify_per_item(rng: np.random.Generator, p: Rows, q: Rows, drafts: npt.NDArray[np.int64]) -> BatchVerdict:
    """Rows p [N, k+1, V], q [N, k, V] of their own per item: one inverse-CDF draw per item."""
    n, k = drafts.shape
    items = np.arange(n)[:, None]
    positions = np.arange(k)[None, :]
    accepted = _accepted(rng, p[items, positions, drafts], q[items, positions, drafts])
    law = stop_laws(p, q)[np.arange(n), accepted]  # [N, V]
    running = np.cumsum(law, axis=1)  # [N, V]
    tokens = (running <= (rng.random(n) * running[:, -1])[:, None]).sum(axis=1)
    last_positive = law.shape[1] - 1 - (law[:, ::-1] > 0).argmax(axis=1)  # where u * total rounds up
    return BatchVerdict(accepted, np.minimum(tokens, last_positive).astype(np.int64), accepted == k)


def verify_batch(p_in: object, q_in: object, drafts_in: object, seed: int | None = None) -> BatchVerdict:
    """N verifications: p [k+1, V] or [N, k+1, V], q [k, V] or [N, k, V], drafts [N, k]; ``seed``:
    the gate's seed for this call (draw from it when given)."""
    p, q, drafts = _checked(p_in, q_in, drafts_in)
    rng = np.random.default_rng(seed) if seed is not None else _generator(p, q, drafts)
    return (_verify_shared if p.ndim == 2 else _verify_per_item)(rng, p, q, drafts)


def verify(p: object, q: object, drafts: object, seed: int | None = None) -> Verdict:
    """One verification: p [k+1, V], q [k, V], drafts [k]; ``seed`` as in :func:`verify_batch`."""
    one = verify_batch(p, q, np.asarray(drafts)[None, :], seed)
    accepted = int(one.accepted[0])
    return Verdict(accepted, int(one.token[0]), "bonus" if bool(one.is_bonus[0]) else "repair")
