"""Real target/draft row pairs from the two real models, stored small in ``spec/data``.

Provenance. ``python -m lab.build_real_rows`` (needs the models: ``verispec models fetch``)
runs the reference forward pass of each model on a fixed prompt, teacher-forced, and keeps for
the last ``positions`` positions the full model's logits (the TARGET) and the logits of the
model's own exit head after ``n_layer // 2`` layers (final norm + lm_head on the mid hidden state:
the layerskip-style same-vocabulary DRAFT). Those are real LLM rows: V = 49,152 (SmolLM2-135M,
Q4_1) and V = 262,144 (Gemma-3-270M, Q4_K_M), heavy-tailed, with the draft near the target on
some positions and far on others. The repository stores them in ``spec/data/real_rows.npz``, so
the gate tests without the models.

Encoding (per row of V logits, float32 in the model):
  ``head_ids`` [H] uint32, ``head_logits`` [H] float16: the H = 512 largest logits, near-exact;
  ``tail_code`` [V] uint8: every logit as round((max - logit) * 2), clipped to 255 (a half-nat
  grid, floored at max - 127.5 nats: ids below e^-127 of the top carry no mass at any temperature
  >= 0.3 in float64 worth testing for).
Decoding: logit = max - code / 2, then the head ids get their float16 values. The decoded row is
what the gate tests (a real row up to a half-nat rounding in the tail); it is not claimed to be
the model's output bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

DATA = Path(__file__).with_name("data") / "real_rows.npz"
HEAD = 512
TAIL_STEP = 2.0  # codes per nat

# (registry name, prompt, positions kept): k = positions - 1 drafts per pair
SOURCES: tuple[tuple[str, str, int], ...] = (
    ("smollm2-135m", "The capital of France is Paris. The capital of Germany is", 5),
    ("smollm2-135m", "def fibonacci(n):\n    if n < 2:\n        return n\n    return", 5),
    ("gemma3-270m", "Once upon a time, in a small village by the sea, there lived", 3),
)


@dataclass(frozen=True)
class RealPair:
    """One stored pair: target logits [k+1, V] and exit-head draft logits [k, V] (float64)."""

    name: str
    target_logits: npt.NDArray[np.float64]
    draft_logits: npt.NDArray[np.float64]


def encode_rows(logits: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.generic]]:
    """[R, V] float32 logits -> the compact arrays (see the module docstring)."""
    rows = np.asarray(logits, dtype=np.float64)
    top = np.max(rows, axis=1, keepdims=True)  # [R, 1]
    code = np.clip(np.rint((top - rows) * TAIL_STEP), 0, 255).astype(np.uint8)  # [R, V]
    head_ids = np.argsort(-rows, axis=1, kind="stable")[:, :HEAD].astype(np.uint32)  # [R, H]
    head_logits = np.take_along_axis(rows, head_ids.astype(np.int64), axis=1).astype(np.float16)
    return {"top": top[:, 0].astype(np.float32), "tail_code": code, "head_ids": head_ids, "head_logits": head_logits}


def decode_rows(
    top: npt.NDArray[np.generic],
    code: npt.NDArray[np.generic],
    head_ids: npt.NDArray[np.generic],
    head_logits: npt.NDArray[np.generic],
) -> npt.NDArray[np.float64]:
    """The inverse of :func:`encode_rows` (up to the stated rounding) -> [R, V] float64."""
    rows = np.asarray(top, dtype=np.float64)[:, None] - np.asarray(code, dtype=np.float64) / TAIL_STEP
    ids = np.asarray(head_ids, dtype=np.int64)
    np.put_along_axis(rows, ids, np.asarray(head_logits, dtype=np.float64), axis=1)
    return rows


def load_pairs(path: Path = DATA) -> list[RealPair]:
    """Every stored pair (no model needed)."""
    with np.load(path) as data:
        names = [str(n) for n in data["names"]]
        pairs = []
        for i, name in enumerate(names):

            def rows(which: str, i: int = i) -> npt.NDArray[np.float64]:
                key = f"{i}_{which}"
                return decode_rows(
                    data[key + "_top"], data[key + "_tail_code"], data[key + "_head_ids"], data[key + "_head_logits"]
                )

            pairs.append(RealPair(name, rows("target"), rows("draft")))
    return pairs
