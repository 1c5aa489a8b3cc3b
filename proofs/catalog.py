"""Every obligation, in the order ``python -m proofs`` prints them."""

from __future__ import annotations

import importlib

from proofs.core import Obligation

MODULES: tuple[str, ...] = (
    "proofs.lossless",
    "proofs.tree",
    "proofs.argmax",
    "proofs.tukey",
    "proofs.conformal",
    "proofs.union",
    "proofs.float32",
)


def all_obligations() -> list[Obligation]:
    """The ``OBLIGATIONS`` of every module in :data:`MODULES`, concatenated; names are unique."""
    obligations: list[Obligation] = []
    for name in MODULES:
        module = importlib.import_module(name)
        obligations.extend(module.OBLIGATIONS)
    names = [ob.name for ob in obligations]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate obligation names: {duplicates}")
    return obligations
