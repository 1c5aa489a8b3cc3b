"""Synthetic calibration records: random scores, flips and prompt kinds, for the calibration
artifact's tests (no model runs)."""

from __future__ import annotations

import numpy as np

from verispec.reference.calibration import Records


def synthetic_records(
    n_prompts: int = 40, tokens: int = 5, seed: int = 0, kinds: tuple[str, ...] = ("chat",)
) -> Records:
    """Random scores for ``n_prompts`` prompts of ``tokens`` steps each, kinds in turn."""
    rng = np.random.default_rng(seed)
    k, n = 2, n_prompts * tokens
    return Records(
        (3, 5),
        rng.exponential(10, (k, n)).astype(np.float32),
        rng.exponential(5, (k, n)).astype(np.float32),
        rng.exponential(3, (k, n)).astype(np.float32),
        rng.random((k, n)) < 0.3,
        [kinds[p % len(kinds)] for p in range(n_prompts) for _ in range(tokens)],
        np.repeat(np.arange(n_prompts, dtype=np.int64), tokens),
    )
