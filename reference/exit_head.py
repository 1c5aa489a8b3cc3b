"""The exit head at a depth: the model's own head, optionally after a tuned-lens affine map, and
the names of the gates that decide whether a token may exit there.

The exit head at depth k (the hidden state after layers 0..k-1, ``hidden[k]`` of a forward pass) is
the model's final RMSNorm, lm_head and softcap (:meth:`reference.seams.TargetModel.head`),
optionally after a per-depth affine map fit by ridge regression (:class:`Lens`). Serving with it is
:mod:`reference.early_exit`; calibrating its gates is :mod:`reference.calibration` (both import this
module, neither imports the other's internals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from verispec.reference.errors import CalibrationError
from verispec.reference.seams import TargetModel

F32 = npt.NDArray[np.float32]
GateKind = Literal["margin", "supnorm", "halfrange"]
GATE_KINDS: tuple[GateKind, ...] = ("margin", "supnorm", "halfrange")


@dataclass(frozen=True)
class Lens:
    """Per-depth affine maps h -> h W_k + b_k onto the last hidden state (a linear tuned lens).

    ``depths`` [K]: the candidate depths; ``weight`` [K, D, D] and ``bias`` [K, D] float32.
    Fit by :func:`fit_lens` (ridge regression, closed form).
    """

    depths: tuple[int, ...]
    weight: F32  # [K, D, D]
    bias: F32  # [K, D]

    def apply(self, depth: int, hidden: F32) -> F32:
        """Map hidden states ``[T, D]`` at ``depth`` towards the last layer's -> ``[T, D]``."""
        i = self._index(depth)
        return np.asarray(hidden @ self.weight[i] + self.bias[i], dtype=np.float32)

    def _index(self, depth: int) -> int:
        if depth not in self.depths:
            raise CalibrationError(f"the lens has no map for depth {depth} (it has {list(self.depths)})")
        return self.depths.index(depth)


def fit_lens(
    depths: Sequence[int],
    hidden: F32,  # [K, N, D] hidden states at the depths
    final: F32,  # [N, D] last hidden state (depth L, before the final norm)
    ridge: float = 1e-2,
) -> Lens:
    """Ridge regression of the last hidden state on the hidden state at each depth, closed form.

    Per depth: [W; b] = argmin ||[X 1] [W; b] - Y||^2 + ridge * tr(X^T X)/D * ||W||^2 (the
    penalty scaled to the data, the bias unpenalized), solved in float64 by the normal equations.
    Raises CalibrationError for mismatched shapes or fewer than 2 samples.
    """
    hidden = np.asarray(hidden, dtype=np.float64)
    y = np.asarray(final, dtype=np.float64)
    if hidden.ndim != 3 or hidden.shape[0] != len(depths) or y.shape != hidden.shape[1:]:
        raise CalibrationError(f"lens data shapes {hidden.shape} and {y.shape} do not match {len(depths)} depths")
    n, d = y.shape
    if n < 2:
        raise CalibrationError(f"a lens needs at least 2 samples, got {n}")
    weights, biases = [], []
    for x in hidden:  # [N, D]
        x1 = np.concatenate([x, np.ones((n, 1))], axis=1)  # [N, D+1]
        gram = x1.T @ x1  # [D+1, D+1]
        penalty = ridge * float(np.trace(gram[:d, :d])) / d
        gram[np.arange(d), np.arange(d)] += penalty
        solution = np.linalg.solve(gram, x1.T @ y)  # [D+1, D]
        weights.append(solution[:d])
        biases.append(solution[d])
    return Lens(
        tuple(int(k) for k in depths), np.asarray(weights, dtype=np.float32), np.asarray(biases, dtype=np.float32)
    )


def exit_logits(model: TargetModel, depth: int, hidden: F32, lens: Lens | None = None) -> F32:
    """The exit head's logits ``[T, V]`` float32 for hidden states ``[T, D]`` at ``depth``."""
    x = np.asarray(hidden, dtype=np.float32)
    if lens is not None:
        x = lens.apply(depth, x)
    return model.head(x)
