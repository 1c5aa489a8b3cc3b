"""Trajectories and records: the full model's greedy decode of each prompt, and the exit heads'
scores (residuals, margins, flips) at every candidate depth of every step; the lens fit on them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from verispec.reference.certificate import ResidualKind, residual_rows, top2_rows
from verispec.reference.errors import CalibrationError
from verispec.reference.exit_head import Lens, exit_logits, fit_lens
from verispec.reference.seams import TargetModel as Model

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Trajectory:
    """One prompt's greedy decode by the full model: per step, the full logits and hidden states."""

    kind: str
    full_logits: F32  # [T, V]
    hidden: F32  # [K, T, D] at the candidate depths
    final: F32  # [T, D] at depth L (before the final norm)
    prompt_hidden: F32 | None = None  # [K, P-1, D] prompt positions but the last (lens data only)
    prompt_final: F32 | None = None  # [P-1, D]


def greedy_trajectory(
    model: Model,
    prompt_ids: Sequence[int],
    n_steps: int,
    depths: Sequence[int],
    *,
    kind: str = "",
    stop_ids: frozenset[int] = frozenset(),
    on_step: Callable[[], None] | None = None,
) -> Trajectory:
    """Decode ``n_steps`` greedy steps with every layer (stopping after an id in ``stop_ids``).

    Step i's record is the prediction of token i from the prompt and tokens < i.
    """
    if n_steps < 1:
        raise CalibrationError(f"a trajectory needs at least 1 step, got {n_steps}")
    cache = model.new_cache(len(prompt_ids) + n_steps)
    result = model.forward(list(prompt_ids), cache, return_hidden=True)
    assert result.hidden is not None
    prompt_rows = np.asarray(result.hidden[list(depths) + [model.config.n_layer], :-1], dtype=np.float32)
    logits, hidden = [result.logits[-1]], [_at(result.hidden, depths, -1)]
    for _ in range(n_steps - 1):
        if on_step is not None:
            on_step()
        token = int(np.argmax(logits[-1]))
        if token in stop_ids:
            break
        result = model.forward([token], cache, return_hidden=True)
        logits.append(result.logits[-1])
        hidden.append(_at(result.hidden, depths, -1))
    if on_step is not None:
        on_step()
    stacked = np.stack(hidden, axis=1)  # [K+1, T, D]
    return Trajectory(kind, np.stack(logits), stacked[:-1], stacked[-1], prompt_rows[:-1], prompt_rows[-1])


def _at(hidden: F32 | None, depths: Sequence[int], row: int) -> F32:
    """Hidden states ``[K+1, D]`` at the depths and at depth L, of one row of a forward."""
    assert hidden is not None
    return np.asarray(hidden[list(depths) + [hidden.shape[0] - 1], row], dtype=np.float32)


@dataclass
class Records:
    """Per candidate depth and calibration step: residual scores, margins, flips (float32)."""

    depths: tuple[int, ...]
    supnorm: F32  # [K, n]
    halfrange: F32  # [K, n]
    margins: F32  # [K, n]
    flips: npt.NDArray[np.bool_]  # [K, n]
    kinds: list[str] = field(default_factory=list)  # [n] prompt kind of each step
    prompt: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [n] prompt index

    @property
    def n(self) -> int:
        return int(self.margins.shape[1])

    @property
    def n_prompts(self) -> int:
        return int(np.unique(self.prompt).size)

    def select(self, kind: str) -> "Records":
        """The steps of the prompts of one kind (prompt indices renumbered 0..m-1 in order)."""
        mask = np.asarray([k == kind for k in self.kinds], dtype=np.bool_)
        _, prompt = np.unique(self.prompt[mask], return_inverse=True)
        return Records(
            self.depths,
            self.supnorm[:, mask],
            self.halfrange[:, mask],
            self.margins[:, mask],
            self.flips[:, mask],
            [kind] * int(mask.sum()),
            np.asarray(prompt, dtype=np.int64).reshape(-1),
        )

    def scores(self, kind: ResidualKind) -> F32:
        return self.supnorm if kind == "supnorm" else self.halfrange


def score(model: Model, trajectories: Sequence[Trajectory], depths: Sequence[int], lens: Lens | None) -> Records:
    """Exit-head scores of every step of ``trajectories`` at ``depths`` (see the package docstring, :mod:`reference.calibration`)."""
    k = len(depths)
    parts: dict[str, list[F32]] = {"supnorm": [], "halfrange": [], "margins": []}
    flips: list[npt.NDArray[np.bool_]] = []
    kinds: list[str] = []
    prompt: list[int] = []
    for number, traj in enumerate(trajectories):
        full_ids = np.asarray(np.argmax(traj.full_logits, axis=-1), dtype=np.int64)  # [T]
        rows: dict[str, list[F32]] = {"supnorm": [], "halfrange": [], "margins": []}
        flip_rows = []
        for i, depth in enumerate(depths):
            d = exit_logits(model, depth, traj.hidden[i], lens)  # [T, V]
            ids, margins = top2_rows(d)
            rows["supnorm"].append(np.asarray(residual_rows("supnorm", d, traj.full_logits), dtype=np.float32))
            rows["halfrange"].append(np.asarray(residual_rows("halfrange", d, traj.full_logits), dtype=np.float32))
            rows["margins"].append(np.asarray(margins, dtype=np.float32))
            flip_rows.append(ids != full_ids)
        for name in parts:
            parts[name].append(np.stack(rows[name]))  # [K, T]
        flips.append(np.stack(flip_rows))
        kinds.extend([traj.kind] * traj.full_logits.shape[0])
        prompt.extend([number] * traj.full_logits.shape[0])
    if not flips:
        raise CalibrationError("no calibration steps: the calibration split has no prompts")
    return Records(
        tuple(depths),
        np.concatenate(parts["supnorm"], axis=1).reshape(k, -1),
        np.concatenate(parts["halfrange"], axis=1).reshape(k, -1),
        np.concatenate(parts["margins"], axis=1).reshape(k, -1),
        np.concatenate(flips, axis=1).reshape(k, -1),
        kinds,
        np.asarray(prompt, dtype=np.int64),
    )


def lens_from(trajectories: Sequence[Trajectory], depths: Sequence[int], ridge: float) -> Lens:
    """Fit the tuned lens on the hidden states of ``trajectories`` (the lens split only): every
    decode step and every prompt position."""
    hidden = np.concatenate(
        [t.hidden for t in trajectories] + [t.prompt_hidden for t in trajectories if t.prompt_hidden is not None],
        axis=1,
    )  # [K, N, D]
    final = np.concatenate(
        [t.final for t in trajectories] + [t.prompt_final for t in trajectories if t.prompt_final is not None],
        axis=0,
    )  # [N, D]
    return fit_lens(depths, hidden, final, ridge)
