"""Random pieces the generators share: probability rows, draft draws, one-hot rows.

A generator returns (input, tags) items; the expected output is the reference's answer
(:mod:`spec.vectors.answers`), filled in by :mod:`spec.vectors.cases`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from verispec.spec.vectors.wire import Json

Item = tuple[Json, list[str]]

U_MAX = float(np.nextafter(1.0, 0.0))  # 1 - 2^-53, the largest uniform in [0, 1)


def normalize(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def random_row(rng: np.random.Generator, vocab: int, zeros: float = 0.0) -> npt.NDArray[np.float64]:
    """A random probability row [V] (float64, sums to 1 within a few ulps), with random zeros."""
    weights = rng.gamma(0.8, size=vocab)
    if zeros > 0:
        weights[rng.random(vocab) < zeros] = 0.0
    if not weights.any():
        weights[int(rng.integers(vocab))] = 1.0
    return normalize(weights)


def draw(rng: np.random.Generator, row: npt.NDArray[np.float64]) -> int:
    """A draft token from its law (never an id of zero mass)."""
    ids = np.flatnonzero(row > 0)
    return int(rng.choice(ids, p=row[ids] / row[ids].sum()))


def one_hot(vocab: int, token: int) -> npt.NDArray[np.float64]:
    row = np.zeros(vocab, dtype=np.float64)
    row[token] = 1.0
    return row
