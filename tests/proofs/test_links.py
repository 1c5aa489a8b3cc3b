"""Obligations and code name each other: every ``relied_on_by`` target exists and links back.

A target is a dotted path to a module attribute. It links back when its docstring, or its
module's docstring, names the obligation (the family name, without a ``[n=..]`` index). Code
written alongside the proofs (reference.certificate, reference.conformal) must name the exact
family; other modules may name the obligation module instead (``proofs.lossless`` or
``proofs/lossless.py``), which points the reader at the same list of lemmas.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

from verispec.proofs.catalog import all_obligations

STRICT_MODULES = ("reference.certificate", "reference.conformal")

PAIRS = sorted({(ob.name.split("[")[0], target) for ob in all_obligations() for target in ob.relied_on_by})


def _resolve(target: str) -> tuple[ModuleType, object]:
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        obj: object = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return module, obj
    raise AssertionError(f"cannot import any module prefix of {target}")


@pytest.mark.parametrize(("family", "target"), PAIRS, ids=[f"{f}<-{t}" for f, t in PAIRS])
def test_code_links_back(family: str, target: str) -> None:
    module, obj = _resolve(target)
    text = (inspect.getdoc(obj) or "") + "\n" + (inspect.getdoc(module) or "")
    proof_module = family.rsplit(".", 1)[0]
    if module.__name__ in STRICT_MODULES:
        assert family in text, f"{target}'s docstring does not name {family}"
    else:
        refs = (family, proof_module, proof_module.replace(".", "/") + ".py")
        assert any(ref in text for ref in refs), f"{target}'s docstring names none of {refs}"
