"""Every obligation, in the order ``python -m verispec.proofs`` prints them."""

from __future__ import annotations

import importlib

from verispec.proofs.core import Obligation

MODULES: tuple[str, ...] = (
    "verispec.proofs.lossless",
    "verispec.proofs.tree",
    "verispec.proofs.argmax",
    "verispec.proofs.tukey",
    "verispec.proofs.conformal",
    "verispec.proofs.union",
    "verispec.proofs.float32",
    "verispec.proofs.sparse_head",
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
