"""The same-stream probe: does each shard / worker draw its own randomness?

A verifier that ignores the seed it is given (:mod:`spec.law_only`) and seeds its generator once
per process with a fixed value draws the SAME stream in every shard and every worker. Its blocks
are then dependent, and summing them inflates the chi-square: a correct sampler fails (falsely).
The gate makes that visible instead of letting it decide.

Each shard (and each worker process) makes its FIRST verifier call a probe: 64 items of a fixed
case (V = 16, k = 1, p = q uniform, so every item accepts and its bonus token is uniform on 16
ids), with uniforms and hence the call's seed from its own generator
``default_rng([seed, crc32("stream_probe"), index])`` (index: the shard, or the worker's process
id). The probe's outcome is recorded as a digest of the tokens.

- A verifier that uses the seed it is given (or fresh entropy) gives every index its own tokens:
  two probes agree with probability sum_x P(x)^2 per item = 1/16, i.e. 16^-64 = 2^-256 for 64
  items. A false "same stream" is therefore impossible in practice.
- A verifier with one fixed stream per process answers its first call identically in every
  process: identical digests, refused with "shards 1 and 2 drew the same stream: the verifier
  ignores the seed it is given".
- A probe answered with fewer than ``MIN_DISTINCT`` distinct tokens is "degenerate" (a correct
  verifier does that with probability < C(16,3) (3/16)^64 < 2^-145): the verifier is broken in
  another way, which the properties report; degenerate or rejected probes are not compared.

What it cannot see: a verifier whose stream depends on the process in some other way (a seed
from the pid) but still correlates blocks, or one that only misuses the seed after its first call.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from verispec.reference.speculative import BatchVerifier

PROBE_ITEMS = 64
PROBE_VOCAB = 16
MIN_DISTINCT = 4  # fewer distinct tokens in 64 uniform draws on 16 ids: the verifier is broken


def probe_case(
    seed: int, index: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(p [2, V], q [1, V], drafts [64, 1], uniforms [64, 2]) of probe ``index``; p = q uniform."""
    p = np.full((2, PROBE_VOCAB), 1.0 / PROBE_VOCAB)
    q = np.full((1, PROBE_VOCAB), 1.0 / PROBE_VOCAB)
    drafts = (np.arange(PROBE_ITEMS, dtype=np.int64) % PROBE_VOCAB)[:, None]
    uniforms = np.random.default_rng([seed, zlib.crc32(b"stream_probe"), index]).random((PROBE_ITEMS, 2))
    return p, q, drafts, uniforms


def run_probe(batch: BatchVerifier, seed: int, index: int) -> str:
    """The probe's outcome: ``"sha256:<hex>"`` of its tokens, ``"degenerate"`` or ``"rejected: ..."``.

    Errors from the verifier itself are the properties' to judge; a program that cannot start
    (:class:`spec.external.ProgramCannotStart`) propagates.
    """
    from verispec.spec.external import ProgramCannotStart

    p, q, drafts, uniforms = probe_case(seed, index)
    try:
        tokens = np.asarray(batch(p, q, drafts, uniforms).token, dtype=np.int64).reshape(-1)
    except ProgramCannotStart:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken verifier: the properties will say how
        return f"rejected: {type(exc).__name__}"
    if tokens.shape[0] != PROBE_ITEMS or np.unique(tokens).shape[0] < MIN_DISTINCT:
        return "degenerate"
    return "sha256:" + hashlib.sha256(tokens.tobytes()).hexdigest()


def comparable(outcome: str | None) -> bool:
    return outcome is not None and outcome.startswith("sha256:")


def same_stream(probes: Mapping[int, str | None]) -> tuple[int, int] | None:
    """The first two indices whose comparable probes agree (None: every stream is its own)."""
    first_at: dict[str, int] = {}
    for index in sorted(probes):
        outcome = probes[index]
        if not comparable(outcome):
            continue
        assert outcome is not None
        if outcome in first_at:
            return first_at[outcome], index
        first_at[outcome] = index
    return None


def same_stream_message(pair: tuple[int, int], what: str = "shards", law_only: bool = True) -> str:
    a, b = pair
    given = "seed" if law_only else "uniforms"
    return (
        f"{what} {a} and {b} drew the same stream: the verifier ignores the {given} it is given "
        f"(identical answers to their different probes; see spec/law_only.py: use the seed of each call)"
    )


__all__: Sequence[str] = ["PROBE_ITEMS", "comparable", "probe_case", "run_probe", "same_stream", "same_stream_message"]
