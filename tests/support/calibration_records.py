"""Synthetic calibration records: random scores, flips and prompt kinds, for the calibration
artifact's tests (no model runs); :func:`artifact`, a saved artifact built from them, and
:func:`edit`, an edit of its JSON resealed as an attacker who knows the format would."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from verispec.reference.calibration import Records, build
from verispec.reference.calibration_seal import SEAL_FIELD, seal
from verispec.reference.early_exit import Lens


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


def artifact(tmp_path: Path, n_prompts: int = 120) -> Path:
    rng = np.random.default_rng(3)
    lens = Lens(
        (3, 5), rng.standard_normal((2, 4, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    )
    cal = build(
        synthetic_records(n_prompts=n_prompts, kinds=("chat", "code")),
        q="0.9",
        model_sha256="b" * 64,
        model_name="m",
        n_layer=6,
        lens=lens,
        n_lens=7,
        ridge=0.5,
    )
    path = tmp_path / "cal.json"
    cal.save(path)
    return path


def edit(path: Path, change: Callable[[dict[str, Any]], None], *, reseal: bool = True) -> None:
    """Apply ``change`` to the JSON; with ``reseal`` recompute the (unkeyed) seal as an attacker
    who knows the format would, so only the range checks stand in the way."""
    raw = json.loads(path.read_text())
    change(raw)
    if reseal:
        body = {k: v for k, v in raw.items() if k != SEAL_FIELD}
        raw[SEAL_FIELD] = seal(body, lens_of(path, raw), None)
    path.write_text(json.dumps(raw))


def lens_of(path: Path, raw: dict[str, Any]) -> Lens | None:
    if not raw.get("lens"):
        return None
    with np.load(path.parent / raw["lens"]["file"]) as data:
        return Lens(tuple(int(d) for d in data["depths"]), data["weight"], data["bias"])
